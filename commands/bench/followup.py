"""The follow-up workload (#53): conversations on the same documents, as a user asks them: a first question,
a follow-up in the same chat, and a new chat with a new question. Whole documents go in the system message,
as a grounded answer lays them out (runtime.documents.grounding), so the prompt cache can keep them.

Each conversation runs on two engines, interleaved: one with the RAM prompt cache (emptied at the start of
each conversation, so its first question is cold) and one with no cache at all (every question read whole).
Per kind of question: time to first token, end to end, decode speed, and whether the answers are the same
tokens; the cached engine's follow-up and new question as a share of its own first question (the issue's
target: at most 0.15), which a loaded machine still gives side by side. After a restart (the disk store):
scripts/measure_prompt_cache.py --restart."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from commands.bench.runners import rotated, timed_answer
from runtime.documents.grounding import Citation, grounded_messages
from runtime.engine.engine import Engine, EngineSettings

FOLLOWUP = "followup"  # a prompt set's "kind" for this workload
KINDS = ("first", "follow_up", "new_question")
MODES = ("cache", "no_cache")


def conversation(item: dict[str, Any]) -> dict[str, Any]:
    """What a prompt line holds for this workload: its sources and three questions."""
    return {"sources": item["sources"], "first": item["question"], "follow_up": item["follow_up"],
            "new_question": item["new_question"]}


def followup_engines(settings: EngineSettings | None, model: str | None) -> dict[str, Engine]:
    """The two engines: the RAM prompt cache on, and no cache at all. Neither uses the disk store: a
    benchmark's runs must not find each other's files (after a restart: the script)."""
    base = settings or EngineSettings()
    return {
        "cache": Engine(model, replace(base, prompt_store_bytes=0)),
        "no_cache": Engine(model, replace(base, prompt_cache_bytes=0, prompt_store_bytes=0)),
    }


def ask(engine: Engine, messages: list[dict[str, Any]], options: Any, cold: bool) -> dict[str, Any]:
    if cold:
        engine.reset_caches()
    answer, timed = timed_answer(engine, messages, options)
    return {**timed, "reused_tokens": answer.last.stats.reused_tokens, "text": answer.text,
            "token_ids": list(answer.token_ids)}


def followup_conversation(
    engine: Engine, conv: dict[str, Any], options: Any, cached: bool
) -> dict[str, dict[str, Any]]:
    """The three questions on one engine; `cached` False reads every prompt whole."""
    docs = [Citation(n, str(s["path"]), "bench", str(s["text"]), 0.0, heading=s.get("heading"), whole=True)
            for n, s in enumerate(conv["sources"], 1)]
    first = grounded_messages([{"role": "user", "content": conv["first"]}], docs)
    out = {"first": ask(engine, first, options, cold=True)}
    follow = [*first, {"role": "assistant", "content": out["first"]["text"]},
              {"role": "user", "content": conv["follow_up"]}]
    out["follow_up"] = ask(engine, follow, options, cold=not cached)
    new = grounded_messages([{"role": "user", "content": conv["new_question"]}], docs)
    out["new_question"] = ask(engine, new, options, cold=not cached)
    return out


def bench_followups(
    model: str | None, settings: EngineSettings | None, config: Any, items: list[dict[str, Any]],
    max_tokens: int, repeats: int, log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every conversation (`conversation`, with its id) `repeats` times on both engines (alternating which goes
    first); medians per kind."""
    options = config.options(max_tokens)
    pair = followup_engines(settings, model)
    runs: list[dict[str, Any]] = []
    try:
        for mode in MODES:  # warm-up, not counted: loading, and the machine's one-time cost probe
            followup_conversation(pair[mode], items[0], replace(options, max_tokens=4), mode == "cache")
        for r in range(repeats):
            for i, item in enumerate(items):
                got = {m: followup_conversation(pair[m], item, options, m == "cache") for m in rotated(MODES, r + i)}
                for kind in KINDS:
                    rec = {"id": item["id"], "repeat": r, "kind": kind,
                           "same_tokens": got["cache"][kind]["token_ids"] == got["no_cache"][kind]["token_ids"]}
                    for m in MODES:
                        rec[m] = {k: v for k, v in got[m][kind].items() if k not in ("text", "token_ids")}
                    runs.append(rec)
                log(f"followup/{item['id']} {config.name}: TTFT cache " + " ".join(
                    f"{k} {got['cache'][k]['ttft_s']:.2f}s" for k in KINDS) + " | no cache " + " ".join(
                    f"{k} {got['no_cache'][k]['ttft_s']:.2f}s" for k in KINDS))
    finally:
        for e in pair.values():
            e.close()
    return {"config": config.name, "runs": runs, "summary": summarize_followup(runs)}


def summarize_followup(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind and mode: median TTFT, end to end and decode speed; the cached TTFT as a share of the cached
    first question's (same conversation, same repeat) and of the uncached same question's."""
    out: dict[str, Any] = {}
    firsts = {(x["id"], x["repeat"]): x["cache"]["ttft_s"] for x in runs if x["kind"] == "first"}
    for kind in KINDS:
        mine = [x for x in runs if x["kind"] == kind]
        entry: dict[str, Any] = {"same_tokens": sum(x["same_tokens"] for x in mine), "n": len(mine)}
        for m in MODES:
            speeds = [x[m]["tok_per_s"] for x in mine if x[m]["tok_per_s"] is not None]
            entry[m] = {"ttft_s": _median([x[m]["ttft_s"] for x in mine]),
                        "latency_s": _median([x[m]["latency_s"] for x in mine]),
                        "tok_per_s": _median(speeds) if speeds else None,
                        "reused_tokens": _median([x[m]["reused_tokens"] for x in mine])}
        entry["ttft_vs_first"] = _median([x["cache"]["ttft_s"] / firsts[(x["id"], x["repeat"])] for x in mine])
        entry["ttft_vs_no_cache"] = _median([x["cache"]["ttft_s"] / x["no_cache"]["ttft_s"] for x in mine])
        out[kind] = entry
    return out


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 4)


def format_followups(result: dict[str, Any]) -> str:
    lines = [f"\nfollowup  ({result['config']}; medians; TTFT share of the cached first question, target <= 0.15)",
             f"{'question':<13} {'TTFT cache':>10} {'no cache':>9} {'share':>6} {'end-to-end':>10} {'no cache':>9} "
             f"{'tok/s':>6} {'no cache':>9} {'same':>5}"]
    for kind, e in result["summary"].items():
        c, p = e["cache"], e["no_cache"]
        tps = lambda v: f"{v:.1f}" if v is not None else "-"  # noqa: E731
        lines.append(f"{kind:<13} {c['ttft_s']:>9.2f}s {p['ttft_s']:>8.2f}s {e['ttft_vs_first']:>6.2f} "
                     f"{c['latency_s']:>9.2f}s {p['latency_s']:>8.2f}s {tps(c['tok_per_s']):>6} "
                     f"{tps(p['tok_per_s']):>9} {e['same_tokens']}/{e['n']}")
    return "\n".join(lines)
