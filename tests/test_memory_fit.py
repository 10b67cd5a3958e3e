"""Precision follows memory: the planner on model shapes from 1.5B to 14B and machines from 8 to 64 GB, and
the demo model end to end under a memory budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.engine.engine import Engine, EngineSettings
from runtime.errors import UserError
from runtime.machine.hardware import Inventory
from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan.placement import PRECISION_ORDER, PlacementSettings, _ram_need, plan_precision, tier_size, will_fit
from tests.conftest import assert_one_line_error, run_cli

GB = 10**9
# (tier bytes f16, q8_0, q4_k_m), layers, KV heads: the Qwen2.5 instruct family's shapes.
SHAPES = {
    "1.5B": ((3.56, 1.89, 1.12), 28, 2),
    "3B": ((6.17, 3.29, 1.93), 36, 2),
    "7B": ((15.2, 8.1, 4.7), 28, 4),
    "14B": ((29.5, 15.7, 9.0), 48, 8),
}
RAM_GB = (8, 16, 32, 64)


def tiers(shape: str) -> dict:
    sizes, n_layer, n_kv = SHAPES[shape]
    hp = {"n_layer": n_layer, "n_head_kv": n_kv, "head_dim": 128, "n_embd": 3584, "n_vocab": 152064}
    return {t: tier_size(t, int(b * GB), hp, n_ctx=4096) for t, b in zip(PRECISION_ORDER, sizes, strict=True)}


def laptop(ram_gb: float) -> Inventory:
    return Inventory("test cpu", 4, int(ram_gb * GB), int(0.75 * ram_gb * GB))  # 75% available


def default(shape: str, ram_gb: float):
    return plan_precision(laptop(ram_gb), tiers(shape), "f16", "q4_k_m")


@pytest.mark.parametrize("shape", SHAPES)
def test_the_default_answers_whenever_q4_k_m_fits_and_precision_never_falls_with_memory(shape: str) -> None:
    rank = -1
    for ram in RAM_GB:
        q4_fits = (
            _ram_need(tiers(shape)["q4_k_m"], 0) <= laptop(ram).ram_available_bytes - PlacementSettings().margin_bytes
        )
        if not q4_fits:
            with pytest.raises(UserError, match="no tier of this model fits"):
                default(shape, ram)
            continue
        p = default(shape, ram)
        now = len(PRECISION_ORDER) - PRECISION_ORDER.index(p.parent.tier)
        assert now >= rank, (shape, ram, p.parent.tier)
        rank = now
        if p.parent.tier != "f16":
            assert p.precision_note.startswith(f"{p.parent.tier.upper()} precision: F16 needs")


def test_the_7b_model_on_laptops() -> None:
    """The paper's model: it errored on a 16 GB laptop by default; now it answers at the best precision."""
    got = {ram: default("7B", ram) for ram in (8, 16, 32)}
    assert (got[8].parent.tier, got[8].draft) == ("q4_k_m", None)
    assert (got[16].parent.tier, got[16].draft) == ("q8_0", None)  # no room for a q4_k_m draft beside it
    assert (got[32].parent.tier, got[32].draft.tier) == ("f16", "q4_k_m")
    assert "Q8_0 precision: F16 needs" in got[16].reason and "12.0 GB available" in got[16].reason


def test_the_draft_is_dropped_before_the_precision() -> None:
    t = tiers("7B")
    alone = _ram_need(t["f16"], 0)
    ram = (alone + 0.5 * _ram_need(t["q4_k_m"], 0) + PlacementSettings().margin_bytes) / GB  # f16 fits, the pair not
    p = plan_precision(Inventory("cpu", 4, int(ram * GB), int(ram * GB)), t, "f16", "q4_k_m")
    assert p.parent.tier == "f16" and p.draft is None and "draft was dropped" in p.reason


def test_a_pinned_parent_that_does_not_fit_names_one_that_does() -> None:
    with pytest.raises(UserError) as err:
        plan_precision(laptop(16), tiers("7B"), "f16", "q4_k_m", pinned=True)
    assert "not enough memory for the f16 tier" in str(err.value) and "--parent q8_0 fits" in str(err.value)
    with pytest.raises(UserError) as err:
        plan_precision(laptop(8), tiers("14B"), "q8_0", None, pinned=True)
    assert "no tier of this model fits" in str(err.value) and "GB more than is available" in str(err.value)


def test_a_budget_caps_planning_without_a_margin_off_it() -> None:
    t = tiers("1.5B")
    need = _ram_need(t["q4_k_m"], 0)
    p = plan_precision(laptop(64), t, "f16", "q4_k_m", PlacementSettings(max_memory_bytes=int(need) + 1))
    assert p.parent.tier == "q4_k_m" and "(your budget)" in p.reason


