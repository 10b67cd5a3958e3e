"""The benchmark's memory table: each configuration answers once in a process of its own, so the peak
resident memory it shows (anonymous plus file-backed, over the process tree) is that configuration's alone,
and stands beside the placement plan's estimate for the same answer."""

from __future__ import annotations

from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from runtime import child

CHILD_TIMEOUT_S = 600.0


def _child(root: str, model: str, settings: Any, config: str, prompt: str, max_tokens: int, out: Connection) -> None:
    try:
        from commands.bench.configs import parse_config
        from commands.bench.runners import run_engine
        from runtime.engine.engine import Engine
        from runtime.machine.resources import PeakMemory

        with PeakMemory() as peak:
            engine = Engine(model, settings, root=Path(root))
            rec = run_engine(engine, parse_config(config), prompt, max_tokens)
        engine.close()
        out.send({**peak.peak.as_dict(), "estimate_mb": round(rec["plan_ram_bytes"] / 1e6, 1)})
    except Exception as e:  # reported in the table, not raised: one configuration's failure is a fact
        out.send({"error": f"{e.__class__.__name__}: {e}"})


def measure_memory(root: Path, model: str, settings: Any, config: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """Peak resident memory of one configuration answering `prompt` in a fresh process, and the estimate."""
    try:  # not a daemon: its Engine may probe the CPU kernels in a child of its own
        result = child.run_in_child(_child, (str(root), model, settings, config, prompt, max_tokens),
                           timeout=CHILD_TIMEOUT_S, daemon=False, what="its process")
    except child.ChildFailed as e:
        result = {"error": str(e)}
    if "total_mb" in result and result.get("estimate_mb"):
        result["estimate_error"] = round(result["estimate_mb"] / result["total_mb"] - 1, 4)
    return result


def format_memory(memory: dict[str, dict[str, Any]]) -> str:
    lines = [
        "peak resident memory per configuration (own process; MB)",
        f"{'config':<18} {'anonymous':>10} {'file':>8} {'total':>8} {'plan':>8} {'plan vs measured':>17}",
    ]
    for name, m in memory.items():
        if "error" in m:
            lines.append(f"{name:<18} {m['error']}")
            continue
        err, plan = m.get("estimate_error"), m.get("estimate_mb")  # llama.cpp's tool has no plan of ours
        lines.append(
            f"{name:<18} {m['anon_mb']:>10.0f} {m['file_mb']:>8.0f} {m['total_mb']:>8.0f} "
            f"{'-' if plan is None else f'{plan:.0f}':>8} {'-' if err is None else f'{err:+.1%}':>17}"
        )
    return "\n".join(lines)
