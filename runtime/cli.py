"""`specquant`: the command line. Bad input exits 2 with one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from runtime.decode.sampling import LLAMA_DEFAULTS
from runtime.engine.chat import ChatOptions
from runtime.errors import UserError, run_command
from runtime.models.cache import TIERS, ModelDir, cache_root, list_models
from runtime.plan.placement import PLACEMENT_MODES, PlacementSettings
from runtime.plan.policy import DRAFT_CHOICES, PRESET_NAMES
from runtime.plan.router import LEVELS

if TYPE_CHECKING:  # imported where used: `specquant --help` must not load llama.cpp
    from runtime.decode.grammar import Grammar
    from runtime.engine.engine import EngineSettings
    from runtime.engine.interface import LoadedEngine

TIER_CHOICES = TIERS
# The flags' defaults are the runtime's own (one source: the dataclasses).
CHAT, PLACEMENT = ChatOptions(), PlacementSettings()
MAX_MEMORY_HELP = "memory the model may use, in GB (default: what is available, less a margin)"


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but bad flags exit 2 with a single line (no usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


class ProgressPrinter:
    """A redrawn bar on a terminal; one plain line per stage otherwise (logs, CI, pipes)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.stage = ""
        self.started = time.monotonic()
        self.last_draw = 0.0

    def __call__(self, p: Any) -> None:
        if p.stage != self.stage:
            self._end_stage()
            self.stage, self.started = p.stage, time.monotonic()
            if not self.tty and p.stage not in ("done", "hash"):
                self.stream.write(f"{p.stage}: {p.message or 'started'}\n")
        self.last = p
        now = time.monotonic()
        if self.tty and p.stage not in ("done", "hash") and (now - self.last_draw > 0.1 or p.done >= p.total):
            self.last_draw = now
            frac = min(1.0, p.done / p.total) if p.total else 0.0
            bar = "█" * int(frac * 30) + "░" * (30 - int(frac * 30))
            self.stream.write(f"\r{p.stage:<7} {bar} {frac:4.0%}  {_gb(p.done)} / ~{_gb(p.total)} ")
        self.stream.flush()

    def _end_stage(self) -> None:
        if self.stage and self.stage not in ("hash", "done"):
            took = time.monotonic() - self.started
            if self.tty:
                self.stream.write("\n")
            elif self.last.message != "verified, kept":
                self.stream.write(f"{self.stage}: done in {took:.1f} s\n")


