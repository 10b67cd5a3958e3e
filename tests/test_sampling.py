"""Sampling warps against llama.cpp's own sampler chain, and the rejection step, analytically."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from runtime.decode.sampling import SamplingParams, accept_probability, residual, sample, verify_sampled, warp
from runtime.errors import UserError


def output_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exact distribution of verify_sampled's output when the draft token is drawn from q."""
    out = np.zeros_like(p)
    r = residual(p, q)
    for t in np.flatnonzero(q):
        a = accept_probability(p, q, int(t))
        out[t] += q[t] * a
        out += q[t] * (1 - a) * r
    return out


@pytest.mark.parametrize("seed", range(6))
def test_rejection_step_reproduces_the_target_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 12
    p = rng.dirichlet(np.ones(n) * 0.5)
    q = rng.dirichlet(np.ones(n) * 0.5)
    if seed % 3 == 1:
        p[:4] = 0  # the draft proposes tokens the target never would
        p /= p.sum()
    if seed % 3 == 2:
        q[5:] = 0  # the draft's support misses part of the target's
        q /= q.sum()
    np.testing.assert_allclose(output_distribution(p, q), p, atol=1e-12)


def test_identical_distributions_always_accept() -> None:
    p = np.array([0.5, 0.3, 0.2])
    assert output_distribution(p, p.copy()) == pytest.approx(p)
    assert all(accept_probability(p, p, t) == 1.0 for t in range(3))
    assert residual(p, p) is p  # empty residual: fall back to p


def test_verify_sampled_empirically() -> None:
    rng = np.random.default_rng(0)
    p = np.array([0.1, 0.6, 0.3, 0.0])
    q = np.array([0.4, 0.1, 0.1, 0.4])
    counts = np.zeros(4)
    for _ in range(20000):
        counts[verify_sampled(p, q, sample(q, rng), rng)[1]] += 1
    np.testing.assert_allclose(counts / counts.sum(), p, atol=0.015)


def llama_cpp_chain(logits: np.ndarray, params: SamplingParams, history: list[int]) -> dict[int, float]:
    """Candidates and probabilities after llama.cpp's own penalties -> top-k -> top-p -> min-p -> temp."""
    import llama_cpp

    n = logits.size
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(
        chain, llama_cpp.llama_sampler_init_penalties(n, params.penalty_last_n, params.repeat_penalty, 0.0, 0.0)
    )
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
    for tok in history:
        llama_cpp.llama_sampler_accept(chain, tok)
    data = (llama_cpp.llama_token_data * n)()
    for i, x in enumerate(logits):
        data[i].id, data[i].logit, data[i].p = i, float(x), 0.0
    arr = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
    kept = {data[i].id: data[i].logit for i in range(arr.size)}
    llama_cpp.llama_sampler_free(chain)
    z = np.array(list(kept.values()), dtype=np.float64)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    return dict(zip(kept, probs, strict=True))


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, top_k=40, top_p=0.95, min_p=0.05),
        SamplingParams(temperature=0.7, top_k=16, top_p=0.9, min_p=0.0, repeat_penalty=1.3),
        SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.1),
        SamplingParams(temperature=0.8, top_k=100, top_p=0.5, min_p=0.02, repeat_penalty=1.1, penalty_last_n=8),
    ],
)
def test_warp_matches_llama_cpp_sampler_chain(params: SamplingParams) -> None:
    rng = np.random.default_rng(42)
    logits = (rng.standard_normal(2000) * 3).astype(np.float32)
    history = [int(t) for t in np.argsort(-logits)[:12:2]] + [5, 7, 5]
    ours = warp(logits, params, history)
    theirs = llama_cpp_chain(logits, params, history)
    assert set(np.flatnonzero(ours).tolist()) == set(theirs)
    for tok, prob in theirs.items():
        assert ours[tok] == pytest.approx(prob, rel=1e-4, abs=1e-7)


def test_greedy_warp_is_argmax_after_penalties() -> None:
    logits = np.array([1.0, 3.0, 2.9, -1.0], dtype=np.float32)
    assert np.flatnonzero(warp(logits, SamplingParams())).tolist() == [1]
    penalised = warp(logits, SamplingParams(repeat_penalty=1.5), history=[1])
    assert np.flatnonzero(penalised).tolist() == [2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top-p"),
        ({"min_p": 1.0}, "min-p"),
        ({"top_k": -2}, "top-k"),
        ({"repeat_penalty": 0}, "penalty"),
    ],
)
def test_bad_sampling_values_are_user_errors(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(UserError, match=message):
        SamplingParams(**kwargs)
