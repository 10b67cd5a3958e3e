"""`specquant serve`'s context without --ctx (issue #60): planned from memory and the model's KV size per
token (runtime.plan.context), on the demo's real manifest and given memory figures; --ctx still overrides."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from commands import serve
from runtime.machine.hardware import Inventory
from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan.context import (
    AGENT_CTX,
    FLOOR_CTX,
    STEP,
    kv_bytes_per_token,
    plan_context,
    trained_context,
)
from runtime.plan.placement import GB, PRECISION_ORDER, PlacementSettings, plan_precision
from runtime.plan.residency import manifest_tiers

CACHE = 256 * 1024 * 1024  # the prompt cache beside the model, as serve plans it
MARGIN = PlacementSettings().margin_bytes


def machine(budget: float) -> Inventory:
    """A 4-core CPU with `budget` bytes for models (what is available, less placement's margin)."""
    return Inventory("test cpu", 4, int(64 * GB), int(budget) + MARGIN)


def longer_trained(manifest: dict[str, Any], n_ctx_train: int) -> dict[str, Any]:
    """The demo's manifest as a model trained on `n_ctx_train` tokens would have it (its shapes unchanged)."""
    out = copy.deepcopy(manifest)
    for rec in out["tiers"].values():
        rec["hparams"]["n_ctx_train"] = n_ctx_train
    return out


def needs(manifest: dict[str, Any], n_ctx: int, parent: str = "f16", cache: int = CACHE, draft: bool = True) -> int:
    """RAM placement plans for the model at `n_ctx` with `parent` (and its least precise tier as the draft,
    unless not `draft`), plus `cache` bytes of prompt cache: the budget at which that context just fits."""
    tiers = manifest_tiers(manifest, n_ctx)
    assert tiers is not None
    drafting = PRECISION_ORDER[-1] if draft else None
    return plan_precision(machine(1e15), tiers, parent, drafting, pinned=True).ram_bytes + cache


@pytest.fixture
def manifest(demo_model: ModelDir) -> dict[str, Any]:
    m = demo_model.read_manifest()
    assert m is not None
    return m


def test_the_demos_context_is_capped_by_its_training(manifest: dict[str, Any]) -> None:
    trained = trained_context(manifest)
    assert trained is not None and FLOOR_CTX < trained < AGENT_CTX  # SmolLM2-135M: 8,192
    plan = plan_context(DEMO_NAME, manifest, machine(32 * GB), PlacementSettings(), CACHE)
    assert plan.n_ctx == trained and f"trained on {trained:,} tokens" in plan.why
    assert not plan.holds_agents


def test_with_memory_to_spare_the_context_holds_coding_agents(manifest: dict[str, Any]) -> None:
    long = longer_trained(manifest, 131_072)
    plan = plan_context(DEMO_NAME, long, machine(needs(long, AGENT_CTX)), PlacementSettings(), CACHE)
    assert plan.n_ctx == AGENT_CTX and plan.holds_agents and "coding agents" in plan.why


def test_less_memory_gives_a_shorter_context_and_says_why(manifest: dict[str, Any]) -> None:
    long = longer_trained(manifest, AGENT_CTX)
    assert kv_bytes_per_token(long["tiers"]["f16"]["hparams"]) == 2 * 30 * 3 * 64 * 2  # 30 layers, 3 KV heads of 64
    budget = needs(long, AGENT_CTX) - 1  # one byte short of 32,768 tokens, and
    assert budget >= needs(long, AGENT_CTX - STEP)  # room for the step below (the KV grows with the context)
    plan = plan_context(DEMO_NAME, long, machine(budget), PlacementSettings(), CACHE)
    assert plan.n_ctx == AGENT_CTX - STEP and plan.holds_agents
    assert f"{AGENT_CTX:,} tokens would need {needs(long, AGENT_CTX) / GB:.1f} GB" in plan.why
    assert f"{budget / GB:.1f} GB is available" in plan.why
    steps = range(FLOOR_CTX, AGENT_CTX + 1, STEP)
    got = [plan_context(DEMO_NAME, long, machine(needs(long, n)), PlacementSettings(), CACHE).n_ctx for n in steps]
    assert got == list(steps)  # each step's memory gives that step
    short = plan_context(DEMO_NAME, long, machine(needs(long, FLOOR_CTX) - 1), PlacementSettings(), CACHE)
    assert short.n_ctx == FLOOR_CTX and not short.holds_agents  # never below the engine's default


def test_the_context_gives_way_before_the_precision_or_the_draft(manifest: dict[str, Any]) -> None:
    long = longer_trained(manifest, AGENT_CTX)
    steps = range(FLOOR_CTX, AGENT_CTX, STEP)
    budget = needs(long, AGENT_CTX, draft=False, cache=0)  # F16 alone fits with 32,768 tokens, not its draft
    assert budget < needs(long, AGENT_CTX, cache=0)
    plan = plan_context(DEMO_NAME, long, machine(budget), PlacementSettings(), 0)
    assert plan.n_ctx == max(n for n in steps if needs(long, n, cache=0) <= budget)
    assert "would leave no room for the Q4_K_M draft beside F16" in plan.why, plan
    budget = needs(long, AGENT_CTX, parent="q8_0", draft=False, cache=0)  # Q8_0 fits with 32,768, F16 does not
    assert budget < needs(long, AGENT_CTX, draft=False, cache=0)
    plan = plan_context(DEMO_NAME, long, machine(budget), PlacementSettings(), 0)
    assert plan.n_ctx == max(n for n in steps if needs(long, n, cache=0) <= budget)
    assert "room for Q8_0 only, not F16" in plan.why, plan


def test_a_manifest_without_shapes_keeps_the_default(manifest: dict[str, Any]) -> None:
    old = copy.deepcopy(manifest)
    for rec in old["tiers"].values():
        rec.pop("hparams")
    plan = plan_context(DEMO_NAME, old, machine(32 * GB), PlacementSettings(), CACHE)
    assert plan.n_ctx == FLOOR_CTX and "convert it again" in plan.why


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_serve_plans_the_context_unless_ctx_says(demo_cache: Any) -> None:
    inv = machine(32 * GB)
    settings, plan = serve.serve_settings(serve_args(), DEMO_NAME, inv)
    line = serve.context_line(plan)
    assert settings.n_ctx == plan.n_ctx == 8192 and line.startswith("context: 8,192 tokens per request")
    assert "trained on 8,192 tokens; --ctx sets it" in line and "more than it holds" in line
    settings, plan = serve.serve_settings(serve_args("--ctx", "32768"), DEMO_NAME, inv)
    assert settings.n_ctx == 32768
    assert serve.context_line(plan) == "context: 32,768 tokens per request, prompt and answer (--ctx)"
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert "planned from memory" in parser.format_help()
