"""`specquant convert`: a checkpoint into f16 / q8_0 / q4_k_m tiers in the cache, with progress on stderr."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any, TextIO

from commands.common import MAX_MEMORY_HELP, gb, memory_budget
from runtime.models.cache import ModelDir, cache_root

NAME = "convert"
HELP = "convert a checkpoint into f16 / q8_0 / q4_k_m tiers in the cache"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="Hugging Face directory or repo id (org/name), a .gguf file, or 'demo'")
    p.add_argument("--name", help="model name in the cache (default: from the source)")
    p.add_argument("--allow-requant", action="store_true", help="accept a quantized GGUF (reconstructs F16)")
    p.add_argument("--max-memory", type=float, metavar="GB", help=MAX_MEMORY_HELP)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument(
        "--no-quality",
        action="store_true",
        help="skip measuring what each tier keeps of F16's words (`specquant info` measures it when missing)",
    )


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
            self.stream.write(f"\r{p.stage:<7} {bar} {frac:4.0%}  {gb(p.done)} / ~{gb(p.total)} ")
        self.stream.flush()

    def _end_stage(self) -> None:
        if self.stage and self.stage not in ("hash", "done"):
            took = time.monotonic() - self.started
            if self.tty:
                self.stream.write("\n")
            elif self.last.message != "verified, kept":
                self.stream.write(f"{self.stage}: done in {took:.1f} s\n")


def main(args: argparse.Namespace) -> int:
    from converters.convert import convert
    from runtime.machine.hardware import inventory
    from runtime.plan.placement import PlacementSettings, will_fit

    budget = PlacementSettings(max_memory_bytes=memory_budget(args))

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
    figures = None if args.no_quality else _quality(model)
    if args.json:
        out = {
            "name": manifest["name"],
            "source": manifest["source"]["ref"],
            "source_sha256": manifest["source"]["sha256"],
            "reconstructed": manifest["reconstructed"],
            "path": str(model.path),
            "f16_conversion": manifest["f16_conversion"],
            "tiers": rows,
            "quality": figures,
        }
        print(json.dumps(out, indent=2))
    else:
        print(f"{manifest['name']}: {model.path}")
        for r in rows:
            fb = f", {r['fallbacks']} tensors on fallback types" if r["fallbacks"] else ""
            print(f"  {r['tier']:<7} {gb(r['bytes']):>9}{fb}")
        if figures is not None:
            from runtime.plan import quality

            print(f"against F16, on {figures['tokens_scored']} tokens of a reference text:")
            for line in quality.lines(figures):
                print(f"  {line}")
    return 0


def _quality(model: ModelDir) -> dict[str, Any] | None:
    """What each tier keeps of F16's words (runtime.plan.quality), measured once the tiers are in place; kept
    figures when the tiers did not change. A failure here is a warning: the conversion itself succeeded."""
    from runtime.errors import Cancelled, SpecQuantError
    from runtime.plan import quality

    measuring = quality.cached(model) is None
    if measuring:
        print("quality: measuring what each tier keeps of F16's words", file=sys.stderr)
    started = time.monotonic()
    try:
        figures = quality.load_or_measure(model, refresh=measuring)
    except Cancelled:
        raise
    except SpecQuantError as e:
        logging.getLogger(__name__).warning("could not measure what each tier keeps of F16's words: %s", e)
        return None
    if measuring:
        print(f"quality: done in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return figures
