"""The context `specquant serve` answers with when `--ctx` does not say, planned from memory as the tiers are.

Coding agents send long prompts (Claude Code 2.1.197's first is 22,861 tokens, issue #60) and ask for long
answers, so the server aims at AGENT_CTX tokens. The model's training length caps that, and so does memory:
the context is the largest (in steps of STEP tokens, never below FLOOR_CTX, the engine's default) at which
placement (runtime.plan.placement) still keeps the tiers it keeps at FLOOR_CTX (the parent, its draft, the
draft model), their KV caches at that context included (each loaded tier keeps its own: 2 x n_layer x
n_head_kv x head_dim F16 values a token), with the prompt cache beside it. A longer context never costs
precision or a draft: where F16 and its draft fit at 4,096 tokens but not at 32,768, the context gives way.
The plan says why it is what it is, in words for the server's start line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.errors import UserError
from runtime.machine.hardware import Inventory
from runtime.plan.placement import GB, PRECISION_ORDER, PlacementSettings, Plan, TierSize, plan_precision
from runtime.plan.residency import manifest_tiers

AGENT_PROMPT = 22_900  # Claude Code 2.1.197's first prompt: 22,861 tokens (tests/data/agents/captured)
AGENT_CTX = 32_768  # room for that prompt, the tools' results that follow, and an answer
FLOOR_CTX = 4_096  # EngineSettings' default: the planned context is never smaller
STEP = 4_096


@dataclass(frozen=True)
class ContextPlan:
    """`n_ctx` tokens, and `why` in words ("room for coding agents' prompts", "the model was trained on 8,192
    tokens", ...); `holds_agents`: whether coding agents' prompts fit with room to answer."""

    n_ctx: int
    why: str

    @property
    def holds_agents(self) -> bool:
        return self.n_ctx >= AGENT_PROMPT + 4096


def kv_bytes_per_token(hparams: Mapping[str, Any]) -> int:
    """One tier's KV cache per token of context: K and V, F16, every layer (as placement's tier_size counts)."""
    return 2 * int(hparams["n_layer"]) * int(hparams["n_head_kv"]) * int(hparams["head_dim"]) * 2


def trained_context(manifest: Mapping[str, Any]) -> int | None:
    """The context the model was trained on (its tiers' `n_ctx_train`), None where the manifest does not say."""
    lengths = [rec.get("hparams", {}).get("n_ctx_train") for rec in manifest.get("tiers", {}).values()]
    known = [int(n) for n in lengths if n]
    return min(known) if known else None


def plan_context(
    name: str,
    manifest: Mapping[str, Any],
    inv: Inventory,
    placement: PlacementSettings,
    cache_bytes: int,
    sibling: Mapping[str, Any] | None = None,
) -> ContextPlan:
    """The context for model `name` (its manifest) on `inv`, with `cache_bytes` of prompt cache beside it and
    the draft model's manifest `sibling` (`--draft-model`) planned with it."""
    trained = trained_context(manifest)
    target = AGENT_CTX if trained is None else max(FLOOR_CTX, min(AGENT_CTX, trained))
    floor = _fit(manifest, FLOOR_CTX, inv, placement, cache_bytes, sibling)
    if isinstance(floor, str):
        return ContextPlan(FLOOR_CTX, f"the default: {floor}")
    budget = placement.ram_budget(inv)
    missed: Plan | str | None = None
    n = target
    while n > FLOOR_CTX:
        got = _fit(manifest, n, inv, placement, cache_bytes, sibling)
        if isinstance(got, Plan) and _tiers(got) == _tiers(floor) and got.ram_bytes + cache_bytes <= budget:
            break
        missed = missed or got
        n = (n - 1) // STEP * STEP  # the next step down (a target between steps goes to the step below it)
    if missed is None:
        if n == AGENT_CTX:
            return ContextPlan(n, f"planned: room for coding agents' prompts (about {AGENT_PROMPT:,} tokens) and "
                                  "their answers")
        if trained is not None and trained < n:
            return ContextPlan(n, f"the default; {name} was trained on only {trained:,} tokens")
        return ContextPlan(n, f"planned: {name} was trained on {trained:,} tokens")
    return ContextPlan(n, f"planned from memory: {target:,} tokens {_why_not(missed, floor, cache_bytes, budget)}")


def _fit(
    manifest: Mapping[str, Any],
    n_ctx: int,
    inv: Inventory,
    placement: PlacementSettings,
    cache_bytes: int,
    sibling: Mapping[str, Any] | None,
) -> Plan | str:
    """The plan placement makes for the model alone at `n_ctx` (its most precise tier that fits, the least
    precise as its draft, as runtime.plan.residency judges it), or why there is none."""
    tiers = manifest_tiers(manifest, n_ctx)
    if not tiers:
        return "the model's manifest predates its shape facts (convert it again to plan its context)"
    present = [t for t in PRECISION_ORDER if t in tiers]
    draft = present[-1] if len(present) > 1 else None
    drafting: TierSize | None = None
    if sibling is not None:
        theirs = manifest_tiers(sibling, n_ctx)
        drafting = min(theirs.values(), key=lambda t: t.file_bytes) if theirs else None
    try:
        return plan_precision(inv, dict(tiers), present[0], draft, placement, sibling=drafting)
    except UserError as e:
        return f"the model does not fit this machine's memory even at {n_ctx:,} tokens ({e})"


def _tiers(p: Plan) -> tuple[str, str | None, bool]:
    """What a plan keeps in memory: its parent, its draft tier, whether the draft model."""
    return p.parent.tier, p.draft.tier if p.draft else None, p.sibling is not None


def _why_not(missed: Plan | str, floor: Plan, cache_bytes: int, budget: float) -> str:
    """Why the target context did not fit: the words after "32,768 tokens"."""
    if isinstance(missed, str):
        return "would not fit this machine's memory"
    parent = floor.parent.tier.upper()
    if missed.parent.tier != floor.parent.tier:
        return (f"would leave room for {missed.parent.tier.upper()} only, not {parent}: the context gave way, "
                "not the precision")
    if floor.draft is not None and missed.draft is None:
        return f"would leave no room for the {floor.draft.tier.upper()} draft beside {parent}"
    if floor.sibling is not None and missed.sibling is None:
        return f"would leave no room for the draft model beside {parent}"
    return (f"would need {(missed.ram_bytes + cache_bytes) / GB:.1f} GB of RAM with the prompt cache, "
            f"{budget / GB:.1f} GB is available for models")
