"""Time to first token of grounded questions on one collection that fits whole (#53), in one process: the
first question (nothing cached), a follow-up in the same conversation, the follow-up again after another
chat evicted the live KV cache (the prompt cache brings it back), and a new chat on the same documents.
One warm-up round is not counted (loading, the one-time cost probe); each round starts cold
(Engine.reset_caches empties the prompt cache too); TTFT is wall time from the call
to the first chunk, prompt building and any restore included. The ratios are to the same round's first
question, so a machine loaded by other work still gives them side by side.

    python scripts/measure_prompt_cache.py [--model NAME] [--doc-chars 6000] [--rounds 3] [--threads 2]

Prints one JSON object: the CPU, the command, per-round seconds and ratios, and their medians."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from runtime.documents.grounding import Grounding
from runtime.documents.library import Library
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions

REPO = Path(__file__).resolve().parents[1]


def document(chars: int) -> str:
    """About `chars` characters of real prose: the project's own docs, cut at a line."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    cut = text[:chars]
    return cut[: cut.rfind("\n")] if "\n" in cut else cut


def ttft(engine: Engine, messages: list[dict[str, str]], options: ChatOptions) -> tuple[float, str, int]:
    """Seconds to the first chunk, the answer's text, and the prompt tokens that were not read again."""
    t0 = time.perf_counter()
    first, parts, reused = None, [], 0
    for chunk in engine.stream_chat(messages, options):
        first = first if first is not None else time.perf_counter() - t0
        parts.append(chunk.text)
        reused = chunk.stats.reused_tokens
    return first or 0.0, "".join(parts), reused


def one_round(engine: Engine, options: ChatOptions) -> dict[str, float]:
    engine.reset_caches()
    ask = [{"role": "user", "content": "What is the path of one answer through the code?"}]
    t_first, text, _ = ttft(engine, ask, options)
    follow = [*ask, {"role": "assistant", "content": text}, {"role": "user", "content": "Which module decides?"}]
    t_follow, _, r_follow = ttft(engine, follow, options)
    other = replace(options, documents=None, max_tokens=8)
    ttft(engine, [{"role": "user", "content": "Write a haiku about autumn."}], other)  # evicts the live KV
    again = [*follow[:3], {"role": "user", "content": "Where do the tiers load?"}]
    t_again, _, r_again = ttft(engine, again, options)
    t_new, _, r_new = ttft(engine, [{"role": "user", "content": "What does the router read?"}], options)
    return {
        "first_s": t_first, "follow_up_s": t_follow, "follow_up_after_other_chat_s": t_again, "new_chat_s": t_new,
        "follow_up_ratio": t_follow / t_first, "follow_up_after_other_chat_ratio": t_again / t_first,
        "new_chat_ratio": t_new / t_first, "reused_tokens": {"follow_up": r_follow, "after_other": r_again,
                                                             "new_chat": r_new},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--doc-chars", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=24)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        (folder / "architecture.md").write_text(document(args.doc_chars), encoding="utf-8")
        index = Path(tmp) / "documents.sqlite3"
        with Library(index) as lib:
            lib.add([folder], collection="notes")
        options = ChatOptions(max_tokens=args.max_tokens, sampling_overrides=(("temperature", 0.0),),
                              documents=Grounding("notes", index=str(index)))
        engine = Engine(args.model, EngineSettings(n_threads=args.threads))
        try:
            # Warm-up, not counted: loading, and the machine's one-time cost probe (it ran inside the first
            # round's follow-up otherwise: 30 s on a loaded 2-core machine).
            one_round(engine, options)
            rounds = []
            for _ in range(args.rounds):
                rounds.append(one_round(engine, options))
                print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)  # a slow machine still shows rounds
            prompt_tokens = len(engine.prepare([{"role": "user", "content": "?"}], options).prompt)
        finally:
            engine.close()
    keys = [k for k in rounds[0] if k != "reused_tokens"]
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if "Model name" in line), "")
    print(json.dumps({
        "command": " ".join(["python", *sys.argv]), "cpu": model_name, "threads": args.threads,
        "document_chars": len(document(args.doc_chars)), "grounded_prompt_tokens": prompt_tokens,
        "rounds": rounds, "median": {k: round(statistics.median(r[k] for r in rounds), 4) for k in keys},
    }, indent=1))


if __name__ == "__main__":
    main()
