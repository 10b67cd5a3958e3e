"""`mcp.json`: the MCP servers the user has added, in the `mcpServers` format of Claude Desktop, Cursor and LM Studio.

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"]},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}, "disabled": true}
    }}

A server runs a `command` (with `args` and `env`) and speaks over its stdin and stdout, or is reached at a `url`
(streamable HTTP, with `headers`). The file lives in the config folder (`runtime.paths.config_dir()`). One bad
entry costs only itself: `load_config` returns the good servers and one line per problem; only a file that is
not JSON at all raises. Secrets live in `env` and `headers` (and sometimes in `args` or the URL): `as_display()`
and `repr()` show them redacted, so a log line or a dialog built from either cannot leak them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from runtime.atomic import write_text_atomic
from runtime.errors import UserError
from runtime.paths import config_dir, private_dir

FILE_NAME = "mcp.json"
HIDDEN = "••••••"
# The source of SpecQuant's own tools (the documents search): a server by that name would share their approvals.
RESERVED = "built-in"
# `type` as other apps write it; other fields (Cline's `autoApprove`, `timeout`) are ignored: approvals are ours.
_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamableHttp": "http"}
# A value after such a flag, or in such a `--flag=value`/`key=value` argument, is shown redacted.
_SECRET_WORD = re.compile(r"key|token|secret|passw|auth|bearer|credential|cookie|session", re.IGNORECASE)


def config_path() -> Path:
    """Where `mcp.json` lives by default: the per-user config folder (runtime.paths)."""
    return config_dir() / FILE_NAME


@dataclass(frozen=True, repr=False)
class ServerConfig:
    """One server: `command`/`args`/`env` (stdio) or `url`/`headers` (streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    disabled: bool = False

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def as_display(self) -> dict[str, Any]:
        """The entry as it may be shown or logged: values of `env` and `headers` hidden, and secret-looking
        arguments and URL parts too."""
        shown: dict[str, Any] = {}
        if self.command is not None:
            shown["command"] = self.command
            shown["args"] = redact_args(self.args)
            if self.env:
                shown["env"] = {k: HIDDEN for k in self.env}
        else:
            shown["url"] = redact_url(self.url or "")
            if self.headers:
                shown["headers"] = {k: HIDDEN for k in self.headers}
        if self.disabled:
            shown["disabled"] = True
        return shown

    def summary(self) -> str:
        """One line for a log or a list: the command and its arguments, or the URL, redacted."""
        shown = self.as_display()
        return " ".join([shown["command"], *shown["args"]]) if self.command is not None else shown["url"]

    def __repr__(self) -> str:  # the dataclass' own repr would print the secrets
        return f"ServerConfig({self.name!r}, {self.as_display()!r})"


@dataclass(frozen=True)
class McpConfig:
    """The servers read from one file, and one line per problem (naming the file and the server)."""

    path: Path
    servers: dict[str, ServerConfig] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def enabled(self) -> dict[str, ServerConfig]:
        return {name: s for name, s in self.servers.items() if not s.disabled}


def load_config(path: Path | None = None) -> McpConfig:
    """Read `mcp.json` (a missing file is an empty config). Raises UserError only for a file that cannot be read
    or is not JSON; a malformed entry is left out with a problem line, and a command that is not installed is
    kept (it may be installed later; the host reports it as failed) with a problem line too."""
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return McpConfig(path)
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the MCP server list: {e}") from None
    servers, problems = parse_servers(_load_json(text, str(path)), str(path), path.parent)
    return McpConfig(path, servers, tuple(problems))


def parse_servers(
    data: Any, where: str = FILE_NAME, folder: Path | None = None
) -> tuple[dict[str, ServerConfig], list[str]]:
    """The servers of a parsed `{"mcpServers": {...}}` document and the problems found (one line each); a
    relative command path is read from `folder` (the file's). A document without `mcpServers` as an object
    raises UserError: nothing in it can be read."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
        raise UserError(f'{where}: expected {{"mcpServers": {{"name": {{...}}}}}}')
    servers: dict[str, ServerConfig] = {}
    problems: list[str] = []
    for name, entry in data.get("mcpServers", {}).items():
        try:
            server = server_from_entry(name, entry, folder)
        except ValueError as e:
            problems.append(f"{where}: server {name!r}: {e}")
            continue
        servers[name] = server
        if not server.disabled and (missing := missing_command(server)):
            problems.append(f"{where}: server {name!r}: {missing}")
    return servers, problems


def server_from_entry(name: str, entry: Any, folder: Path | None = None) -> ServerConfig:
    """One `mcpServers` entry as a ServerConfig; raises ValueError with what is wrong (one short phrase). A
    relative command path (`./server`, `bin/server`) is read from `folder`, the config file's, never from the
    current folder; without a folder it is refused."""
    if not name.strip():
        raise ValueError("the name is empty")
    if name.strip().casefold() == RESERVED:
        raise ValueError(f"the name {RESERVED!r} is SpecQuant's own tools: give the server another name")
    if not isinstance(entry, dict):
        raise ValueError("expected an object with a command or a url")
    kind = entry.get("type")
    if kind == "sse":
        raise ValueError("the old SSE transport is not supported: use the server's streamable HTTP url")
    if kind is not None and kind not in _TYPES:
        raise ValueError(f"unknown type {kind!r} (expected stdio or http)")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise ValueError("disabled must be true or false")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise ValueError("give either a command (a local program) or a url (a server on the network), not both"
                         if has_command else "no command or url")
    if has_command:
        if kind is not None and _TYPES[kind] != "stdio":
            raise ValueError(f"type {kind!r} needs a url, not a command")
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise ValueError("command must be a non-empty string")
        command = _anchored(command, folder)
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError("args must be a list of strings")
        env = _string_map(entry.get("env", {}), "env")
        if "headers" in entry:
            raise ValueError("headers only apply to a url")
        return ServerConfig(name, command=command, args=tuple(args), env=env, disabled=disabled)
    if kind is not None and _TYPES[kind] != "http":
        raise ValueError(f"type {kind!r} needs a command, not a url")
    url = entry["url"]
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise ValueError("url must be an http:// or https:// address")
    if "args" in entry or "env" in entry:
        raise ValueError("args and env only apply to a command")
    headers = _string_map(entry.get("headers", {}), "headers")
    return ServerConfig(name, url=url, headers=headers, disabled=disabled)


def _anchored(command: str, folder: Path | None) -> str:
    """`command` as it will run: a bare name is looked up on PATH, an absolute path is kept, and a relative
    path is read from `folder` (ValueError without one: the current folder is not the user's choice)."""
    has_separator = os.sep in command or bool(os.altsep and os.altsep in command)
    if not has_separator or Path(command).is_absolute():
        return command
    if folder is None:
        raise ValueError(f"command {command!r} is a relative path: give the full path")
    return str(folder.expanduser().absolute() / command)


def missing_command(server: ServerConfig) -> str | None:
    """Why the server's command cannot run here (not found, not executable), or None."""
    if server.command is None:
        return None
    path = server.env.get("PATH") if "PATH" in server.env else None
    if shutil.which(server.command, path=path) is not None:
        return None
    if os.sep in server.command or (os.altsep and os.altsep in server.command):
        return f"command {server.command!r} does not exist or is not executable"
    return f"command {server.command!r} was not found on PATH"


def check_snippet(text: str, name: str | None = None) -> tuple[dict[str, ServerConfig], list[str]]:
    """What the Add server dialog's pasted text holds: a whole `{"mcpServers": {...}}`, a map of servers
    (`{"name": {...}}`) or one entry (`{"command": ...}`, named by `name`). Returns the servers and the problems;
    raises UserError for text that is not JSON or has no server in it."""
    data = _load_json(text, "the pasted text")
    if isinstance(data, dict) and ("command" in data or "url" in data):
        if not name:
            raise UserError("the pasted text is one server: give it a name")
        data = {"mcpServers": {name: data}}
    elif isinstance(data, dict) and "mcpServers" not in data:
        data = {"mcpServers": data}
    servers, problems = parse_servers(data, "the pasted text")
    if not servers and not problems:
        raise UserError("the pasted text holds no server")
    return servers, problems


def add_server(name: str, entry: Mapping[str, Any], path: Path | None = None, replace: bool = False) -> ServerConfig:
    """Add (or with `replace`, overwrite) one server in the file, atomically, keeping everything else in it as
    it was. Raises UserError for a malformed entry, a taken name, or a file that is not JSON."""
    path = path or config_path()
    try:
        server = server_from_entry(name, dict(entry), path.parent)
    except ValueError as e:
        raise UserError(f"server {name!r}: {e}") from None
    data = _read_raw(path)
    if name in data["mcpServers"] and not replace:
        raise UserError(f"{path}: there is already a server named {name!r}")
    data["mcpServers"][name] = dict(entry)
    _write_raw(path, data)
    return server


def remove_server(name: str, path: Path | None = None) -> bool:
    """Remove one server from the file, atomically; False if there was none by that name."""
    path = path or config_path()
    data = _read_raw(path)
    if name not in data["mcpServers"]:
        return False
    del data["mcpServers"][name]
    _write_raw(path, data)
    return True


def redact_args(args: tuple[str, ...] | list[str]) -> list[str]:
    """Arguments with secret-looking values hidden: the one after `--api-key`, the value of `--token=...`."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(HIDDEN)
            hide_next = False
        elif "=" in arg and _SECRET_WORD.search(arg.split("=", 1)[0]):
            out.append(arg.split("=", 1)[0] + "=" + HIDDEN)
        else:
            out.append(arg)
            hide_next = arg.startswith("-") and bool(_SECRET_WORD.search(arg))
    return out


def redact_url(url: str) -> str:
    """A URL without its user and password, and with its query's values hidden (API keys often ride there)."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    query = "&".join(f"{p.split('=', 1)[0]}={HIDDEN}" if "=" in p else p for p in parts.query.split("&") if p)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _string_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{what} must be an object of strings")
    return dict(value)


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None


def _read_raw(path: Path) -> dict[str, Any]:
    """The file as parsed JSON with an `mcpServers` object, for an edit (an empty one if there is no file)."""
    try:
        data = _load_json(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        return {"mcpServers": {}}
    except OSError as e:
        raise UserError(f"{path}: cannot read the MCP server list: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.setdefault("mcpServers", {}), dict):
        raise UserError(f'{path}: expected {{"mcpServers": {{"name": {{...}}}}}}')
    return data


def _write_raw(path: Path, data: dict[str, Any]) -> None:
    try:
        private_dir(path.parent)  # the file holds API keys: owner-only, as every file of ours (runtime.atomic)
        write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    except OSError as e:
        raise UserError(f"{path}: cannot save the MCP server list: {e}") from None
