"""Time to first token of grounded questions on one collection that fits whole (#53), in one process: the
first question (nothing cached), a follow-up in the same conversation, the follow-up again after another
chat evicted the live KV cache (the prompt cache brings it back), and a new chat on the same documents.
One warm-up round is not counted (loading, the one-time cost probe); each round starts cold
(Engine.reset_caches empties the prompt cache too); TTFT is wall time from the call
to the first chunk, prompt building and any restore included. The ratios are to the same round's first
question, so a machine loaded by other work still gives them side by side.

    python scripts/measure_prompt_cache.py [--model NAME] [--doc-chars 6000] [--rounds 3] [--threads 2]
    python scripts/measure_prompt_cache.py --restart [...]

--restart: each question in a new process, as after a restart, so only the disk store
(runtime.engine.prompt_store) can help: the first question (it saves the documents' state), then a new question
and the first question's follow-up, each in a process of its own; and both again with no cache at all, whose
answers must be the same tokens. Each process loads, probes and opens the index before the timed question.

Prints one JSON object: the CPU, the command, per-round seconds and ratios, and their medians."""

from __future__ import annotations

import argparse
import json
import os
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


FIRST = "What is the path of one answer through the code?"
FOLLOW_UP = "Which module decides?"
NEW = "What does the router read?"


def step(args: argparse.Namespace) -> None:
    """One question in this process (--restart's child): warmed up first, then timed; prints JSON."""
    options = ChatOptions(max_tokens=args.max_tokens, sampling_overrides=(("temperature", 0.0),),
                          documents=Grounding("notes", index=args.index))
    cached = args.step.startswith("cached-")
    off = {} if cached else {"prompt_cache_bytes": 0, "prompt_store_bytes": 0}
    engine = Engine(args.model, EngineSettings(n_threads=args.threads, **off))
    try:
        engine.library(args.index)
        ttft(engine, [{"role": "user", "content": "Write a haiku about autumn."}], replace(options, documents=None))
        ask = [{"role": "user", "content": FIRST}]
        if args.step.endswith("follow-up"):
            ask = [*ask, {"role": "assistant", "content": args.said}, {"role": "user", "content": FOLLOW_UP}]
        elif args.step.endswith("new"):
            ask = [{"role": "user", "content": NEW}]
        t0 = time.perf_counter()
        first, tokens, text, reused = None, [], [], 0
        for chunk in engine.stream_chat(ask, options):
            first = first if first is not None else time.perf_counter() - t0
            tokens += chunk.tokens
            text.append(chunk.text)
            reused = chunk.stats.reused_tokens
        print(json.dumps({"ttft_s": first, "tokens": tokens, "text": "".join(text), "reused_tokens": reused,
                          "disk_hits": engine.prompt_store.hits}))
    finally:
        engine.close()


def restart_round(args: argparse.Namespace, index: Path, states: Path) -> dict[str, object]:
    """The first question, then a new question and the follow-up, each in a new process; with and without
    the disk store."""
    env = {**os.environ, "SPECQUANT_PROMPT_STATES_DIR": str(states)}
    common = [sys.executable, __file__, "--index", str(index), "--threads", str(args.threads),
              "--max-tokens", str(args.max_tokens), *(["--model", args.model] if args.model else [])]

    def child(name: str, said: str = "") -> dict:
        out = subprocess.run([*common, "--step", name, "--said", said], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{name} failed:\n{out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = child("cached-first")
    got: dict[str, dict] = {}
    for k in ("new", "follow-up"):
        got[f"cached-{k}"] = child(f"cached-{k}", first["text"])
        got[f"plain-{k}"] = child(f"plain-{k}", first["text"])
    return {
        "first_s": first["ttft_s"],
        **{f"{k}_after_restart_s": got[f"cached-{k}"]["ttft_s"] for k in ("new", "follow-up")},
        **{f"{k}_no_cache_s": got[f"plain-{k}"]["ttft_s"] for k in ("new", "follow-up")},
        **{f"{k}_ratio": got[f"cached-{k}"]["ttft_s"] / first["ttft_s"] for k in ("new", "follow-up")},
        "disk_hits": {k: got[f"cached-{k}"]["disk_hits"] for k in ("new", "follow-up")},
        "reused_tokens": {k: got[f"cached-{k}"]["reused_tokens"] for k in ("new", "follow-up")},
        "same_tokens": {k: got[f"cached-{k}"]["tokens"] == got[f"plain-{k}"]["tokens"] for k in ("new", "follow-up")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--doc-chars", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--restart", action="store_true", help="each question in a new process: the disk store")
    ap.add_argument("--step", help=argparse.SUPPRESS)  # --restart's child: which question
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--said", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        step(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        (folder / "architecture.md").write_text(document(args.doc_chars), encoding="utf-8")
        index = Path(tmp) / "documents.sqlite3"
        with Library(index) as lib:
            lib.add([folder], collection="notes")
        if args.restart:
            rounds = []
            for r in range(args.rounds):
                rounds.append(restart_round(args, index, Path(tmp) / f"states-{r}"))
                print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
            report(args, rounds, None)
            return
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
    report(args, rounds, prompt_tokens)


def build() -> str:
    import llama_cpp

    from runtime.machine.hardware import ensure_backends

    return f"llama-cpp-python {llama_cpp.__version__}, {ensure_backends().variant}"


def report(args: argparse.Namespace, rounds: list[dict], prompt_tokens: int | None) -> None:
    keys = [k for k in rounds[0] if isinstance(rounds[0][k], float)]
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if "Model name" in line), "")
    print(json.dumps({
        "command": " ".join(["python", *sys.argv]), "cpu": model_name, "threads": args.threads, "build": build(),
        "document_chars": len(document(args.doc_chars)), "grounded_prompt_tokens": prompt_tokens,
        "rounds": rounds, "median": {k: round(statistics.median(r[k] for r in rounds), 4) for k in keys},
    }, indent=1))


if __name__ == "__main__":
    main()
