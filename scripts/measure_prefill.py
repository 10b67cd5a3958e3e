"""Prefill rate (#42): llama.cpp's own (llama_decode on 512-token batches of one sequence, logits for the last
row only: what `llama-bench -p 512` times) against SpecQuant's (LlamaBackend's prefill, and the engine's whole
time to first token of a grounded prompt of the same length), same build, same model, alternating.

    python scripts/measure_prefill.py --model qwen-coder-1.5b --tokens 1536 --rounds 3

Prints one JSON object: tokens per second for each, per round, and the medians."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import llama_cpp

from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions
from runtime.machine.hardware import ensure_backends

TEXT = (
    "The lighthouse keeper wrote down the weather every hour: wind, rain, the height of the waves and the ships "
    "that passed. Over forty years the notebooks filled a whole shelf of the tower's lower room. "
)


def raw_rate(path: str, tokens: list[int], threads: int) -> float:
    """llama.cpp alone: a fresh context, the prompt in 512-token batches, logits for the last row."""
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = 4096
    cparams.n_batch = cparams.n_ubatch = 512
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    try:
        started = time.perf_counter()
        for start in range(0, len(tokens), 512):
            chunk = tokens[start : start + 512]
            arr = (llama_cpp.llama_token * len(chunk))(*chunk)
            if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(chunk))) != 0:
                raise RuntimeError("llama_decode failed")
        llama_cpp.llama_get_logits_ith(ctx, -1)
        return len(tokens) / (time.perf_counter() - started)
    finally:
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


def backend_rate(path: str, tokens: list[int], threads: int) -> float:
    backend = LlamaBackend(Path(path), LoadOptions(n_threads=threads))
    try:
        started = time.perf_counter()
        backend.decode(tokens, logit_rows=[len(tokens) - 1])  # as a prompt is read: the last row's logits
        return len(tokens) / (time.perf_counter() - started)
    finally:
        backend.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=None)
    p.add_argument("--tokens", type=int, default=1536)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    ensure_backends()
    engine = Engine(args.model, EngineSettings(n_threads=args.threads))
    path = str(engine.model.tier_path("f16"))
    parent = engine.pair(*_plain(engine))[0]
    text = TEXT * (args.tokens // 40 + 1)
    tokens = parent.tokenize(text)[: args.tokens]
    question = parent.detokenize(tokens)
    rows: dict[str, list[float]] = {"llama.cpp": [], "LlamaBackend": [], "engine TTFT": []}
    for r in range(args.rounds):
        order = ["llama.cpp", "LlamaBackend", "engine TTFT"]
        for name in order[r % 3:] + order[: r % 3]:
            if name == "llama.cpp":
                rows[name].append(raw_rate(path, tokens, args.threads))
            elif name == "LlamaBackend":
                rows[name].append(backend_rate(path, tokens, args.threads))
            else:
                options = ChatOptions(parent="f16", no_spec=True, max_tokens=1, cache_key=f"cold{r}")
                last = list(engine.stream_chat([{"role": "user", "content": question}], options))[-1]
                rows[name].append(last.stats.prompt_tokens / last.stats.ttft_s)
    out = {"model": engine.model.name, "tokens": len(tokens), "threads": args.threads, "rounds": rows,
           "median_tok_per_s": {k: statistics.median(v) for k, v in rows.items()}}
    base = out["median_tok_per_s"]["llama.cpp"]
    out["ratio_to_llama_cpp"] = {k: v / base for k, v in out["median_tok_per_s"].items()}
    print(json.dumps(out, indent=1))


def _plain(engine: Engine):  # the F16 parent alone, as placed by the engine
    decision = engine.decide("x", ChatOptions(parent="f16", no_spec=True))
    return decision.choice, decision.placement


if __name__ == "__main__":
    main()
