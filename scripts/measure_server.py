"""Measure what `specquant serve` costs and how it holds up, on 127.0.0.1.

    python scripts/measure_server.py overhead [--pairs 8] [--model NAME] [--max-tokens 128]
    python scripts/measure_server.py load [--sequential 200] [--concurrent 16] [--model NAME]

`overhead`: a `specquant serve` child process answers the official openai client (streaming, greedy); pairs
interleave its answer and the same answer from an Engine in this process (same model, settings and
options; the server idles meanwhile), timed the same way from the caller's side: time to the first text,
decode speed (tokens after the first text over the time after it) and end-to-end latency. Prints the
medians of the pairs' ratios.

`load`: a `specquant serve` child process; that many sequential requests, then that many at once. Counts
errors and reports the server's resident memory (psutil, over its process tree) after the 20th request and
at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import openai

PROMPT = "Write a Python function that checks whether a string is a palindrome, with a docstring and two examples."


def cpu_model() -> str:
    from runtime.machine.hardware import inventory

    return inventory().cpu


def timed(start_answer: Any, tokens_of: Any) -> dict[str, float]:
    """Caller-side timings of one streamed answer; `start_answer()` sends the request and returns an iterator
    of (text, the last chunk or None)."""
    start = time.perf_counter()
    first = last = None
    tokens = 0
    for text, done in start_answer():
        now = time.perf_counter()
        if text:
            first = first or now
            last = now
        if done is not None:
            tokens = tokens_of(done)
    assert first is not None and last is not None and tokens > 1
    end = time.perf_counter()
    return {"ttft": first - start, "decode": (tokens - 1) / (last - first), "latency": end - start, "tokens": tokens}


def start_server(args: argparse.Namespace, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """`specquant serve --port 0` in a child process; returns it and its base URL (…/v1)."""
    command = [sys.executable, "-m", "commands", "serve", "--port", "0", "--threads", str(args.threads), *extra]
    if args.model:
        command += ["--model", args.model]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split(" on ")[1].split()[0]


def overhead(args: argparse.Namespace) -> None:
    from runtime.decode.sampling import SamplingParams
    from runtime.engine.engine import ChatOptions, Engine, EngineSettings

    proc, base = start_server(args, "--temp", "0", "--max-tokens", str(args.max_tokens))
    client = openai.OpenAI(base_url=base, api_key="-", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    engine = Engine(model, EngineSettings(n_threads=args.threads))
    options = ChatOptions(max_tokens=args.max_tokens, sampling=SamplingParams())  # greedy, as the server's --temp 0
    messages = [{"role": "user", "content": PROMPT}]

    def via_api() -> dict[str, float]:
        def answer() -> Any:
            stream = client.chat.completions.create(
                model=model, messages=messages, stream=True, stream_options={"include_usage": True}
            )
            for c in stream:
                yield (c.choices[0].delta.content if c.choices else ""), (c if not c.choices else None)

        def raw_answer() -> Any:
            """The least a client can do: read the event lines, decode the JSON."""
            host, port = base.removeprefix("http://").removesuffix("/v1").split(":")
            conn = http.client.HTTPConnection(host, int(port))
            body = {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            for line in response:
                if not line.startswith(b"data: {"):
                    continue
                c = json.loads(line[6:])
                yield (c["choices"][0]["delta"].get("content") if c["choices"] else ""), (None if c["choices"] else c)
            conn.close()

        if args.client == "raw":
            return timed(raw_answer, lambda c: c["usage"]["completion_tokens"])
        return timed(answer, lambda c: c.usage.completion_tokens)

    def direct() -> dict[str, float]:
        def answer() -> Any:
            for c in engine.stream_chat(messages, options):
                yield c.text, (c if c.done else None)

        return timed(answer, lambda c: c.stats.tokens)

    via_api()  # load the tiers and warm the caches once, outside the pairs
    direct()
    pairs = []
    for i in range(args.pairs):
        a, d = (via_api(), direct()) if i % 2 == 0 else tuple(reversed((direct(), via_api())))
        assert a["tokens"] == d["tokens"], (a, d)
        pairs.append((a, d))
        print(f"pair {i + 1}: api {a['decode']:.1f} tok/s, direct {d['decode']:.1f} tok/s", file=sys.stderr)
    proc.send_signal(2)
    proc.wait(timeout=60)
    engine.close()

    def median(key: str, invert: bool = False) -> float:
        return statistics.median((d[key] / a[key]) if invert else (a[key] / d[key]) for a, d in pairs)

    out = {
        "cpu": cpu_model(),
        "model": model,
        "client": args.client,
        "pairs": args.pairs,
        "tokens": pairs[0][0]["tokens"],
        "decode_api_over_direct": round(median("decode"), 4),
        "latency_direct_over_api": round(median("latency", invert=True), 4),
        "ttft_api_s": round(statistics.median(a["ttft"] for a, _ in pairs), 4),
        "ttft_direct_s": round(statistics.median(d["ttft"] for _, d in pairs), 4),
        "decode_api_tok_s": round(statistics.median(a["decode"] for a, _ in pairs), 2),
        "decode_direct_tok_s": round(statistics.median(d["decode"] for _, d in pairs), 2),
    }
    print(json.dumps(out, indent=2))


def rss_mb(pid: int) -> dict[str, float]:
    """Resident memory of the server's process tree: anonymous (what a leak grows) and in all."""
    from runtime.machine.resources import resident

    r = resident(pid)
    return {"anon": r.anon_bytes / 1e6, "total": r.total_bytes / 1e6}


