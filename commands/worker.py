"""`specquant worker`: lend this computer's processors and memory to another one's SpecQuant over ggml's
RPC (runtime.machine.rpc)."""

from __future__ import annotations

import argparse
import sys

from runtime.errors import UserError

NAME = "worker"
HELP = "lend this computer's processors and memory to another one's SpecQuant"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from runtime.machine.rpc import DEFAULT_PORT

    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this computer only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--threads", type=int, default=0, help="threads (default: physical cores)")
    p.add_argument("--device", help="devices to serve, e.g. CUDA0 or CPU (default: the GPUs, else the CPU)")
    p.add_argument("--allow-network", action="store_true", help="allow a --host other computers can reach")
    p.add_argument(
        "--cache", action=argparse.BooleanOptionalAction, default=None,
        help="keep received weights, verified by hash, for the next connection (default: on for 127.0.0.1, off "
        "with --allow-network)",
    )


def main(args: argparse.Namespace) -> int:
    from runtime.machine import rpc
    from runtime.machine.hardware import physical_cores

    ep = rpc.parse_endpoint(f"{args.host}:{args.port}", "--host/--port")
    if not ep.loopback and not args.allow_network:
        raise UserError(
            f"--host {args.host} lets other computers use this one, and RPC has no authentication and no "
            "encryption: add --allow-network if this network is one you trust"
        )
    if args.threads < 0:
        raise UserError(f"--threads {args.threads} must be 0 (physical cores) or more")
    threads = args.threads or physical_cores()
    devices = rpc.local_devices([d for d in args.device.split(",") if d] if args.device else None)
    if not rpc.port_is_free(ep):
        raise UserError(f"{ep} is taken: another worker or program listens there; choose another --port")
    cache = rpc.worker_cache(ep, args.cache)
    if not ep.loopback:
        print(
            f"warning: serving {ep} to the network: RPC has no authentication and no encryption, so anyone who "
            "reaches this port can use this computer's memory and processors; use it only on a network you trust",
            file=sys.stderr,
        )
    names = ", ".join(name for name, _ in devices)
    print(f"SpecQuant worker on {ep}: {names}, {threads} threads, tensor cache {cache or 'off'} (Ctrl-C stops)")
    thread = rpc.serve_rpc(ep, threads, devices, cache, network_cache=cache is not None)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    raise UserError(f"the worker could not listen on {ep} (see llama.cpp's message above)")
