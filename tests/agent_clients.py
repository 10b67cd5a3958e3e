"""The coding agents of issue #60 (Claude Code, Codex CLI, OpenCode) run as docs/api.md's recipes say: where they
are installed, how each is pointed at a server and run headless, and a capture server that records what they send.

`python3 -m tests.agent_clients` captures each client's requests of one headless turn and writes them, scrubbed of
this machine's ids and paths, to tests/data/agents/captured/ (tests/test_api_agents_captured.py replays them;
tests/test_real_agents.py runs the clients against `specquant serve`). The clients install
from npm outside the repository:

    npm install --prefix ~/.cache/specquant/agents @anthropic-ai/claude-code @openai/codex opencode-ai

(or SPECQUANT_AGENTS_DIR names another prefix).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "agents" / "captured"
PROMPT = "Read the file notes.txt and say what it holds."
NOTES = "buy milk\n"


def agents_dir() -> Path:
    return Path(os.environ.get("SPECQUANT_AGENTS_DIR") or Path.home() / ".cache" / "specquant" / "agents")


@dataclass(frozen=True)
class Client:
    """One agent: its npm package, its command, and its recipe (the settings that point it at a server)."""

    name: str  # the stem of its files in tests/data/agents/captured/
    package: str
    binary: str
    headless: Callable[[str, str], list[str]]  # (model, prompt) -> the arguments of one headless turn
    recipe: Callable[[str, str, Path, Path], dict[str, str]]  # (base URL, model, home, project) -> environment

    def path(self) -> Path | None:
        found = agents_dir() / "node_modules" / ".bin" / self.binary
        return found if found.exists() else None

    def version(self) -> str:
        """As its package says (its own --version may need a terminal)."""
        manifest = agents_dir() / "node_modules" / self.package / "package.json"
        return json.loads(manifest.read_text())["version"]

    def run(self, base: str, model: str, root: Path, timeout: float, extra_env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        """One headless turn in a fresh home and project under `root` (a notes.txt in it), as a user runs it."""
        binary = self.path()
        assert binary is not None, f"{self.name} is not installed under {agents_dir()}"
        home, project = root / "home", root / "project"
        home.mkdir(parents=True, exist_ok=True)
        project.mkdir(parents=True, exist_ok=True)
        (project / "notes.txt").write_text(NOTES)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
        # $PWD too: OpenCode finds its project (and its opencode.json) by it, not by its working directory.
        env |= {"PWD": str(project), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
                "XDG_STATE_HOME": str(home / ".local/state")}
        env |= self.recipe(base, model, home, project) | (extra_env or {})
        return subprocess.run([str(binary), *self.headless(model, PROMPT)], cwd=project, env=env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)


def _claude_code(base: str, model: str, home: Path, project: Path) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_AUTH_TOKEN": "unused", "ANTHROPIC_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model}


def _codex(base: str, model: str, home: Path, project: Path) -> dict[str, str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "specquant"\n\n[model_providers.specquant]\nname = "SpecQuant"\n'
        f'base_url = "{base}/v1"\nwire_api = "responses"\n')
    return {"CODEX_HOME": str(codex_home)}


def _opencode(base: str, model: str, home: Path, project: Path) -> dict[str, str]:
    config = {"$schema": "https://opencode.ai/config.json", "provider": {"specquant": {
        "npm": "@ai-sdk/openai-compatible", "name": "SpecQuant",
        "options": {"baseURL": f"{base}/v1", "timeout": False},
        "models": {model: {"name": f"{model} (SpecQuant)"}}}}}
    (project / "opencode.json").write_text(json.dumps(config, indent=1))
    return {}


CLIENTS = (
    Client("claude_code", "@anthropic-ai/claude-code", "claude", lambda model, prompt: ["-p", prompt],
           _claude_code),
    Client("codex", "@openai/codex", "codex", lambda model, prompt: ["exec", "--skip-git-repo-check", prompt],
           _codex),
    Client("opencode", "opencode-ai", "opencode", lambda model, prompt: ["run", "-m", f"specquant/{model}", prompt],
           _opencode),
)


# --- the capture server --------------------------------------------------------------------------------------
def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = ""
    for name, data in events:
        out += (f"event: {name}\n" if name else "") + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
    return out.encode()


def _answer(path: str, body: Any) -> tuple[int, str, bytes]:
    """A minimal valid answer ("OK") in the shape of the API `path` belongs to, streamed when asked."""
    stream = isinstance(body, dict) and bool(body.get("stream"))
    model = body.get("model", "m") if isinstance(body, dict) else "m"
    now = int(time.time())
    if path.endswith("/models"):
        return 200, "application/json", json.dumps({"object": "list", "data": [
            {"id": model, "object": "model", "created": now, "owned_by": "capture"}]}).encode()
    if path.endswith("/count_tokens"):
        return 200, "application/json", b'{"input_tokens": 10}'
    if path.endswith("/messages"):
        msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 0}}
        if not stream:
            done = msg | {"content": [{"type": "text", "text": "OK"}], "stop_reason": "end_turn"}
            return 200, "application/json", json.dumps(done).encode()
        return 200, "text/event-stream", _sse([(e, {"type": e} | d) for e, d in [
            ("message_start", {"message": msg}),
            ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "OK"}}),
            ("content_block_stop", {"index": 0}),
            ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 1}}),
            ("message_stop", {})]])
    if path.endswith("/responses"):
        item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "OK", "annotations": []}]}
        started = {"id": "resp_1", "object": "response", "created_at": now, "model": model, "status": "in_progress",
                   "output": []}
        done = started | {"status": "completed", "output": [item], "usage": {
            "input_tokens": 10, "output_tokens": 1, "total_tokens": 11, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}}
        if not stream:
            return 200, "application/json", json.dumps(done).encode()
        events = [("response.created", {"response": started}),
                  ("response.output_item.added", {"output_index": 0, "item": item | {"status": "in_progress",
                                                                                     "content": []}}),
                  ("response.output_text.delta", {"item_id": "msg_1", "output_index": 0, "content_index": 0,
                                                  "delta": "OK"}),
                  ("response.output_item.done", {"output_index": 0, "item": item}),
                  ("response.completed", {"response": done})]
        return 200, "text/event-stream", _sse([(e, {"type": e, "sequence_number": i} | d)
                                               for i, (e, d) in enumerate(events)])
    if path.endswith("/chat/completions"):
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": now, "model": model}
        usage = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
        if not stream:
            return 200, "application/json", json.dumps(base | {"object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}]}).encode()
        return 200, "text/event-stream", _sse([
            (None, base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]}),
            (None, base | {"choices": [{"index": 0, "delta": {"content": "OK"}, "finish_reason": None}]}),
            (None, base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            (None, base | {"choices": [], "usage": usage}), (None, "[DONE]")])
    return 404, "application/json", b'{"error": {"message": "not here", "type": "not_found_error"}}'


class Capture:
    """A server on 127.0.0.1 that records every request (method, path, headers, body) and answers "OK"."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_any(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.loads(raw) if raw else None
                seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                             "body": body})
                status, kind, data = _answer(self.path.split("?")[0], body)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- scrubbing: this machine's ids and paths out, the shapes as sent ------------------------------------------
