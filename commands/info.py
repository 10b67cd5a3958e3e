"""`specquant info`: the model, the hardware, the placement plan per level, what the default preset answers
with here (with --calibrate: measured now) and, with --costs, what speculation costs on this machine."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from commands.common import add_engine_flags, gb, load_engine
from runtime.engine.call_formats import detect
from runtime.models.cache import ModelDir

log = logging.getLogger("specquant.info")

NAME = "info"
HELP = "show the model, the hardware and the placement plan"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--costs",
        action="store_true",
        help="measure (once, at most ~10 s; cached) what speculation costs here: v(n), c, each draft's cap",
    )
    p.add_argument("--refresh", action="store_true", help="with --costs: measure again, ignoring the cache")
    quality = p.add_mutually_exclusive_group()
    quality.add_argument(
        "--no-quality",
        action="store_true",
        help="show what precision buys only if already measured (it is measured once, when missing, otherwise)",
    )
    quality.add_argument(
        "--remeasure-quality", action="store_true", help="measure what precision buys again, ignoring the cache"
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure (once; cached) each preset's speed against a plain Q4_K_M file: what the default picks",
    )


def main(args: argparse.Namespace) -> int:
    from runtime.decode.drafts.model import source_name
    from runtime.decode.machine_costs import format_costs
    from runtime.machine import rpc
    from runtime.machine.hardware import ensure_backends
    from runtime.plan import quality
    from runtime.plan.policy import PRESETS, frontier_pick, preset_words

    engine = load_engine(args, isolated=False)  # one-shot: a lost worker ends it with one line (runtime.machine.rpc)
    try:
        from runtime.engine.options import ChatOptions

        template = _template(engine)  # read once: how it calls tools and whether it thinks both come from it
        call_format = detect(template)

        # What an answer at each level would run on: the same decision as a chat's (runtime.engine.decision).
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
            "tool_calls": call_format.name,
            "thinking": _thinking(template),
            "quality": _quality(engine, args),
            "draft_model": engine.sibling[0].name if engine.sibling else None,
            "can_draft_for": _can_draft_for(engine.model),
        }
        calibration = engine.calibration() if args.calibrate or engine.calibrated else None
        pick, why = frontier_pick(calibration)
        ratio = (calibration or {}).get("vs_q4", {}).get(pick)
        out["default"] = {"preset": pick, "why": why, "words": preset_words(pick, ratio),
                          "vs_q4": (calibration or {}).get("vs_q4")}
        costs = None
        if args.costs:
            drafts = [t for t in ("q8_0", "q4_k_m") if t in engine.manifest["tiers"]]
            if engine.sibling is not None:
                drafts.append(source_name(engine.sibling[0].name))
            costs, cached = engine.costs("f16", drafts, refresh=args.refresh)
            out["costs"] = costs.as_dict() | {"cached": cached}
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"model   {out['model']} ({out['path']})" + ("  [reconstructed f16]" if out["reconstructed"] else ""))
            for r in out["tiers"]:
                print(f"  {r['tier']:<7} {gb(r['bytes']):>9}")
            hw = out["hardware"]
            gpus = ", ".join(g["name"] for g in hw["gpus"]) or "none"
            print(
                f"machine {hw['cpu']}, {hw['physical_cores']} cores, {hw['ram_available_gb']} GB RAM free, GPUs: {gpus}"
            )
            print(f"kernels {ensure_backends().describe()}")
            print(f"tools   {call_format.describe()}")
            if engine.sibling is not None:
                model, tier = engine.sibling
                print(f"drafts  from model {model.name} ({tier.upper()}): the same vocabulary, token for token")
            if out["can_draft_for"]:
                print(f"can draft for: {', '.join(out['can_draft_for'])} (--draft-model {engine.model.name})")
            if out["thinking"] is not None:
                t = out["thinking"]
                switch = "switched by its template (enable_thinking)" if t["switchable"] else "no switch"
                print(f"thinks  between {t['open']} and {t['close']}; {switch}")
            for w in engine.workers:
                mem = sum(t for _, t in w.devices) / 1e9
                print(
                    f"worker  {w.endpoint}: protocol {w.version}, {len(w.devices)} device(s), {mem:.1f} GB, "
                    f"round trip {w.rtt_s * 1000:.2f} ms, clears memory at {w.clear_bps / 1e9:.0f} GB/s "
                    f"(here {rpc.local_clear_speed() / 1e9:.0f} GB/s)"
                )
            for level, p in plans.items():
                print(f"  {level:<6} {p['reason']}")
            if out["quality"] is not None:
                print(f"quality against F16, on {out['quality']['tokens_scored']} tokens of a reference text:")
                for line in quality.lines(out["quality"]):
                    print(f"  {line}")
            else:
                print("quality not measured yet (run `specquant info` without --no-quality to measure it)")
            measure = "" if calibration else " (`specquant info --calibrate` measures it, once)"
            print(f"default {out['default']['words']}{measure}")
            if costs is not None:
                print(format_costs(costs, out["costs"]["cached"]))
    finally:
        engine.close()
    return 0


def _quality(engine: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """What each tier keeps of F16's words (runtime.plan.quality): cached, else measured now, once, with a note."""
    from runtime.plan import quality

    model = ModelDir(engine.model.root, engine.model.name)
    figures = None if args.remeasure_quality else quality.cached(model)
    if figures is None and not args.no_quality:
        log.warning(
            "measuring what each tier keeps of F16's words, once (at most %d tokens per tier of a reference "
            "text; under a minute on the demo model, a few minutes on a 1.5B)",
            quality.MAX_CHUNKS * (quality.CHUNK // 2 - 1),
        )
        figures = quality.load_or_measure(model, refresh=True, threads=engine.settings.n_threads)
    return figures


def _can_draft_for(model: ModelDir) -> list[str]:
    """The cached models this one can draft for (runtime.decode.vocab)."""
    from runtime.decode.vocab import draft_targets
    from runtime.models.cache import list_models

    others = [ModelDir(m.path.parent, m.name) for m in list_models(model.root)]
    return draft_targets(others).get(model.name, [])


def _thinking(template: str | None) -> dict[str, Any] | None:
    """Whether the model thinks before it answers, from its chat template (runtime.engine.thinking)."""
    from dataclasses import asdict

    from runtime.engine.thinking import syntax_for

    syntax = syntax_for(template)
    return None if syntax is None else asdict(syntax)


def _template(engine: Any) -> str | None:
    """The model's chat template, from its first tier's metadata."""
    from runtime.decode.llama_backend import file_metadata

    model = ModelDir(engine.model.root, engine.model.name)
    path = model.tier_path(next(iter(engine.manifest["tiers"])))  # every tier carries the same template
    return file_metadata(path).get("tokenizer.chat_template")
