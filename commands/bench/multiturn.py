"""The multi-turn workload (#53): conversations that edit the same code, tool loops that repeat their calls,
answers that quote earlier answers, and the same requests again in new chats, in file order on one engine,
so each answer may draft from everything said before it (runtime/decode/drafts/suffix.py).

A prompt line is one conversation: `turns`, messages in order, where an assistant message without content is
the model's to write (timed); the others (a user's question, a fixed tool call, a tool's result) are sent as
written. Three engines run every conversation, interleaved (the order rotates): `suffix` (the default: every
source, suffix lookup included), `no_suffix` (the same without it) and `plain` (plain F16 decoding). Each
repeat is one pass over the whole workload with the pools emptied first, as a new process would start.
Per mode: end to end, time to first token and decode speed; paired ratios to plain with bootstrap intervals;
drafted and accepted tokens per source; and whether the answers are the same tokens as plain's."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from commands.bench.runners import rotated, timed_answer
from commands.bench.stats import bootstrap, ratio_text
from runtime.decode.drafts import offered
from runtime.engine.engine import Engine, EngineSettings
from runtime.errors import UserError

MULTITURN = "multiturn"  # a prompt set's "kind" for this workload
MODES = ("suffix", "no_suffix", "plain")


def turns(item: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A prompt line's messages, checked: each a role and (but for the answers to write) a string content."""
    raw = item.get("turns")
    if not isinstance(raw, list) or not any(_to_write(m) for m in raw if isinstance(m, dict)):
        raise UserError(f"{where}: 'turns' must be a list of messages with at least one assistant turn to write")
    for m in raw:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise UserError(f"{where}: each turn needs a 'role'")
        if not _to_write(m) and not isinstance(m.get("content"), str):
            raise UserError(f"{where}: a {m['role']} turn needs a string 'content'")
    return raw


def _to_write(message: dict[str, Any]) -> bool:
    return message.get("role") == "assistant" and message.get("content") is None


def multiturn_engines(settings: EngineSettings | None, model: str | None) -> dict[str, Engine]:
    """The engines: with suffix lookup (the default), without it, and one for plain decoding."""
    base = settings or EngineSettings()
    return {
        "suffix": Engine(model, base),
        "no_suffix": Engine(model, replace(base, spec=replace(base.spec, suffix=False), said_tokens=0)),
        "plain": Engine(model, base),
    }


def multiturn_conversation(engine: Engine, item: dict[str, Any], options: Any) -> list[dict[str, Any]]:
    """Each answer of the conversation written by `engine`, in order, with its timings and counters."""
    chat: list[dict[str, Any]] = []
    out = []
    for message in item["turns"]:
        if not _to_write(message):
            chat.append({"role": message["role"], "content": message["content"]})
            continue
        answer, timed = timed_answer(engine, chat, options)
        s = answer.last.stats
        out.append({
            **timed, "by_kind": {k.name: [s.drafted_by(k.name), s.accepted_by(k.name)] for k in offered()},
            "token_ids": list(answer.token_ids),
        })
        chat.append({"role": "assistant", "content": answer.text})
    return out


def bench_multiturn(
    model: str | None, settings: EngineSettings | None, config: Any, items: list[dict[str, Any]],
    max_tokens: int, repeats: int, log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every conversation on the three engines, `repeats` passes; per-answer records and their summary."""
    options = config.options(max_tokens)
    per_mode = {"suffix": options, "no_suffix": options, "plain": replace(options, no_spec=True)}
    trio = multiturn_engines(settings, model)
    runs: list[dict[str, Any]] = []
    try:
        for mode in MODES:  # warm-up, not counted: loading, and the machine's one-time cost probe
            multiturn_conversation(trio[mode], {"turns": items[0]["turns"][:2]}, replace(per_mode[mode], max_tokens=4))
        for r in range(repeats):
            for e in trio.values():  # each pass starts as a new process would: nothing said before
                e.reset_caches()
                if e.said is not None:
                    e.said.clear()
            for i, item in enumerate(items):
                got = {m: multiturn_conversation(trio[m], item, per_mode[m]) for m in rotated(MODES, r + i)}
                for n in range(len(got["plain"])):
                    rec: dict[str, Any] = {"id": item["id"], "answer": n, "repeat": r}
                    for m in MODES:
                        rec[m] = {k: v for k, v in got[m][n].items() if k != "token_ids"}
                        rec[m]["same_tokens"] = got[m][n]["token_ids"] == got["plain"][n]["token_ids"]
                    runs.append(rec)
                log(f"multiturn/{item['id']} {config.name}: end to end " + " ".join(
                    f"{m} {sum(a['latency_s'] for a in got[m]):.2f}s" for m in MODES))
    finally:
        for e in trio.values():
            e.close()
    return {"config": config.name, "runs": runs, "summary": summarize_multiturn(runs)}


def summarize_multiturn(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: medians of end to end, time to first token and decode speed; the paired ratios of end to end
    to plain's (plain's latency over the mode's: above 1 is faster) with their 90% bootstrap interval; drafted
    and accepted tokens per source; answers token-identical to plain's."""
    out: dict[str, Any] = {"n": len(runs)}
    for m in MODES:
        speeds = [x[m]["tok_per_s"] for x in runs if x[m]["tok_per_s"] is not None]
        ratios = [x["plain"]["latency_s"] / x[m]["latency_s"] for x in runs if x[m]["latency_s"] > 0]
        sums = {k.name: [sum(x[m]["by_kind"][k.name][i] for x in runs) for i in (0, 1)] for k in offered()}
        out[m] = {
            "latency_s": round(statistics.median(x[m]["latency_s"] for x in runs), 4),
            "total_s": round(sum(x[m]["latency_s"] for x in runs), 3),
            "ttft_s": round(statistics.median(x[m]["ttft_s"] for x in runs), 4),
            "tok_per_s": round(statistics.median(speeds), 2) if speeds else None,
            "speedup": round(statistics.median(ratios), 4) if ratios else None,
            "interval": bootstrap(ratios),
            "drafted_accepted": {k: v for k, v in sums.items() if v[0]},
            "same_tokens": sum(x[m]["same_tokens"] for x in runs),
        }
    return out


def format_multiturn(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [f"\nmultiturn  ({result['config']}; {s['n']} answers; medians; speed-up: plain's end to end over the "
             "mode's, per answer, 90% interval)",
             f"{'mode':<10} {'end-to-end':>10} {'total':>8} {'TTFT':>7} {'tok/s':>6} {'same':>6}  speed-up vs plain; "
             "drafted/accepted by source"]
    for m in MODES:
        e = s[m]
        tps = f"{e['tok_per_s']:.1f}" if e["tok_per_s"] is not None else "-"
        kinds = ", ".join(f"{k} {d}/{a}" for k, (d, a) in e["drafted_accepted"].items()) or "-"
        speed = ratio_text(e["speedup"], e["interval"]) if m != "plain" else "1.00x"
        lines.append(f"{m:<10} {e['latency_s']:>9.2f}s {e['total_s']:>7.1f}s {e['ttft_s']:>6.2f}s {tps:>6} "
                     f"{e['same_tokens']:>3}/{s['n']:<2}  {speed}; {kinds}")
    return "\n".join(lines)