def cmd_convert(args: argparse.Namespace) -> int:
    from converters.convert import convert
    from runtime.machine.hardware import inventory
    from runtime.plan.placement import PlacementSettings, will_fit

    budget = PlacementSettings(max_memory_bytes=_memory_budget(args))

    def say_fit(sizes: dict[str, int], hparams: dict[str, int] | None) -> None:
        """Before the work: which tiers this machine can run (a warning, not a refusal: the model may be
        meant for another machine)."""
        fits, line = will_fit(inventory(), sizes, hparams, settings=budget)
        if fits:
            print(line, file=sys.stderr)
        else:
            logging.getLogger(__name__).warning("%s", line)

    printer = ProgressPrinter(sys.stderr)
    manifest = convert(
        args.source, name=args.name, allow_requant=args.allow_requant, on_progress=printer, on_sizes=say_fit
    )
    model = ModelDir(cache_root(), manifest["name"])
    rows = model.tier_rows(manifest)
    if args.json:
        out = {
            "name": manifest["name"],
            "source": manifest["source"]["ref"],
            "source_sha256": manifest["source"]["sha256"],
            "reconstructed": manifest["reconstructed"],
            "path": str(model.path),
            "f16_conversion": manifest["f16_conversion"],
            "tiers": rows,
        }
        print(json.dumps(out, indent=2))
    else:
        print(f"{manifest['name']}: {model.path}")
        for r in rows:
            fb = f", {r['fallbacks']} tensors on fallback types" if r["fallbacks"] else ""
            print(f"  {r['tier']:<7} {_gb(r['bytes']):>9}{fb}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    models = list_models()
    if args.json:
        out = []
        for m in models:
            md = ModelDir(m.path.parent, m.name)
            man = m.manifest or {}
            out.append(
                {
                    "name": m.name,
                    "path": str(m.path),
                    "complete": m.complete,
                    "reconstructed": man.get("reconstructed"),
                    "source": man.get("source", {}).get("ref"),
                    "tiers": md.tier_rows(man),
                }
            )
        print(json.dumps({"cache": str(cache_root()), "models": out}, indent=2))
        return 0
    if not models:
        print(f"no models in {cache_root()}; try `specquant convert demo`")
        return 0
    for m in models:
        man = m.manifest or {}
        flags = []
        if man.get("reconstructed"):
            flags.append("reconstructed f16")
        if not m.complete:
            flags.append("incomplete: run `specquant convert` again")
        print(f"{m.name}" + (f"  ({'; '.join(flags)})" if flags else ""))
        for t, rec in man.get("tiers", {}).items():
            fb = f"  {rec['fallbacks']} fallback tensors" if rec.get("fallbacks") else ""
            print(f"  {t:<7} {_gb(rec['bytes']):>9}{fb}")
    return 0


def _read_prompt(args: argparse.Namespace) -> str | None:
    if getattr(args, "prompt", None) is not None:
        return args.prompt
    if getattr(args, "prompt_file", None):
        if args.prompt_file == "-":
            return sys.stdin.read()
        try:
            return Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(
                f"cannot read prompt file {args.prompt_file}: {getattr(e, 'strerror', None) or e}"
            ) from None
    return None


def cmd_route(args: argparse.Namespace) -> int:
    from runtime.plan.router import route

    text = args.text if args.text is not None else _read_prompt(args)
    if text is None:
        raise UserError("give the text to route, or --prompt-file FILE")
    r = route(text)
    if args.json:
        print(json.dumps(r.as_dict(), indent=2))
    else:
        print(f"{r.level} (score {r.score:.3f}): {r.reason}")
    return 0


def _chat_options(args: argparse.Namespace) -> ChatOptions:
    # Flags given override the model's recommended sampling one by one; none given: the model's own.
    given = {"temperature": args.temp, "top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p, "seed": args.seed}
    overrides = tuple((name, value) for name, value in given.items() if value is not None)
    return ChatOptions(
        level=args.level,
        preset=args.preset,
        allow_lossy=args.allow_lossy,
        parent=args.parent,
        draft=args.draft,
        no_spec=args.no_spec,
        k=args.k,
        max_tokens=args.max_tokens,
        sampling_overrides=overrides,
        grammar=_grammar(args),
    )


def _grammar(args: argparse.Namespace) -> Grammar | None:
    """`--json-schema FILE` or `--json`: the grammar the answer follows (runtime.decode.grammar)."""
    from runtime.decode.grammar import Grammar, GrammarError

    if getattr(args, "json_object", False):
        return Grammar.json_object()
    path = getattr(args, "json_schema", None)
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read the JSON schema {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return Grammar.from_json_schema(text, strict=True)
    except GrammarError as e:
        raise UserError(f"{path}: {e}") from None


def _engine_settings(args: argparse.Namespace) -> EngineSettings:
    from runtime.engine.engine import EngineSettings
    from runtime.plan.placement import PlacementSettings

    if args.ctx < 256:
        raise UserError(f"--ctx {args.ctx} is too small (at least 256)")
    from runtime.machine.rpc import parse_endpoints

    placement = PlacementSettings(mode=args.placement, max_memory_bytes=_memory_budget(args))
    workers = parse_endpoints(args.rpc)
    if args.placement == "remote" and not workers:
        raise UserError("--placement remote needs a worker: --rpc HOST:PORT (see `specquant worker`)")
    return EngineSettings(n_ctx=args.ctx, n_threads=args.threads, placement=placement, rpc=workers)


def _engine(args: argparse.Namespace, isolated: bool = True) -> LoadedEngine:
    """The Engine; with workers (--rpc) in a child process unless not `isolated` (runtime.engine.process)."""
    from runtime.engine.engine import Engine
    from runtime.engine.process import open_engine

    settings = _engine_settings(args)
    name = _model_name(args.model)
    return open_engine(name, settings) if isolated else Engine(name, settings)


def _model_name(name: str | None) -> str:
    """`--model NAME`, else the one the runtime would pick; on a fresh machine the demo, converted first."""
    from converters.convert import ensure_demo
    from runtime.engine.engine import resolve_model

    if name is None:
        ensure_demo()
    return resolve_model(name).name


def _memory_budget(args: argparse.Namespace) -> int | None:
    if args.max_memory is None:
        return None
    if not args.max_memory > 0:
        raise UserError(f"--max-memory {args.max_memory:g} must be more than 0 GB")
    return int(args.max_memory * 1e9)


def cmd_chat(args: argparse.Namespace) -> int:
    options = _chat_options(args)  # bad values fail before any model loads
    prompt = _read_prompt(args)
    engine = _engine(args)
    try:
        if prompt is None:
            return _repl(engine, options)
        messages = [{"role": "user", "content": prompt}]
        if args.json:
            text, last = _collect(engine, messages, options, stream=None)
            out = {
                "text": text,
                "route": last.route.as_dict(),
                "parent": last.choice.parent,
                "draft": last.choice.draft,
                "ngram": last.choice.ngram,
                "why": last.choice.why,
                "placement": last.placement.as_dict(),
                "stats": last.stats.as_dict(),
            }
            print(json.dumps(out, indent=2, ensure_ascii=False))
        else:
            _, last = _collect(engine, messages, options, stream=sys.stdout)
            print(file=sys.stdout)
            print(_stats_line(last), file=sys.stderr)
    finally:
        engine.close()
    return 0


def _collect(engine: Any, messages: list[dict[str, str]], options: Any, stream: TextIO | None) -> tuple[str, Any]:
    """The answer's text and last Chunk; its text is written to `stream` as it comes, when one is given."""

    def write(text: str) -> None:
        assert stream is not None
        stream.write(text)
        stream.flush()

    answer = engine.chat(messages, options, on_text=write if stream is not None else None)
    return answer.text, answer.last


def _stats_line(chunk: Any) -> str:
    from runtime.engine.chat import answer_facts, stats_line

    return stats_line(answer_facts(chunk), detail=True)


def _repl(engine: Any, options: Any) -> int:
    """Interactive chat with streaming; /reset clears the conversation, /quit or Ctrl-D leaves."""
    from runtime.machine.rpc import WorkerError

    messages: list[dict[str, str]] = []
    print(f"SpecQuant chat with {engine.model.name}. /reset clears the conversation; /quit or Ctrl-D leaves.")
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return 0
        if not line.strip():
            continue
        if line.strip() in ("/quit", "/exit"):
            return 0
        if line.strip() == "/reset":
            messages.clear()
            continue
        messages.append({"role": "user", "content": line})
        try:
            text, last = _collect(engine, messages, options, stream=sys.stdout)
        except KeyboardInterrupt:
            print("\n[stopped]")
            messages.pop()
            continue
        except WorkerError as e:  # the chat goes on: the next turn reconnects (runtime.engine.process)
            print(f"\nspecquant: error: {e}", file=sys.stderr)
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": text})
        print()
        notice = engine.take_notice()
        if notice:
            print(f"specquant: {notice}", file=sys.stderr)
        print(_stats_line(last), file=sys.stderr)


def cmd_info(args: argparse.Namespace) -> int:
    from runtime.decode.costs import format_costs
    from runtime.machine import rpc
    from runtime.machine.hardware import ensure_backends
    from runtime.plan.policy import PRESETS

    engine = _engine(args, isolated=False)  # one-shot: a lost worker ends it with one line (runtime.machine.rpc)
    try:
        from runtime.engine.chat import ChatOptions

        # What an answer at each level would run on: the same decision as a chat's (runtime.engine.decide).
        plans = {level: engine.decide("", ChatOptions(level=level)).placement.as_dict() for level in PRESETS["exact"]}
        out = {
            "model": engine.model.name,
            "path": str(engine.model.path),
            "reconstructed": engine.manifest.get("reconstructed"),
            "tiers": ModelDir(engine.model.root, engine.model.name).tier_rows(engine.manifest),
            "hardware": engine.hardware.as_dict(),
            "cpu_kernels": ensure_backends().as_dict(),
            "placement": plans,
            "n_ctx": engine.settings.n_ctx,
            "workers": [w.as_dict() for w in engine.workers],
        }
        costs = None
        if args.costs:
            drafts = [t for t in ("q8_0", "q4_k_m") if t in engine.manifest["tiers"]]
            costs, cached = engine.costs("f16", drafts, refresh=args.refresh)
            out["costs"] = costs.as_dict() | {"cached": cached}
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"model   {out['model']} ({out['path']})" + ("  [reconstructed f16]" if out["reconstructed"] else ""))
            for r in out["tiers"]:
                print(f"  {r['tier']:<7} {_gb(r['bytes']):>9}")
            hw = out["hardware"]
            gpus = ", ".join(g["name"] for g in hw["gpus"]) or "none"
            print(
                f"machine {hw['cpu']}, {hw['physical_cores']} cores, {hw['ram_available_gb']} GB RAM free, GPUs: {gpus}"
            )
            print(f"kernels {ensure_backends().describe()}")
            for w in engine.workers:
                mem = sum(t for _, t in w.devices) / 1e9
                print(
                    f"worker  {w.endpoint}: protocol {w.version}, {len(w.devices)} device(s), {mem:.1f} GB, "
                    f"round trip {w.rtt_s * 1000:.2f} ms, clears memory at {w.clear_bps / 1e9:.0f} GB/s "
                    f"(here {rpc.local_clear_speed() / 1e9:.0f} GB/s)"
                )
            for level, p in plans.items():
                print(f"  {level:<6} {p['reason']}")
            if costs is not None:
                print(format_costs(costs, out["costs"]["cached"]))
    finally:
        engine.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from runtime.api import server
    from runtime.engine.thread import EngineThread

    key = args.api_key or os.environ.get("SPECQUANT_API_KEY") or None
    config = server.ServeConfig(args.host, args.port, key, tuple(args.cors_origin or ()))
    server.check_config(config)
    if args.max_queue < 1:
        raise UserError(f"--max-queue {args.max_queue} must be at least 1")
    defaults = server.Defaults(_model_name(args.model), _engine_settings(args), _chat_options(args))
    sock = server.bind(config)
    url = server.url_of(sock)
    auth = ' -H "Authorization: Bearer $SPECQUANT_API_KEY"' if key else ""
    print(f"SpecQuant API for {defaults.model} on {url}/v1 (OpenAI-compatible; Ctrl-C stops)")
    print(
        f"try: curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} "
        """-d '{"messages": [{"role": "user", "content": "Hello!"}]}'""",
        flush=True,
    )
    logging.getLogger("specquant.server").setLevel(logging.INFO)  # one line per request: never its content
    runner = EngineThread(max_queue=args.max_queue)
    try:
        server.serve(server.Service(runner, lambda: defaults, config), sock)
    finally:
        runner.close()
        sock.close()
    print("stopped", file=sys.stderr)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
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
    thread = rpc.serve(ep, threads, devices, cache, network_cache=cache is not None)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    raise UserError(f"the worker could not listen on {ep} (see llama.cpp's message above)")


def cmd_bench(args: argparse.Namespace) -> int:
    from runtime.bench.run import main_bench
    from runtime.engine.engine import EngineSettings
    from runtime.plan.placement import PlacementSettings

    main_bench(
        args.model,
        args.configs,
        args.prompts,
        args.max_tokens,
        args.repeats,
        args.quick,
        args.out,
        EngineSettings(
            n_ctx=args.ctx,
            n_threads=args.threads,
            placement=PlacementSettings(max_memory_bytes=_memory_budget(args)),
        ),
        with_sweep=args.sweep,
        allow_exec=args.allow_exec,
        memory=not args.no_memory,
        sampled=args.sampled,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from runtime.engine.engine import EngineSettings

    engine = EngineSettings()
    parser = _OneLineParser(prog="specquant", description="Routed speculative decoding over GGUF precision tiers.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show detailed logs, llama.cpp's included")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)

    p = sub.add_parser("convert", help="convert a checkpoint into f16 / q8_0 / q4_k_m tiers in the cache")
    p.add_argument("source", help="Hugging Face directory or repo id (org/name), a .gguf file, or 'demo'")
    p.add_argument("--name", help="model name in the cache (default: from the source)")
    p.add_argument("--allow-requant", action="store_true", help="accept a quantized GGUF (reconstructs F16)")
    p.add_argument("--max-memory", type=float, metavar="GB", help=MAX_MEMORY_HELP)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("list", help="list cached models and their tiers")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("route", help="show a prompt's complexity level")
    p.add_argument("text", nargs="?", help="the prompt")
    p.add_argument("--prompt-file", help="read the prompt from FILE (- for stdin)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_route)

    for name, func, text in (
        ("info", cmd_info, "show the model, the hardware and the placement plan"),
        ("chat", cmd_chat, "chat: one prompt, or an interactive session"),
        ("serve", cmd_serve, "serve an OpenAI-compatible API on this computer (127.0.0.1 by default)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--model", help="model name in the cache (default: the only one, else the demo)")
        p.add_argument("--ctx", type=int, default=engine.n_ctx, help=f"context size in tokens (default {engine.n_ctx})")
        p.add_argument("--threads", type=int, default=engine.n_threads, help="threads (default: physical cores)")
        p.add_argument("--placement", default=PLACEMENT.mode, choices=PLACEMENT_MODES, help="where tiers run")
        p.add_argument("--max-memory", type=float, metavar="GB", help=MAX_MEMORY_HELP)
        p.add_argument(
            "--rpc", metavar="HOST:PORT[,...]", help="workers (`specquant worker`) that may run the parent's layers"
        )
        p.set_defaults(func=func)
        if name == "serve":
            _add_serve_flags(p)
        else:
            p.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "info":
            p.add_argument(
                "--costs",
                action="store_true",
                help="measure (once, at most ~10 s; cached) what speculation costs here: v(n), c, each draft's cap",
            )
            p.add_argument("--refresh", action="store_true", help="with --costs: measure again, ignoring the cache")
            continue
        if name == "chat":
            src = p.add_mutually_exclusive_group()
            src.add_argument("--prompt", help="the prompt (without it: an interactive chat)")
            src.add_argument("--prompt-file", help="read the prompt from FILE (- for stdin)")
            fmt = p.add_mutually_exclusive_group()
            fmt.add_argument("--json-schema", metavar="FILE", help="answer in JSON that follows this JSON schema")
            fmt.add_argument("--json-object", action="store_true", help="answer with a JSON object")
        p.add_argument("--level", default=CHAT.level, choices=("auto", *LEVELS))
        p.add_argument("--preset", default=CHAT.preset, choices=PRESET_NAMES)
        p.add_argument("--allow-lossy", action="store_true", help="auto preset: accept lower precision where faster")
        p.add_argument("--parent", choices=TIER_CHOICES, help="answer with this tier")
        p.add_argument(
            "--draft",
            choices=DRAFT_CHOICES,
            help="draft with this tier alone, n-gram lookup alone (ngram), or none (default: both, where they pay)",
        )
        p.add_argument("--no-spec", action="store_true", help="no speculation (same as --draft none)")
        p.add_argument("--k", type=int, help="fixed draft length (default: the controller picks k each cycle)")
        unsaid = " when a request does not say" if name == "serve" else ""
        p.add_argument(
            "--max-tokens", type=int, default=CHAT.max_tokens,
            help=f"answer length in tokens{unsaid} (default {CHAT.max_tokens})",
        )
        model_says = "default: the model's recommendation, else llama.cpp's"
        d = LLAMA_DEFAULTS
        p.add_argument("--temp", type=float, help=f"temperature; 0 is greedy ({model_says}: {d.temperature:g})")
        p.add_argument("--top-k", type=int, help=f"{model_says} ({d.top_k})")
        p.add_argument("--top-p", type=float, help=f"{model_says} ({d.top_p:g})")
        p.add_argument("--min-p", type=float, help=f"{model_says} ({d.min_p:g})")
        p.add_argument(
            "--seed", type=int, help="random seed of sampled decoding, 0 to 2^64 - 1 (default: a fresh one per answer)"
        )

    from runtime.machine.rpc import DEFAULT_PORT

    p = sub.add_parser("worker", help="lend this computer's processors and memory to another one's SpecQuant")
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
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("bench", help="measure configurations side by side (interleaved, medians, ratios)")
    p.add_argument("--model", help="model name in the cache")
    p.add_argument("--prompts", nargs="+", help="prompt sets (JSON lines with a 'prompt'); default: assets/prompts")
    p.add_argument("--configs", nargs="+", help="tiers, PARENT<-DRAFT[:kN], presets or llama-cpp-python")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="two prompts per set")
    p.add_argument(
        "--allow-exec",
        action="store_true",
        help="add HumanEval: runs model-written code in a subprocess with a timeout",
    )
    p.add_argument("--sweep", action="store_true", help="add the acceptance sweep (q4_k_m/q3_k_m/q2_k drafts, T=0/1)")
    p.add_argument(
        "--sampled",
        action="store_true",
        help="decode at the model's recommended sampling (seeded) instead of greedy; texts are then not compared",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the per-configuration peak-memory runs")
    p.add_argument("--ctx", type=int, default=engine.n_ctx)
    p.add_argument("--threads", type=int, default=engine.n_threads)
    p.add_argument("--max-memory", type=float, metavar="GB", help=MAX_MEMORY_HELP)
    p.add_argument("--out", help="write results.json into this folder")
    p.set_defaults(func=cmd_bench)
    return parser


def _add_serve_flags(p: argparse.ArgumentParser) -> None:
    from runtime.api.schema import DEFAULT_PORT

    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this computer only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument(
        "--api-key", help="require 'Authorization: Bearer KEY' (or set SPECQUANT_API_KEY); needed beyond loopback"
    )
    p.add_argument("--max-queue", type=int, default=32, help="requests that may wait; more get 429 (default 32)")
    p.add_argument("--cors-origin", action="append", metavar="ORIGIN", help="allow browser pages from ORIGIN")


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s" if not verbose else "%(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("llama.cpp").setLevel(logging.DEBUG if verbose else logging.ERROR)
    logging.addLevelName(logging.WARNING, "warning")
    logging.addLevelName(logging.ERROR, "error")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    return run_command("specquant", lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