DROPPED_HEADERS = {"host", "content-length", "connection", "accept-encoding"}  # the replay's own connection's


def scrub(record: dict[str, Any], root: Path) -> dict[str, Any]:
    """The request with this machine's paths, ids and times replaced by stand-ins of the same shape (each distinct
    id by its own stand-in, so that a session's ids still match across fields)."""
    headers = {k: v for k, v in record["headers"].items() if k.lower() not in DROPPED_HEADERS}
    text = json.dumps({**record, "headers": headers})
    for path, stand_in in ((root / "project", "/home/user/project"), (root / "home", "/home/user"),
                           (root, "/home/user")):
        # Claude Code names a project's folder by its path, every other character a dash.
        dashed = re.sub(r"[^a-zA-Z0-9]", "-", str(path)), stand_in.replace("/", "-")
        text = text.replace(str(path), stand_in).replace(*dashed)
    stand_ins: dict[str, str] = {}
    counter = itertools.count(1)

    def same_shape(match: re.Match[str]) -> str:
        found = match.group(0)
        if found not in stand_ins:
            n = f"{next(counter):x}"
            stand_ins[found] = re.sub(r"[0-9a-zA-Z]", "0", found[: len(found) - len(n)]) + n
        return stand_ins[found]

    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    text = re.sub(rf"{uuid}|\b[0-9a-f]{{32,64}}\b|(?<=ses_)[0-9a-zA-Z]{{26}}|(?<=msg_)[0-9a-zA-Z]{{26}}", same_shape,
                  text)
    text = re.sub(r"(?<=\\\"turn_started_at_unix_ms\\\":)\d+", "1796650000000", text)
    return json.loads(text)


def purpose(record: dict[str, Any]) -> str:
    """The file stem's suffix: "" for the agent's turn (the request with tools), else what the request is for."""
    body = record["body"]
    if isinstance(body, dict) and body.get("tools"):
        return ""
    text = json.dumps(body).lower()
    return "_title" if "title" in text else "_other"


def capture_all(out: Path = DATA, model: str = "smollm2-135m-instruct") -> None:
    for client in CLIENTS:
        if client.path() is None:
            print(f"{client.name}: not installed under {agents_dir()}, skipped", file=sys.stderr)
            continue
        capture = Capture()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp).resolve()
                done = client.run(capture.base, model, root, timeout=180)
                print(f"{client.name} {client.version()}: exit {done.returncode}, "
                      f"{[(r['method'], r['path']) for r in capture.seen]}", file=sys.stderr)
                saved: set[str] = set()
                for record in capture.seen:
                    if record["method"] != "POST":
                        continue
                    stem = client.name + purpose(record)
                    if stem in saved:
                        continue
                    saved.add(stem)
                    described = {"client": f"{client.package} {client.version()}, docs/api.md's recipe, a headless "
                                           f"turn: {PROMPT!r}; captured by tests/agent_clients.py"}
                    (out / f"{stem}.json").write_text(json.dumps(described | scrub(record, root), indent=1) + "\n")
        finally:
            capture.close()


if __name__ == "__main__":
    capture_all()