# --- the demo model end to end ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def needs(demo_model: ModelDir) -> dict[str, float]:
    """GB the demo's configurations need, from the engine's own tier facts."""
    engine = Engine(DEMO_NAME, EngineSettings(), root=demo_model.root)
    facts = {t: engine.tier_size(t) for t in PRECISION_ORDER}
    engine.close()
    return {
        "f16": _ram_need(facts["f16"], 0) / GB,
        "pair": (_ram_need(facts["f16"], 0) + _ram_need(facts["q4_k_m"], 0)) / GB,
        "q4_k_m": _ram_need(facts["q4_k_m"], 0) / GB,
    }


def chat(budget_gb: float, *extra: str):
    """The demo under a memory budget, with the exact preset (F16 ← Q4_K_M: the most memory of any preset)."""
    return run_cli(
        "chat",
        "--preset",
        "exact",
        "--prompt",
        "Name three primary colors.",
        "--json",
        "--max-tokens",
        "8",
        "--max-memory",
        f"{budget_gb:.4f}",
        *extra,
    )


@pytest.mark.slow
def test_a_budget_for_f16_alone_answers_with_f16_and_no_draft(demo_cache: Path, needs) -> None:
    result = chat((needs["f16"] + needs["pair"]) / 2)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["parent"], out["draft"]) == ("f16", None) and "draft was dropped" in out["placement"]["reason"]
    assert out["stats"]["tokens"] > 0


@pytest.mark.slow
def test_a_budget_for_q4_k_m_only_answers_with_q4_k_m_and_says_so(demo_cache: Path, needs) -> None:
    result = chat(needs["q4_k_m"] * 1.01)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["parent"], out["draft"]) == ("q4_k_m", None)
    assert "Q4_K_M precision: F16 needs" in out["why"] and out["placement"]["precision_note"]
    text = run_cli(
        "chat", "--preset", "exact", "--prompt", "Hi", "--max-tokens", "4", "--max-memory",
        f"{needs['q4_k_m'] * 1.01:.4f}",
    ).stderr
    assert "Q4_K_M precision: F16 needs" in text  # the stats line says it too


@pytest.mark.slow
def test_a_budget_too_small_for_any_tier_is_one_line(demo_cache: Path, needs) -> None:
    assert_one_line_error(chat(needs["q4_k_m"] / 2), "no tier of this model fits")
    assert_one_line_error(chat(-1), "--max-memory")
    assert_one_line_error(chat(needs["q4_k_m"] * 1.01, "--parent", "f16"), "--parent q4_k_m fits")


def test_the_pre_check_of_a_conversion_names_what_will_answer() -> None:
    """convert's pre-check (sizes and shapes before any tier is written) agrees with the planner."""
    sizes = {t: f.file_bytes for t, f in tiers("7B").items()}
    hp = {"n_layer": 28, "n_head_kv": 4, "head_dim": 128, "n_embd": 3584, "n_vocab": 152064}
    said = {ram: will_fit(laptop(ram), sizes, hp) for ram in (4, 8, 16, 32)}
    need = (_ram_need(tiers("7B")["q4_k_m"], 0) + PlacementSettings().margin_bytes) / GB
    assert said[4] == (
        False,
        f"no tier of this model will fit in this machine's memory: even Q4_K_M needs {need:.1f} GB, 3.0 GB available",
    )
    assert said[8][0] and said[8][1].startswith("this machine will answer with Q4_K_M,")
    assert said[16][0] and "answer with Q8_0," in said[16][1] and "F16 needs" in said[16][1]
    f16_pair = default("7B", 32)
    assert said[32] == (True, f"this machine will answer with F16 ← Q4_K_M, {f16_pair.ram_bytes / GB:.1f} GB of RAM")


@pytest.mark.slow
def test_convert_says_before_the_work_which_tier_will_answer(micro_gguf: Path, isolated_cache: Path) -> None:
    """A budget too small for any tier: a warning before the first tier is written, and the model still
    converts (it may be meant for another machine); a budget that holds it: the pair that will answer."""
    small = run_cli("convert", str(micro_gguf), "--name", "small", "--max-memory", "0.001")
    assert small.returncode == 0, small.stderr
    warning = "warning: no tier of this model will fit in this machine's memory"
    assert warning in small.stderr
    assert small.stderr.index(warning) < small.stderr.index("f16: writing")
    roomy = run_cli("convert", str(micro_gguf), "--name", "roomy", "--max-memory", "8")
    assert roomy.returncode == 0, roomy.stderr
    assert "this machine will answer with F16 ← Q4_K_M" in roomy.stderr
