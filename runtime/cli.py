"""`specquant`: the command line. Bad input exits 2 with one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from runtime.cache import ModelDir, cache_root, list_models
from runtime.errors import Cancelled, SpecQuantError, UserError

log = logging.getLogger("specquant")


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

    printer = ProgressPrinter(sys.stderr)
    manifest = convert(args.source, name=args.name, allow_requant=args.allow_requant, on_progress=printer)
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


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="specquant", description="Routed speculative decoding over GGUF precision tiers.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show detailed logs, llama.cpp's included")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)

    p = sub.add_parser("convert", help="convert a checkpoint into f16 / q8_0 / q4_k_m tiers in the cache")
    p.add_argument("source", help="Hugging Face directory or repo id (org/name), a .gguf file, or 'demo'")
    p.add_argument("--name", help="model name in the cache (default: from the source)")
    p.add_argument("--allow-requant", action="store_true", help="accept a quantized GGUF (reconstructs F16)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("list", help="list cached models and their tiers")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_list)
    return parser


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
    try:
        return args.func(args)
    except UserError as e:
        print(f"specquant: error: {e}", file=sys.stderr)
        return 2
    except Cancelled:
        print("specquant: cancelled", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("\nspecquant: interrupted; nothing half-written was kept", file=sys.stderr)
        return 130
    except SpecQuantError as e:
        log.debug("failure", exc_info=True)
        print(f"specquant: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
