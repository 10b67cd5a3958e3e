"""`specquant list`: the cached models and their tiers."""

from __future__ import annotations

import argparse
import json

from commands.common import gb
from runtime.models.cache import ModelDir, cache_root, list_models

NAME = "list"
HELP = "list cached models and their tiers"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def main(args: argparse.Namespace) -> int:
    from runtime.decode.vocab import draft_targets
    from runtime.plan import quality

    models = list_models()
    drafts_for = draft_targets([ModelDir(m.path.parent, m.name) for m in models])
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
                    "quality": quality.cached(md),  # measured by convert or info; null until then
                    "can_draft_for": drafts_for.get(m.name, []),
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
        figures = quality.cached(ModelDir(m.path.parent, m.name))
        for t, rec in man.get("tiers", {}).items():
            fb = f"  {rec['fallbacks']} fallback tensors" if rec.get("fallbacks") else ""
            said = f"  {quality.words(figures, t)}" if figures is not None and t != "f16" else ""
            print(f"  {t:<7} {gb(rec['bytes']):>9}{fb}{said}")
        if figures is not None and figures.get("reconstructed"):
            print(f"  note: {quality.REQUANT_NOTE}")
        if drafts_for.get(m.name):
            print(f"  can draft for: {', '.join(drafts_for[m.name])} (--draft-model {m.name})")
    return 0
