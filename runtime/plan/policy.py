"""Presets: which parent answers each complexity level, and which drafts may help it (docs/architecture.md §6.2).

Three speed presets along the frontier, named for what the user gets: `exact` (F16's words), `balanced` (Q8_0's)
and `fast` (Q4_K_M's). Each answers with its parent's own greedy tokens and offers the controller
(runtime/decode/controller.py) every draft source that may pay: n-gram and suffix lookup, grammar-forced tokens,
and a cheaper tier where there is one; the controller uses a draft only in the cycles where it pays. The
default, `auto`, picks the most precise of the three whose speed this machine measured at least as high as a
plain Q4_K_M file's (runtime/engine/calibrate.py), and `fast` until it has measured (`frontier_pick`). `paper`
is the paper's fixed table. A user can always pin a preset, a level, a parent/draft pair, n-gram drafts only,
or no speculation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.decode.controller import NGRAM  # `--draft ngram`: prompt lookup only, no draft tier
from runtime.errors import UserError
from runtime.models.cache import TIERS

# The frontier, most precise first: each preset's parent and the cheaper tier it may draft with.
FRONTIER: dict[str, tuple[str, str | None]] = {
    "exact": ("f16", "q4_k_m"),
    "balanced": ("q8_0", "q4_k_m"),
    "fast": ("q4_k_m", None),  # no cheaper tier: the free drafts alone (lookups, forced tokens)
}
PRESETS: dict[str, dict[str, tuple[str, str | None]]] = {
    **{name: dict.fromkeys(("low", "medium", "high"), pair) for name, pair in FRONTIER.items()},
    "paper": {"low": ("q8_0", "q4_k_m"), "medium": ("f16", "q8_0"), "high": ("f16", None)},
}
DEFAULT_PRESET = "auto"
PRESET_NAMES = ("auto", *FRONTIER, "paper")
NGRAM_PRESETS = {*FRONTIER, "auto"}  # the paper's table has no n-gram drafts
UNCALIBRATED = "fast"  # the default's pick before this machine is measured: cheap, and never slower than Q4_K_M
# What each frontier preset gives, in the status line's words (`preset_words`).
WORDS = {"exact": "the full model's words", "balanced": "the Q8_0 model's words", "fast": "the Q4_K_M model's words"}
DRAFT_CHOICES = (*TIERS, NGRAM, "none")
PRECISION = {"q4_k_m": 0, "q8_0": 1, "f16": 2}  # higher is more precise


@dataclass(frozen=True)
class Choice:
    """The pair that answers one prompt, and why."""

    parent: str
    draft: str | None
    k: int | None  # fixed draft length, or None: the controller picks k every cycle
    why: str
    ngram: bool = False  # n-gram lookup is offered to the controller as a draft source
    preset: str | None = None  # the frontier preset that answers (exact, balanced, fast); None: paper or pins
    vs_q4: float | None = None  # its measured speed over a plain Q4_K_M file's on this machine (None: not measured)

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


def preset_words(
    preset: str | None, vs_q4: float | None, words: dict[str, str] = WORDS, yardstick: str = "a plain Q4 file"
) -> str:
    """The status line's words for a frontier preset: "Fast: the Q4_K_M model's words, 1.2× the speed of a
    plain Q4 file" ("" for none). The window passes its own `words` and `yardstick`, without tier names."""
    if preset not in words:
        return ""
    said = f"{preset.capitalize()}: {words[preset]}"
    if vs_q4 is None:
        return f"{said} (its speed not measured on this computer yet)"
    return f"{said}, {vs_q4:.1f}× the speed of {yardstick}"


def frontier_pick(calibration: dict[str, Any] | None) -> tuple[str, str]:
    """The default's preset and why: the most precise frontier preset whose measured speed is at least a plain
    Q4_K_M file's (`calibration["vs_q4"]`, speed over plain Q4_K_M's per preset), else `fast`; `fast` too
    before this machine is measured, rather than make the first answer wait for the measurement."""
    if calibration is None or not calibration.get("vs_q4"):
        return UNCALIBRATED, "auto: fast until this computer's speeds are measured (once per model)"
    ratios = calibration["vs_q4"]
    for name in FRONTIER:  # most precise first
        ratio = ratios.get(name)
        if ratio is not None and ratio >= 1.0:
            return name, f"auto: the most precise preset measured here at least as fast as plain Q4_K_M ({ratio:.2f}×)"
    return UNCALIBRATED, "auto: no preset measured here as fast as plain Q4_K_M; Q4_K_M plainly, without drafts"


def drafts_lose(calibration: dict[str, Any] | None) -> bool:
    """Whether this machine measured even `fast` (Q4_K_M with free drafts) slower than plain Q4_K_M: then the
    default decodes Q4_K_M plainly, so that it is never slower than what people run."""
    ratios = (calibration or {}).get("vs_q4") or {}
    return bool(ratios) and all(r is None or r < 1.0 for r in ratios.values())


def check_tier(tier: str, what: str) -> str:
    if tier not in TIERS:
        raise UserError(f"unknown {what} tier {tier!r}: choose from {', '.join(TIERS)}")
    return tier


def choose(
    level: str,
    preset: str = DEFAULT_PRESET,
    *,
    allow_lossy: bool = False,
    calibration: dict[str, Any] | None = None,
    asked_precision: bool = False,
    parent: str | None = None,
    draft: str | None = None,
    no_spec: bool = False,
    k: int | None = None,
) -> Choice:
    """The (parent, draft) for `level` under `preset`, with the user's pins applied last.

    `draft` is a tier, "ngram" (lookup only), "none" (plain decoding), or None (= the preset's). A draft
    equal to or more precise than its parent is refused: it could never pay. `calibration` is this machine's
    (runtime/engine/calibrate.py; None: not measured yet) for `auto`, which picks a frontier preset from it;
    `asked_precision` (the user pinned the high level) makes `auto` answer as `exact`. `allow_lossy` is kept for
    old callers: `auto` now weighs speed first at every level, so it changes nothing.
    """
    del allow_lossy  # the old auto's floors (#61 made the default speed-first)
    if preset not in PRESET_NAMES:
        raise UserError(f"unknown preset {preset!r}: choose from {', '.join(PRESET_NAMES)}")
    named, why, plain = preset, f"{preset} preset, {level} level", False
    if preset == "auto":
        plain = drafts_lose(calibration) and not asked_precision
        named, why = frontier_pick(calibration)
        if asked_precision:
            named, why = "exact", "auto: the high level, asked for by the user"
        elif draft in PRECISION and not parent and PRECISION[draft] >= PRECISION[FRONTIER[named][0]]:
            # A pinned draft tier asks for a parent it can draft for: the default's pick is too cheap for it.
            named, why = "exact", f"{why}; the pinned {draft} draft needs a more precise parent: exact"
    base_parent, base_draft = PRESETS[named][level]
    ratios = (calibration or {}).get("vs_q4") or {}
    chosen_parent = check_tier(parent, "parent") if parent else base_parent
    # A pinned draft is exactly what runs: a tier alone, n-gram lookup alone, or nothing.
    ngram = draft == NGRAM or (draft is None and not no_spec and not plain and preset in NGRAM_PRESETS)
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
    # Named for the status line only while it runs as the preset says (a pin makes it something else).
    frontier = named if named in FRONTIER and not (parent or draft or no_spec) else None
    vs_q4 = (1.0 if plain else ratios.get(frontier)) if frontier else None  # plain: Q4_K_M's own speed
    return Choice(chosen_parent, chosen_draft, k, why, ngram, frontier, vs_q4)
