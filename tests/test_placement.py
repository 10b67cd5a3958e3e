"""Placement as a pure function of fake inventories: no GPU, large VRAM, small VRAM, too little RAM."""

from __future__ import annotations

import pytest

from runtime.errors import UserError
from runtime.machine.hardware import Gpu, Inventory
from runtime.plan.placement import PlacementSettings, plan, tier_size

GB = 10**9
QWEN = {"n_layer": 28, "n_embd": 1536, "n_head": 12, "n_head_kv": 2, "head_dim": 128, "n_vocab": 151936}
F16 = tier_size("f16", int(3.56 * GB), QWEN, n_ctx=4096)
Q4 = tier_size("q4_k_m", int(1.12 * GB), QWEN, n_ctx=4096)


def machine(ram_gb: float, vram_gb: float | None = None) -> Inventory:
    gpus = () if vram_gb is None else (Gpu("Test GPU", "gpu", int(vram_gb * GB), int(vram_gb * GB)),)
    return Inventory("test cpu", 4, int(ram_gb * GB), int(ram_gb * GB), gpus)


def test_no_gpu_is_cpu_only() -> None:
    p = plan(machine(16), F16, Q4)
    assert p.mode == "cpu" and p.candidate == "cpu-only"
    assert p.parent.n_gpu_layers == 0 and p.draft.n_gpu_layers == 0
    assert p.parent.op_offload is False
    assert "no GPU" in p.reason


def test_large_vram_puts_everything_on_the_gpu() -> None:
    p = plan(machine(16, vram_gb=24), F16, Q4)
    assert p.candidate == "all-gpu" and p.mode == "gpu"
    assert p.parent.n_gpu_layers == 29 and p.draft.n_gpu_layers == 29


def test_small_vram_puts_the_draft_on_the_gpu_with_some_parent_layers() -> None:
    p = plan(machine(16, vram_gb=3.5), F16, Q4)
    assert p.candidate == "draft-on-gpu" and p.mode == "hybrid"
    assert p.draft.n_gpu_layers == 29
    # 3.5 GB - 0.5 GB margin - the draft (~1.25 GB with KV and compute) leaves room for some f16 layers.
    assert 5 <= p.parent.n_gpu_layers <= 15
    assert p.predicted_token_s < plan(machine(16), F16, Q4).predicted_token_s


def test_placement_can_be_pinned_to_cpu() -> None:
    p = plan(machine(16, vram_gb=24), F16, Q4, PlacementSettings(mode="cpu"))
    assert p.mode == "cpu" and "pinned" in p.reason


def test_gpu_pin_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="no GPU"):
        plan(machine(16), F16, Q4, PlacementSettings(mode="gpu"))


def test_short_ram_drops_the_draft_first() -> None:
    p = plan(machine(4.6), F16, Q4)
    assert p.draft is None and "dropped" in p.reason


def test_ram_too_small_for_f16_names_the_gigabytes() -> None:
    with pytest.raises(UserError, match=r"needs \d+\.\d GB, 2\.0 GB available"):
        plan(machine(2.0), F16, Q4)
