"""A verify batch's rows equal one-token decoding bit for bit (runtime/decode/llama_backend.py `exact_rows`):
ggml's CPU backend switches to other kernels from a batch size on (repacked GEMM from 4 rows, the tiled
K-quant matmul from 8), and a verify stays below it, so a quantized parent's speculative answer is its own
plain greedy answer, not one a near-tie away."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from runtime.decode.llama_backend import REPACKED_GEMM_ROWS, TILED_ROWS, exact_rows
from runtime.models.cache import ModelDir
from tests.test_speculative import load

X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_the_bound_follows_what_the_load_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    q4 = ["type:f32", "type:q4_K", "type:q6_K", "buffer:CPU_Mapped"]
    assert exact_rows([*q4, "buffer:CPU_REPACK"], 0) == REPACKED_GEMM_ROWS - 1
    assert exact_rows(["type:f16", "buffer:AMX"], 0) == REPACKED_GEMM_ROWS - 1
    assert exact_rows(q4, 0) == (TILED_ROWS - 1 if X86 else None)
    assert exact_rows(["type:f32", "type:f16", "buffer:CPU_Mapped"], 0) is None
    assert exact_rows(["type:q8_0", "buffer:CPU_Mapped"], 0) is None
    assert exact_rows([*q4, "buffer:CPU_REPACK"], 99) is None  # a GPU's thresholds are its own
    monkeypatch.setenv("GGML_CPU_TILED_MM", "0")
    assert exact_rows(q4, 0) is None


@pytest.mark.skipif(not X86, reason="the tiled and repacked K-quant kernels are x86 paths")
def test_rows_within_the_bound_equal_one_token_decoding(demo_model: ModelDir) -> None:
    backend = load(demo_model, "q4_k_m")
    try:
        assert backend.exact_rows is not None  # the demo's Q4_K_M holds K-quant (and, here, repacked) weights
        prompt = backend.tokenize("Name three colours of the rainbow and say why the sky is blue.", add_bos=True)
        backend.decode(prompt, [len(prompt) - 1])
        follow = backend.tokenize(" Red, orange and yellow are three of them; the sky scatters blue light most.")
        single = np.stack([backend.decode([t], [0])[0] for t in follow])
        n = backend.exact_rows
        for start in range(0, len(follow), n):
            backend.truncate(len(prompt) + start)
            chunk = follow[start : start + n]
            rows = backend.decode(chunk, range(len(chunk)))
            assert np.array_equal(rows, single[start : start + len(chunk)]), f"batch at {start} of {len(chunk)} rows"
    finally:
        backend.close()


@pytest.mark.skipif(not X86, reason="the tiled and repacked K-quant kernels are x86 paths")
def test_costs_are_measured_only_for_batches_a_verify_may_use(demo_model: ModelDir) -> None:
    from runtime.decode.machine_costs import MachineCosts, measure_costs

    backend = load(demo_model, "q4_k_m")
    try:
        costs = measure_costs(backend, {}, "q4_k_m", budget_s=0.5)
    finally:
        backend.close()
    assert max(costs.v) == backend.exact_rows and sorted(costs.v) == list(range(1, backend.exact_rows + 1))
    assert MachineCosts.from_dict(costs.as_dict()).v == pytest.approx(costs.v, abs=1e-3)  # read back from costs.json
    assert all(entry["k"] < backend.exact_rows for entry in costs.caps().values())


@pytest.mark.skipif(not X86, reason="the tiled and repacked K-quant kernels are x86 paths")
def test_the_bench_times_a_bounded_parent_only_within_its_bound(demo_model: ModelDir) -> None:
    """The bench's cap column reads v(n) from its own batch costs: beyond the bound it would promise batches
    the loop never verifies."""
    from commands.bench.runners import batch_costs

    bounded, f16 = load(demo_model, "q4_k_m"), load(demo_model, "f16")
    try:
        costs = batch_costs({"q4_k_m": bounded, "f16": f16}, 6, rounds=1)
    finally:
        bounded.close()
        f16.close()
    assert sorted(costs["q4_k_m"]) == list(range(1, bounded.exact_rows + 1))
    assert sorted(costs["f16"]) == list(range(1, 7))  # F16 has no bound: llamafile's sgemm keeps its rows
