"""Deciding how one answer runs, before anything loads: a pure function of the prompt, the request's
options and the machine's facts (docs/architecture.md §3).

The router judges the last user message's level; the preset (or the user's pins, or for the default `auto`
this machine's calibration) picks the parent and draft tiers; the placement puts their layers where they fit;
and where memory is short the precision gives way (a less precise parent, or no draft) unless the parent is pinned. The
Engine runs what this returns; `specquant info` shows it without loading a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from runtime.engine.options import ChatOptions
from runtime.machine.hardware import Inventory
from runtime.plan import router
from runtime.plan.placement import PlacementSettings, Plan, TierSize, plan_precision
from runtime.plan.policy import Choice, choose
from runtime.plan.router import Route, RouterSettings


@dataclass(frozen=True)
class Decision:
    route: Route  # the level that decides (a pinned level, with the router's own verdict in its reason)
    choice: Choice  # the parent and draft as the placement allows them
    placement: Plan


def decide(
    text: str,
    options: ChatOptions,
    tiers: Mapping[str, TierSize],
    hardware: Inventory,
    placement: PlacementSettings,
    router_settings: RouterSettings,
    calibration: dict[str, Any] | None = None,
    sibling: TierSize | None = None,
) -> Decision:
    """How the answer to `text` runs under `options` on `hardware` with the model's `tiers`.
    `calibration` is this machine's measured speeds for the `auto` preset (None: not measured, or another
    preset); `sibling` the draft model's tier (`--draft-model`), planned beside the pair when the answer
    speculates. A level pinned high is the user asking for precision: `auto` then answers as `exact`."""
    route = router.route(text, router_settings)
    if options.level != "auto":  # a pinned level is the one that decides, and the one shown
        why = f"{options.level.capitalize()}: pinned (the router judged it {route.level})."
        route = replace(route, level=options.level, reason=why)
    choice = choose(
        route.level,
        options.preset,
        allow_lossy=options.allow_lossy,
        calibration=calibration,
        asked_precision=options.level == "high",
        parent=options.parent,
        draft=options.draft,
        no_spec=options.no_spec,
        k=options.k,
    )
    sibling = sibling if choice.draft is not None or choice.ngram else None  # plain decoding: no draft model
    pinned = options.parent is not None
    plan = plan_precision(hardware, dict(tiers), choice.parent, choice.draft, placement, pinned, sibling)
    return Decision(route, fit_choice(choice, plan), plan)


def fit_choice(choice: Choice, placement: Plan) -> Choice:
    """The choice as the plan allows it: a less precise parent, or no draft, when memory is short."""
    draft = placement.draft.tier if placement.draft is not None else None
    if (placement.parent.tier, draft) == (choice.parent, choice.draft):
        return choice
    why = f"{choice.why}; {placement.precision_note}" if placement.precision_note else choice.why
    if draft is None and choice.draft is not None and not placement.precision_note:
        why += "; draft dropped for memory"
    # A parent that gave way for memory is not the preset's: its words are not what the preset promises.
    named = choice.preset if placement.parent.tier == choice.parent else None
    vs_q4 = choice.vs_q4 if named else None
    return replace(choice, parent=placement.parent.tier, draft=draft, why=why, preset=named, vs_q4=vs_q4)
