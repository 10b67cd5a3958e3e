"""How many models may stay loaded at once, and which fit at all: pure functions of the models' manifests, the
machine and the placement's settings (runtime.plan.placement), for `specquant serve`'s models by name.

A model's resident set is what its plan holds in RAM (its tiers as placed, their KV caches at the context size
and compute buffers: `Plan.ram_bytes`), plus the RAM its prompt cache may fill. A model "fits" when placement
finds a plan for it alone within the budget; the default number kept loaded is how many of the converted
models' resident sets fit the budget together, smallest first (at least one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.errors import UserError
from runtime.machine.hardware import Inventory
from runtime.plan.placement import PRECISION_ORDER, PlacementSettings, TierSize, plan_precision, tier_size


@dataclass(frozen=True)
class Residency:
    """One model as placement sees it: `ram_bytes`, its resident set (0 when it does not fit), and `why` not."""

    name: str
    ram_bytes: int
    why: str = ""

    @property
    def fits(self) -> bool:
        return not self.why


def manifest_tiers(manifest: Mapping[str, Any], n_ctx: int) -> dict[str, TierSize] | None:
    """The tiers' placement facts from a manifest (None: it predates them, so nothing can be said)."""
    tiers = {}
    for tier, rec in manifest.get("tiers", {}).items():
        if rec.get("hparams") is None or tier not in PRECISION_ORDER:
            return None
        tiers[tier] = tier_size(tier, rec["bytes"], rec["hparams"], n_ctx)
    return tiers or None


def residency(
    name: str,
    tiers: Mapping[str, TierSize] | None,
    inv: Inventory,
    settings: PlacementSettings,
    cache_bytes: int,
    sibling: TierSize | None = None,
) -> Residency:
    """Model `name`'s resident set on `inv`: the plan placement makes for it alone (its most precise tier that
    fits, with the least precise as its draft, and its draft model `sibling`, where they fit too) and
    `cache_bytes` of prompt cache."""
    if not tiers:
        return Residency(name, 0, "its manifest predates placement facts (convert it again)")
    present = [t for t in PRECISION_ORDER if t in tiers]
    draft = present[-1] if len(present) > 1 else None
    try:
        chosen = plan_precision(inv, dict(tiers), present[0], draft, settings, sibling=sibling)
    except UserError as e:
        return Residency(name, 0, str(e))
    return Residency(name, chosen.ram_bytes + cache_bytes)


def models_that_fit(models: list[Residency], budget: float) -> int:
    """How many of `models` fit `budget` bytes together, smallest first; at least 1 (one always may load)."""
    total, count = 0, 0
    for m in sorted((m for m in models if m.fits), key=lambda m: m.ram_bytes):
        total += m.ram_bytes
        if total > budget:
            break
        count += 1
    return max(1, count)
