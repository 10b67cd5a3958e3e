"""Measure the parent on a worker over loopback: plain decoding against speculation (the draft local), with
0, 1 and 5 ms of added round-trip time, interleaved, medians; and network round trips per answer token.

This machine has no tc netem, so a small TCP relay on 127.0.0.1 between this process and the worker adds the
delay: it holds each burst of bytes for half the added round trip in each direction, and counts a round trip
each time the traffic turns from worker-bound to client-bound. The worker is a real `specquant worker`.

    python scripts/measure_rpc.py [--model NAME] [--prompts 4] [--max-tokens 64] [--delays 0,1,5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class DelayRelay:
    """127.0.0.1:port → the worker; `delay_s` (changeable between runs) is added to each round trip."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.delay_s, self.round_trips = target, 0.0, 0
        self._toward_worker = False
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            worker = socket.create_connection(self.target)
            for s in (client, worker):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(client, worker, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(worker, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, toward_worker: bool) -> None:
        try:
            while data := src.recv(1 << 20):
                due = time.perf_counter() + self.delay_s / 2
                with self._lock:
                    if not toward_worker and self._toward_worker:
                        self.round_trips += 1  # a reply after a request: one round trip
                    self._toward_worker = toward_worker
                while (left := due - time.perf_counter()) > 0:
                    time.sleep(left)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def prompts(n: int) -> list[str]:
    out = []
    for name in ("alpaca", "code", "gsm8k", "mmlu"):
        lines = (REPO / "assets" / "prompts" / f"{name}.jsonl").read_text().splitlines()
        out += [json.loads(line)["prompt"] for line in lines[: max(1, n // 4)]]
    return out[:n]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=None)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--delays", default="0,1,5", help="added round-trip times in ms")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    from runtime.decode.sampling import SamplingParams
    from runtime.engine.engine import EngineSettings
    from runtime.engine.options import ChatOptions
    from runtime.engine.process import EngineProcess
    from runtime.machine.hardware import inventory
    from runtime.plan.placement import PlacementSettings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = subprocess.Popen(
        [sys.executable, "-m", "commands", "worker", "--port", str(port), "--threads", str(args.threads)],
        cwd=REPO,
    )
    try:
        time.sleep(3)
        relay = DelayRelay(("127.0.0.1", port))
        settings = EngineSettings(
            n_threads=args.threads, placement=PlacementSettings(mode="remote"), rpc=(f"127.0.0.1:{relay.port}",)
        )
        # The Engine in its own process (as `chat --rpc` runs it): the relay's threads here never wait on it.
        engine = EngineProcess(args.model, settings)
        greedy = SamplingParams(temperature=0.0)
        configs = {"plain": ChatOptions(no_spec=True, max_tokens=args.max_tokens, sampling=greedy),
                   "spec": ChatOptions(max_tokens=args.max_tokens, sampling=greedy)}  # fmt: skip
        texts = prompts(args.prompts)
        for text in texts[:1]:  # warm: the weights go to the worker once, both tiers loaded
            for opts in configs.values():
                engine.chat([{"role": "user", "content": text}], opts)
        rows: dict[tuple[float, str], list[dict[str, float]]] = {}
        for delay_ms in [float(d) for d in args.delays.split(",")]:
            relay.delay_s = delay_ms / 1000
            for text in texts:
                for name, opts in configs.items():  # interleaved: plain, spec, plain, spec …
                    engine.reset_caches()  # each answer pays its own prompt's prefill
                    before = relay.round_trips
                    last = engine.chat([{"role": "user", "content": text}], opts).last
                    st = last.stats
                    rows.setdefault((delay_ms, name), []).append({
                        "e2e_s": st.elapsed_s, "ttft_s": st.ttft_s, "tok_s": st.tok_per_s, "tokens": st.tokens,
                        "trips": relay.round_trips - before,
                    })  # fmt: skip
        engine.close()
    finally:
        worker.kill()

    print(f"machine: {inventory().cpu} ({platform.machine()}), {args.threads} threads each side; worker over loopback")
    print(f"model: {engine.model.name}; {len(texts)} prompts, {args.max_tokens} tokens max, greedy; medians")
    print("added RTT | config | e2e s | TTFT s | decode tok/s | tokens per round trip | e2e speed-up | decode speed-up")
    base: dict[str, tuple[float, float]] = {}  # config: (seconds per answer without delay, round trips per answer)
    for delay_ms in sorted({d for d, _ in rows}):
        med = {n: {k: statistics.median(r[k] for r in rows[(delay_ms, n)]) for k in ("e2e_s", "ttft_s", "tok_s")}
               for n in configs}  # fmt: skip
        for name in configs:
            r = rows[(delay_ms, name)]
            per_trip = sum(x["tokens"] for x in r) / max(1, sum(x["trips"] for x in r))
            m = med[name]
            up = med["plain"]["e2e_s"] / m["e2e_s"]
            dec = m["tok_s"] / med["plain"]["tok_s"]
            base.setdefault(name, (m["e2e_s"], statistics.median(x["trips"] for x in r)))
            print(f"{delay_ms:5.1f} ms | {name:5} | {m['e2e_s']:.3f} | {m['ttft_s']:.3f} | {m['tok_s']:.1f} | "
                  f"{per_trip:.2f} | {up:.2f}x | {dec:.2f}x")  # fmt: skip
    # The cost model from the first (least delayed) row's measured numbers: each round trip adds the delay.
    def modelled(name: str, d_ms: float) -> float:
        seconds, trips = base[name]
        return seconds + trips * d_ms / 1000

    ups = ", ".join(f"{d} ms {modelled('plain', d) / modelled('spec', d):.2f}x" for d in (1, 5, 20, 50))
    print(f"modelled e2e speed-up from the first row: {ups}")

if __name__ == "__main__":
    main()
