"""Sampling over numpy logits with llama.cpp's semantics, and the speculative rejection step.

Order, as in llama.cpp's default chain: penalties -> top-k -> top-p -> min-p -> temperature. The draft and
the parent warp with the same function, so the rejection step compares like with like.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runtime.errors import UserError

SEED_MAX = 2**64 - 1  # numpy's generators take any non-negative integer; 64 bits is what llama.cpp's take


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings; temperature 0 means greedy (argmax), as in llama.cpp."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    penalty_last_n: int = 64
    # None: a fresh seed for every answer (Regenerate samples anew). A fixed one reproduces the random draws;
    # the text itself only where the drafts are the same too (docs/cli.md, "Seeds").
    seed: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.temperature >= 0 and math.isfinite(self.temperature), f"temperature {self.temperature} must be >= 0"),
            (self.top_k >= 0, f"top-k {self.top_k} must be >= 0 (0 disables it)"),
            (0 < self.top_p <= 1, f"top-p {self.top_p} must be in (0, 1]"),
            (0 <= self.min_p < 1, f"min-p {self.min_p} must be in [0, 1)"),
            (self.repeat_penalty > 0, f"repeat penalty {self.repeat_penalty} must be > 0"),
            (self.penalty_last_n >= 0, f"penalty window {self.penalty_last_n} must be >= 0"),
            (self.seed is None or 0 <= self.seed <= SEED_MAX, f"seed {self.seed} must be 0 to 2^64 - 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def apply_penalties(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """llama.cpp's repetition penalty: divide positive logits, multiply negative ones, for tokens seen in
    the last `penalty_last_n` tokens."""
    x = logits.astype(np.float64)
    if params.repeat_penalty == 1.0 or params.penalty_last_n == 0 or not history:
        return x
    seen = np.unique(np.asarray(history[-params.penalty_last_n :], dtype=np.int64))
    vals = x[seen]
    x[seen] = np.where(vals <= 0, vals * params.repeat_penalty, vals / params.repeat_penalty)
    return x


def pick(row: np.ndarray, params: SamplingParams, history: Sequence[int]) -> int:
    """Greedy choice with llama.cpp's penalties (plain argmax when there are none): the parent's in the
    verify, and a tier draft's."""
    if params.repeat_penalty == 1.0:
        return int(np.argmax(row))
    return int(np.argmax(apply_penalties(row, history, params)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def warp(logits: np.ndarray, params: SamplingParams, history: Sequence[int] = ()) -> np.ndarray:
    """The sampling distribution over the whole vocabulary (zero outside the kept candidates)."""
    x = apply_penalties(logits, history, params)
    n = x.shape[0]
    idx = np.arange(n)
    if 0 < params.top_k < n:
        idx = np.argpartition(-x, params.top_k - 1)[: params.top_k]
    if params.top_p < 1.0:
        idx = idx[np.argsort(-x[idx], kind="stable")]
        cum = np.cumsum(_softmax(x[idx]))
        keep = int(np.searchsorted(cum, params.top_p, side="left")) + 1
        idx = idx[: min(max(keep, 1), idx.size)]
    if params.min_p > 0.0:
        cand = x[idx]
        kept = idx[cand >= cand.max() + math.log(params.min_p)]
        if kept.size:
            idx = kept
    probs = np.zeros(n, dtype=np.float64)
    if params.greedy:
        probs[idx[np.argmax(x[idx])]] = 1.0
    else:
        probs[idx] = _softmax(x[idx] / params.temperature)
    return probs


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token from a (sparse) distribution."""
    idx = np.flatnonzero(probs)
    cum = np.cumsum(probs[idx])
    return int(idx[min(int(np.searchsorted(cum, rng.random() * cum[-1], side="right")), idx.size - 1)])


def accept_probability(p: np.ndarray, q: np.ndarray, token: int) -> float:
    """Probability of keeping a draft token drawn from q when the target is p: min(1, p/q)."""
    return 1.0 if q[token] <= 0 else min(1.0, float(p[token] / q[token]))


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Where to sample after a rejection: normalize(max(0, p - q)), or p itself if that is (about) empty."""
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    return p if total <= 1e-12 else r / total


def verify_sampled(p: np.ndarray, q: np.ndarray, token: int, rng: np.random.Generator) -> tuple[bool, int]:
    """The speculative rejection step: (accepted, token to emit). The output is distributed exactly as p."""
    if rng.random() < accept_probability(p, q, token):
        return True, token
    return False, sample(residual(p, q), rng)


def one_hot(n_vocab: int, token: int) -> np.ndarray:
    """The proposal distribution of a deterministic drafter (n-gram lookup): all mass on its token."""
    q = np.zeros(n_vocab)
    q[token] = 1.0
    return q


# llama.cpp's own defaults, for a model that recommends nothing.
LLAMA_DEFAULTS = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
# GGUF keys (written by the converter from generation_config.json) -> SamplingParams fields.
GGUF_SAMPLING_KEYS = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repeat_penalty",
    "general.sampling.penalty_last_n": "penalty_last_n",
}


def recommended(metadata: dict[str, str]) -> SamplingParams:
    """The model's own recommended sampling (its GGUF's general.sampling.* keys), else llama.cpp's defaults.
    A malformed value is skipped: a model file must not stop an answer over a sampling hint."""
    values: dict[str, float | int] = {}
    for key, name in GGUF_SAMPLING_KEYS.items():
        raw = metadata.get(key)
        if raw is None:
            continue
        try:
            kind = type(getattr(LLAMA_DEFAULTS, name))
            values[name] = kind(float(raw)) if kind is int else float(raw)
        except (TypeError, ValueError):
            continue
    try:
        return SamplingParams(**{**LLAMA_DEFAULTS.__dict__, **values})
    except UserError:
        return LLAMA_DEFAULTS
