"""Measure the documents' embedder (#53): chunks per second of the settings before #53 (the F16 model, one
256-token chunk per llama.cpp batch, no flash attention) against today's default (runtime.documents.embed: the
F16 model, 8 chunks per 2,048-token batch, flash attention), side by side on the same chunks, interleaved (the
order alternating between rounds), with repeats. `--all` adds the Q8_0 model, packed and not, to show what
quantizing would give (it is not the default: its recall@5 fell 0.023 below F16's).

The chunks are this repository's docs as `specquant docs add` chunks them; both models are made from the
installed package into a temporary folder (converters.embedding), so the model cache is not touched.

    python scripts/measure_embedding.py --chunks 64 --repeats 3

Prints one JSON object: each setting's chunks/s per round and median, the ratio of medians to the first
setting, the CPU, the threads, llama-cpp-python's version and the load average before and after (on a
shared machine the absolute speeds say little; the ratio, measured interleaved, is the result).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from converters.embedding import convert_embedding_model, quantize_embedding_model
from runtime.documents.embed import F16_NAME, MAX_WORD_PIECES, Q8_NAME, Embedder
from runtime.documents.extract import extract
from runtime.machine.hardware import cpu_name, ensure_backends, physical_cores

REPO = Path(__file__).resolve().parent.parent

BEFORE = "f16, 1 chunk a batch, no flash attention"  # the settings before #53
AFTER = "f16, default batch, flash attention"  # today's Embedder defaults


def doc_chunks(n: int) -> list[str]:
    """The first `n` chunks of docs/*.md and README.md, as the documents library chunks them."""
    texts: list[str] = []
    for path in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]:
        texts += [c.text for c in extract(path.read_bytes(), "markdown", path.name).chunks]
    return texts[:n]


def settings(folder: Path, threads: int, every: bool) -> dict[str, Embedder]:
    """The embedders to compare, loaded: the first is the baseline."""
    f16 = convert_embedding_model(folder / f"{F16_NAME}.gguf")
    out = {BEFORE: Embedder(f16, threads, batch_tokens=MAX_WORD_PIECES, flash_attn=False, prepare=ensure_backends)}
    out[AFTER] = Embedder(f16, threads, prepare=ensure_backends)
    if every:
        q8 = quantize_embedding_model(f16, folder / f"{Q8_NAME}.gguf")
        out["q8_0, default batch, flash attention"] = Embedder(q8, threads, prepare=ensure_backends)
        out["q8_0, 1 chunk a batch, no flash attention"] = Embedder(
            q8, threads, batch_tokens=MAX_WORD_PIECES, flash_attn=False, prepare=ensure_backends
        )
    for embedder in out.values():
        embedder.load()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=64, help="chunks embedded per round (default 64)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each setting once a round (default 3)")
    parser.add_argument("--threads", type=int, default=physical_cores(), help="llama.cpp threads (default: cores)")
    parser.add_argument("--all", action="store_true", help="also the Q8_0 model, packed and not")
    args = parser.parse_args()
    texts = doc_chunks(args.chunks)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        embedders = settings(Path(tmp), args.threads, args.all)
        rates: dict[str, list[float]] = {name: [] for name in embedders}
        names = list(embedders)
        for round_ in range(args.repeats):
            for name in names if round_ % 2 == 0 else names[::-1]:  # alternate: neither always runs first
                start = time.perf_counter()
                embedders[name].embed(texts)
                rates[name].append(len(texts) / (time.perf_counter() - start))
                print(f"round {round_ + 1}: {name}: {rates[name][-1]:.3f} chunks/s", file=sys.stderr, flush=True)
        for embedder in embedders.values():
            embedder.close()
    import llama_cpp

    medians = {name: statistics.median(r) for name, r in rates.items()}
    print(json.dumps({
        "cpu": cpu_name(),
        "threads": args.threads,
        "llama_cpp_python": llama_cpp.__version__,
        "chunks": len(texts),
        "repeats": args.repeats,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "chunks_per_s": {name: [round(x, 3) for x in r] for name, r in rates.items()},
        "median_chunks_per_s": {name: round(m, 3) for name, m in medians.items()},
        "ratio_to_before": {name: round(m / medians[BEFORE], 2) for name, m in medians.items()},
    }, indent=2))


if __name__ == "__main__":
    main()
