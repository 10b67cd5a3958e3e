"""A smaller model of the same family as a draft source (llama.cpp's `-md`, LM Studio's draft model): another
converted model whose vocabulary is the parent's token for token (runtime/decode/vocab.py checks it when it is
chosen), drafting with its cheapest tier. It drafts as a tier does (catch up, then k greedy or sampled steps);
the controller prices it by its own measured cost c and agreement, as it prices a tier."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from runtime.decode.draft_source import DRAFT_K_MAX, Context, DraftSource, Kind, Offer, Proposal, Setup
from runtime.decode.drafts.tier import TierDraft

if TYPE_CHECKING:
    from runtime.decode.llama_backend import LlamaBackend

# Another model agrees with the parent less than the parent's own quantized tier does (the 0.5B Qwen coder
# with its 1.5B: 0.84 measured, code 0.9, prose 0.7); the probe's measured agreement replaces this prior.
KIND = Kind(
    "model", "a smaller model of the same family", k_max=DRAFT_K_MAX, prior=0.7, decodes=True, word="the draft model"
)
PREFIX = "model:"  # a draft model's source name is "model:<its name in the cache>"


def build(setup: Setup) -> DraftSource | None:
    """The answer's draft model (`--draft-model`), where the placement kept one."""
    if setup.sibling is None:
        return None
    spec, (name, backend) = setup.spec, setup.sibling
    return ModelDraft(backend, name, spec.k_max, spec.p_min, spec.draft_window)


def source_name(model: str) -> str:
    """The name the controller, the costs and the answer's steps know a draft model by."""
    return f"{PREFIX}{model}"


class ModelDraft(TierDraft):
    """A draft model and its KV cache. The parent's vocabulary may extend the draft's by unused padding
    tokens (runtime/decode/vocab.py): a sequence holding one cannot be fed to the draft, so from there on
    this answer it offers nothing."""

    kind = KIND

    def __init__(
        self, model: LlamaBackend, name: str, k_max: int = KIND.k_max, p_min: float = 0.0, window: int = 0
    ) -> None:
        super().__init__(model, name, k_max, p_min, window)
        self.checked = 0  # seq[:checked] holds only tokens the draft knows
        self.foreign = False

    def begin(self, seq: Sequence[int], context: Context) -> None:
        self.checked, self.foreign = 0, False
        self._check(seq)
        if not self.foreign:
            super().begin(seq, context)
        else:
            self.context = context

    def _check(self, seq: Sequence[int]) -> None:
        n_vocab = self.model.n_vocab
        if not self.foreign and any(t >= n_vocab for t in seq[self.checked :]):
            self.foreign = True
        self.checked = len(seq)

    def offer(self, seq: Sequence[int], room: int) -> Offer:
        self._check(seq)
        if self.foreign:
            return Offer(self.name, KIND.name, 0)
        return super().offer(seq, room)

    def propose(self, seq: list[int], k: int) -> Proposal:
        got = super().propose(seq, k)
        assert self.context is not None
        n_parent = self.context.parent.n_vocab
        if not got.qs or got.qs[0].shape[0] == n_parent:
            return got
        # Sampled mode: q over the parent's vocabulary (the padding the draft lacks has probability 0).
        qs = [np.pad(q, (0, n_parent - q.shape[0])) for q in got.qs]
        return Proposal(got.tokens, qs, got.caught_up, got.catch_up_s)
