"""The draft sources and their registration: the kinds the controller and the answer's counters know, and
the sources an answer's settings (`SpecConfig`) switch on. A new source is one module here (a `KIND` and a
`DraftSource`), a line in `KINDS` and one in `build`, and its switch in `SpecConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.decode.draft_source import DraftSource, Kind
from runtime.decode.drafts import forced, model, ngram, suffix, tier

if TYPE_CHECKING:
    from runtime.decode.llama_backend import LlamaBackend
    from runtime.decode.suffix_index import SuffixIndex

# Every kind, in the order the loop asks its sources each cycle: certain tokens first, then the offers (on
# a tie the controller keeps the earlier offer).
KINDS: dict[str, Kind] = {k.name: k for k in (forced.KIND, ngram.KIND, suffix.KIND, tier.KIND, model.KIND)}
# The kinds whose proposals are verified: offered to the controller, with counters in the answer's Stats.
OFFERED: tuple[Kind, ...] = tuple(k for k in KINDS.values() if k.verified)


@dataclass(frozen=True)
class SpecConfig:
    """How the loop drafts. k None: the controller picks k (and the source) every cycle from the cost model."""

    k: int | None = None  # a fixed draft length, always used when a source can propose
    ngram: bool = True  # prompt lookup as a draft source (costs nothing, needs no memory)
    suffix: bool = True  # lookup in everything said before (the model's pool of earlier prompts and answers)
    p_min: float = 0.0  # greedy drafting stops when the draft's top probability falls below this
    k_max: int = tier.KIND.k_max  # the longest tier draft the controller considers (and the benchmark times)
    # A draft that has fallen further behind than this catches up on the last `draft_window` tokens only
    # (its own positions start at 0): a cheaper catch-up for a long prompt, at some cost in acceptance.
    # 0: always the whole context.
    draft_window: int = 0
    # Under a grammar, tokens it forces join the batch unverified (False: one token per step, as plain
    # constrained decoding runs; the benchmark's baseline).
    forced: bool = True


def build(
    spec: SpecConfig,
    draft: LlamaBackend | None = None,
    draft_name: str = "draft",
    said: SuffixIndex | None = None,
    party: str = "",
    sibling: tuple[str, LlamaBackend] | None = None,
) -> tuple[DraftSource, ...]:
    """One answer's sources (fresh state), in `KINDS` order: what `spec` switches on, `draft` as the tier
    draft under the name the controller keeps its estimates by, `said` (the model's pool of earlier
    sequences, read and written for `party`) for suffix lookup, and `sibling` (its source name and backend)
    as the draft model."""
    sources: list[DraftSource] = []
    if spec.forced:
        sources.append(forced.ForcedTokens())
    if spec.ngram:
        sources.append(ngram.NgramDraft())
    if spec.suffix and said is not None:
        sources.append(suffix.SuffixDraft(said, party))
    if draft is not None:
        sources.append(tier.TierDraft(draft, draft_name, spec.k_max, spec.p_min, spec.draft_window))
    if sibling is not None:
        sources.append(model.ModelDraft(sibling[1], sibling[0], spec.k_max, spec.p_min, spec.draft_window))
    return tuple(sources)