def load(args: argparse.Namespace) -> None:
    proc, base = start_server(args)
    client = openai.OpenAI(base_url=base, api_key="-", max_retries=0, timeout=600)
    prompts = ["Name three primary colors.", "What is the capital of France?", "Say hello in Spanish.", "What is 2+2?"]
    errors: list[str] = []
    memory: dict[str, dict[str, float]] = {}

    model = client.models.list().data[0].id

    def ask(i: int, stream: bool) -> None:
        messages = [{"role": "user", "content": prompts[i % len(prompts)]}]
        ask = {"model": model, "messages": messages, "max_tokens": args.max_tokens}
        try:
            if stream:
                chunks = client.chat.completions.create(**ask, stream=True)
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                text = client.chat.completions.create(**ask).choices[0].message.content or ""
            if not text:
                errors.append(f"request {i}: empty answer")
        except Exception as e:
            errors.append(f"request {i}: {type(e).__name__}: {e}")

    started = time.perf_counter()
    for i in range(args.sequential):
        ask(i, stream=i % 2 == 1)
        if i + 1 == 20:
            memory["after_20"] = rss_mb(proc.pid)
    sequential_s = time.perf_counter() - started
    threads = [threading.Thread(target=ask, args=(i, True)) for i in range(args.concurrent)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    concurrent_s = time.perf_counter() - started
    memory["end"] = rss_mb(proc.pid)
    proc.send_signal(2)
    code = proc.wait(timeout=60)
    out = {
        "cpu": cpu_model(),
        "model": model,
        "sequential": args.sequential,
        "sequential_s": round(sequential_s, 1),
        "concurrent": args.concurrent,
        "concurrent_s": round(concurrent_s, 1),
        "errors": errors,
        "rss_after_20_mb": round(memory["after_20"]["total"], 1),
        "rss_end_mb": round(memory["end"]["total"], 1),
        "rss_growth_mb": round(memory["end"]["total"] - memory["after_20"]["total"], 1),
        "anon_growth_mb": round(memory["end"]["anon"] - memory["after_20"]["anon"], 1),
        "exit_code": code,
    }
    print(json.dumps(out, indent=2))


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--pairs", type=int, default=8)
    o.add_argument("--max-tokens", type=int, default=128)
    o.add_argument("--client", choices=("openai", "raw"), default="openai", help="raw: http.client and json alone")
    ld = sub.add_parser("load")
    ld.add_argument("--sequential", type=int, default=200)
    ld.add_argument("--concurrent", type=int, default=16)
    ld.add_argument("--max-tokens", type=int, default=16)
    for q in (o, ld):
        q.add_argument("--model", default="")
        q.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    overhead(args) if args.what == "overhead" else load(args)


if __name__ == "__main__":
    main()
