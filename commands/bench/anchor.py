"""llama.cpp's own speculative decoder as a benchmark configuration: `llama-speculative-simple`, built by
`./setup.sh bench` from the llama.cpp source that llama-cpp-python vendors, with the same flavour flags,
run on the same pair, threads, context and chat-formatted prompt tokens as our loop.

Its timings are its own: "encoded" (the prompt's prefill) plus "decoded" (every generated token) is the
end-to-end latency without model loading, as ours is; decode tok/s is its generated tokens over its decode
time. It prints no time to first token.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from runtime.errors import UserError
from runtime.machine.resources import PeakMemory
from runtime.models.cache import default_wheel_dir

TOOL = "llama-speculative-simple"
ANCHOR = "llama.cpp"  # the configuration's name: llama.cpp[:kN], N its --spec-draft-n-max
ANCHOR_PAIR = ("f16", "q4_k_m")
TIMEOUT_S = 900.0
_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_STAT = re.compile(r"\b(n_drafted|n_accept|n_predict)\s*=\s*(\d+)")  # after the log's time stamp


def installed_flavour() -> str:
    """The flavour of the llama-cpp-python in use: one CPU library per level means the portable build."""
    from runtime.machine.hardware import variant_folder

    return "cpu-all-variants" if variant_folder() is not None else "cpu-avx2"


def tool_path() -> Path | None:
    """$SPECQUANT_LLAMA_CPP_TOOL, else where `./setup.sh bench` puts it for the installed flavour."""
    override = os.environ.get("SPECQUANT_LLAMA_CPP_TOOL")
    path = Path(override) if override else default_wheel_dir(installed_flavour()) / "llama.cpp" / TOOL
    return path if path.is_file() and os.access(path, os.X_OK) else None


def missing_reason() -> str:
    where = default_wheel_dir(installed_flavour()) / "llama.cpp"
    return f"llama.cpp's {TOOL} is not built (looked in {where}); `./setup.sh bench` builds it"


def pinned_tool(tool: Path, variant: str, into: Path) -> Path:
    """The tool in a folder of its own whose only CPU kernel library is `variant`'s, so that it runs the same
    kernels as our loop. Its ggml would otherwise load the best-scoring variant by CPUID alone, which can die
    with SIGILL (runtime.machine.cpu_variant). A copy of the binary (its libraries are found beside its real path)
    and links to everything else; a build with one CPU backend built in is returned as it is."""
    variants = [p for p in tool.parent.iterdir() if p.name.startswith("libggml-cpu-")]
    if not variants:
        return tool
    if not any(p.name.startswith(f"libggml-cpu-{variant}.") for p in variants):
        raise UserError(f"{tool.parent} has no {variant} CPU kernels: rebuild it with `./setup.sh bench`")
    for p in tool.parent.iterdir():
        if p == tool or (p in variants and not p.name.startswith(f"libggml-cpu-{variant}.")):
            continue
        (into / p.name).symlink_to(p)
    shutil.copy2(tool, into / tool.name)
    return into / tool.name


class LlamaCppRunner:
    """Runs the tool once per prompt; its process is separate, so its peak memory is measured too."""

    def __init__(self, engine: Any, n_max: int, tool: Path) -> None:
        from runtime.machine.hardware import ensure_backends

        self.engine = engine
        self.n_max = n_max
        folder = Path(tempfile.mkdtemp(prefix="specquant-anchor-"))
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        variant = ensure_backends().variant
        self.tool = tool if variant == "built-in" else pinned_tool(tool, variant, folder)

    def command(self, prompt_file: Path, max_tokens: int) -> list[str]:
        parent, draft = (str(self.engine.model.tier_path(t)) for t in ANCHOR_PAIR)
        threads = str(self.engine.backend(ANCHOR_PAIR[0]).threads)
        return [
            str(self.tool),
            *("-m", parent, "-md", draft, "-f", str(prompt_file), "-n", str(max_tokens)),
            *("-c", str(self.engine.settings.n_ctx), "--spec-type", "draft-simple"),
            *("--spec-draft-n-max", str(self.n_max)),
            *("-t", threads, "-tb", threads, "-td", threads, "-tbd", threads),
            *("--temp", "0", "--top-k", "1", "--seed", "0", "-ngl", "0", "--no-escape"),
        ]

    def run(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        parent = self.engine.backend(ANCHOR_PAIR[0])
        tokens = self.engine.render(parent, [{"role": "user", "content": prompt}])
        text = parent.detokenize(tokens, special=True)  # the tool tokenizes with special tokens parsed
        with tempfile.TemporaryDirectory() as tmp:
            prompt_file = Path(tmp) / "prompt.txt"
            # The tool drops one trailing newline of a prompt file (a chat prompt ends in one) and would turn
            # "\\n" in a code prompt into a newline unless told not to: --no-escape.
            prompt_file.write_text(text + "\n", encoding="utf-8")
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                self.command(prompt_file, max_tokens),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
            with PeakMemory(proc.pid) as peak:
                try:
                    out, err = proc.communicate(timeout=TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
                    raise UserError(f"{self.tool.name} did not finish within {TIMEOUT_S:.0f} s") from None
            wall = time.perf_counter() - t0
        log = err.decode("utf-8", "replace")
        enc, dec = _ENCODED.search(log), _DECODED.search(log)
        if proc.returncode != 0 or not enc or not dec:
            last = log.strip().splitlines()[-1:] or ["no output"]
            raise UserError(f"{self.tool.name} failed (exit {proc.returncode}): {last[0]}")
        stats = {k: int(v) for k, v in _STAT.findall(log)}
        # It may run past -n by up to n-max accepted tokens: compare and time the same length as ours.
        ids = parent.tokenize(_answer(out.decode("utf-8", "replace"), text), special=False)[:max_tokens]
        n, decode_s = int(dec.group(1)), float(dec.group(2))
        kept = min(n, max_tokens)
        drafted, accepted = stats.get("n_drafted", 0), stats.get("n_accept", 0)
        return {
            "tokens": kept,
            "ttft_s": None,
            "tok_per_s": n / decode_s if decode_s > 0 else None,
            "latency_s": float(enc.group(2)) + decode_s * kept / max(n, 1),
            "wall_s": wall,  # with model loading, for the record
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": accepted / drafted if drafted else None,
            "level": None,
            "text": parent.detokenize(ids),
            "token_ids": ids,
            "overhead": None,
            "peak_memory": peak.peak.as_dict(),
        }


def _answer(stdout: str, prompt_text: str) -> str:
    """The generated text: the tool echoes the prompt after two newlines, then the answer, then two pairs
    of newlines (its closing log lines)."""
    body = stdout[2:] if stdout.startswith("\n\n") else stdout
    if body.startswith(prompt_text):
        body = body[len(prompt_text) :]
    for _ in range(2):
        body = body[:-2] if body.endswith("\n\n") else body
    return body
