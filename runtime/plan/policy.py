"""Presets: which parent answers each complexity level, and which drafts may help it (docs/architecture.md §6.2).

The default, `exact`, answers with F16's own tokens at every level and offers the controller the cheapest
tier and n-gram lookup as drafts: in exact mode speculation changes only the speed, and the controller
(runtime/decode/controller.py) uses a draft only in the cycles where it pays. `paper` is the paper's fixed table.
`auto` reads a calibration (runtime/engine/calibrate.py) measured once per model and machine. A user can always
pin a level, a parent/draft pair, n-gram drafts only, or no speculation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.decode.controller import NGRAM  # `--draft ngram`: prompt lookup only, no draft tier
from runtime.errors import UserError
from runtime.models.cache import TIERS

PRESETS: dict[str, dict[str, tuple[str, str | None]]] = {
    "exact": {"low": ("f16", "q4_k_m"), "medium": ("f16", "q4_k_m"), "high": ("f16", "q4_k_m")},
    "paper": {"low": ("q8_0", "q4_k_m"), "medium": ("f16", "q8_0"), "high": ("f16", None)},
}
PRESET_NAMES = ("exact", "paper", "auto")
NGRAM_PRESETS = {"exact", "auto"}  # the paper's table has no n-gram drafts
DRAFT_CHOICES = (*TIERS, NGRAM, "none")
PRECISION = {"q4_k_m": 0, "q8_0": 1, "f16": 2}  # higher is more precise
STRICT_FLOORS = {"low": "f16", "medium": "f16", "high": "f16"}
LOSSY_FLOORS = {"low": "q4_k_m", "medium": "q8_0", "high": "f16"}


@dataclass(frozen=True)
class Choice:
    """The pair that answers one prompt, and why."""

    parent: str
    draft: str | None
    k: int | None  # fixed draft length, or None: the controller picks k every cycle
    why: str
    ngram: bool = False  # n-gram lookup is offered to the controller as a draft source

    @property
    def label(self) -> str:
        """As the window shows it: "F16 ← Q4_K_M", "F16 ← n-gram", or "F16" alone."""
        if self.draft is not None:
            return f"{self.parent.upper()} ← {self.draft.upper()}"
        return f"{self.parent.upper()} ← n-gram" if self.ngram else self.parent.upper()


def more_precise(tier: str) -> str | None:
    """The next more precise tier ("answer at higher precision"), or None for F16."""
    ranked = sorted(PRECISION, key=PRECISION.__getitem__)
    i = ranked.index(tier)
    return ranked[i + 1] if i + 1 < len(ranked) else None


def check_tier(tier: str, what: str) -> str:
    if tier not in TIERS:
        raise UserError(f"unknown {what} tier {tier!r}: choose from {', '.join(TIERS)}")
    return tier


def choose(
    level: str,
    preset: str = "exact",
    *,
    allow_lossy: bool = False,
    calibration: dict[str, Any] | None = None,
    parent: str | None = None,
    draft: str | None = None,
    no_spec: bool = False,
    k: int | None = None,
) -> Choice:
    """The (parent, draft) for `level` under `preset`, with the user's pins applied last.

    `draft` is a tier, "ngram" (lookup only), "none" (plain decoding), or None (= the preset's). A draft
    equal to or more precise than its parent is refused: it could never pay.
    """
    if preset not in PRESET_NAMES:
        raise UserError(f"unknown preset {preset!r}: choose from {', '.join(PRESET_NAMES)}")
    if preset == "auto":
        if calibration is None:
            raise UserError("the auto preset needs a calibration; run it through the Engine, which calibrates")
        floors = LOSSY_FLOORS if allow_lossy else STRICT_FLOORS
        best = calibration["choices"]["lossy" if allow_lossy else "strict"][level]
        base_parent, base_draft, base_k = best["parent"], best["draft"], best.get("k")
        why = f"auto: fastest measured configuration with at least {floors[level]} precision"
    else:
        base_parent, base_draft = PRESETS[preset][level]
        base_k = None
        why = f"{preset} preset, {level} level"
    chosen_parent = check_tier(parent, "parent") if parent else base_parent
    # A pinned draft is exactly what runs: a tier alone, n-gram lookup alone, or nothing.
    ngram = draft == NGRAM or (draft is None and not no_spec and preset in NGRAM_PRESETS)
    if no_spec or draft in ("none", NGRAM):
        chosen_draft = None
    elif draft:
        chosen_draft = check_tier(draft, "draft")
    else:
        chosen_draft = base_draft
    if parent or draft or no_spec:
        why += "; pinned by the user"
    if chosen_draft is not None and PRECISION[chosen_draft] >= PRECISION[chosen_parent]:
        if draft:  # the user asked for it explicitly
            raise UserError(f"draft {chosen_draft} is not cheaper than parent {chosen_parent}")
        chosen_draft = None  # a preset's draft for a pinned cheaper parent: speculation cannot pay
    if k is not None and k < 1:
        raise UserError(f"--k {k} must be at least 1")
    return Choice(chosen_parent, chosen_draft, k if k is not None else base_k, why, ngram)
