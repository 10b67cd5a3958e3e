"""Suffix lookup over everything said before (runtime/decode/suffix_index.py, drafts/suffix.py): the
continuations it proposes, its bounds, eviction, cuts, and the loop on a micro model staying exact."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.decode.draft_source import Context
from runtime.decode.drafts import SpecConfig
from runtime.decode.drafts.suffix import SuffixDraft, suffix_key
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.decode.sampling import SamplingParams
from runtime.decode.speculative import Decoding, generate_steps
from runtime.decode.suffix_index import GROWTH, KEY, MAX_MATCH, MIN_CONFIDENCE, SuffixIndex
from runtime.models.cache import ModelDir


def pool(*docs: list[int], budget: int = 10_000, party: str = "") -> SuffixIndex:
    """An index holding `docs` as separate earlier answers (each in a chat of its own)."""
    ix = SuffixIndex(budget)
    for i, doc in enumerate(docs):
        ix.open([10_000 + i, *doc], party)  # a distinct first token: never one chat continued
    return ix


def test_longest_suffix_and_its_continuation() -> None:
    ix = pool([1, 2, 3, 4, 5, 6, 7, 8], [9, 2, 3, 4, 50, 51, 52, 53])
    # "1 2 3 4" matches the first document for 4 tokens, the second only for 3: the longer match wins.
    m = ix.match([0, 1, 2, 3, 4], 12)
    assert m.tokens == [5, 6, 7, 8] and m.length == 4 and m.confidence == 1.0
    # "9 2 3 4" is the second's; a bare "2 3 4" ties both, and the most recent occurrence breaks the tie.
    assert ix.match([9, 2, 3, 4], 12).tokens[:2] == [50, 51]
    assert ix.match([77, 2, 3, 4], 12).tokens[:2] == [50, 51]
    assert ix.match([2, 3], 12).tokens == []  # shorter than KEY: nothing
    assert ix.match([0, 1, 2, 3, 4], 0).tokens == []


def test_the_most_frequent_path_with_its_share() -> None:
    # After "1 2 3": "7 8" twice, "5 6" once (the newest): the majority wins, its share is the confidence.
    ix = pool([1, 2, 3, 7, 8, 40], [1, 2, 3, 7, 8, 41], [1, 2, 3, 5, 6, 42])
    m = ix.match([1, 2, 3], 12)
    assert m.tokens[:2] == [7, 8] and m.confidence == pytest.approx(1 / 3)  # the two split at the third token
    assert len(m.tokens) == 3  # 40 or 41 each hold 1/3 of the occurrences: still >= MIN_CONFIDENCE
    # Four ways after "1 2 3": no continuation holds MIN_CONFIDENCE of them, so nothing is proposed.
    split = pool(*([1, 2, 3, 60 + i] for i in range(4)))
    assert MIN_CONFIDENCE > 1 / 4 and split.match([1, 2, 3], 12).tokens == []


def test_the_proposal_grows_with_the_match() -> None:
    long = list(range(100, 200))
    ix = pool(long)
    assert len(ix.match(long[:KEY], 64).tokens) == int(GROWTH * KEY)
    assert len(ix.match(long[:20], 64).tokens) == int(GROWTH * 20)
    m = ix.match(long[:60], 100)
    assert m.length == MAX_MATCH and m.tokens == long[60:100]  # the match is capped, the proposal runs on


def test_parties_never_see_each_other() -> None:
    ix = SuffixIndex()
    ix.open([1, 2, 3, 4, 5, 6], "api:alice")
    assert ix.match([1, 2, 3], 8, "api:alice").tokens == [4, 5, 6]
    assert ix.match([1, 2, 3], 8, "api:bob").tokens == []
    assert ix.match([1, 2, 3], 8).tokens == []


def test_a_conversation_continues_its_document() -> None:
    ix = SuffixIndex()
    turn1 = list(range(1, 40))
    doc = ix.open(turn1)
    turn2 = [*turn1, *range(500, 530)]  # the next turn's prompt: the first turn, its answer, a new question
    assert ix.open(turn2) == doc and ix.tokens == len(turn2)  # stored once, not twice
    # A regenerate (the same prompt without the answer) or another chat starts a new document, sharing only
    # a little of the old one's prefix: the first answer stays there to be drafted from.
    other = ix.open([*turn1[:20], 900, 901, 902])
    assert other != doc and ix.match([36, 37, 38], 4).tokens == [39, 500, 501, 502]


def test_budget_evicts_the_oldest_first() -> None:
    ix = SuffixIndex(budget=100)
    first = list(range(1000, 1040))
    ix.open(first)
    for start in (2000, 3000, 4000):
        ix.open(list(range(start, start + 40)))
        assert ix.tokens <= 100
    assert ix.match(first[:5], 4).tokens == []  # the oldest went first
    assert ix.match([4000, 4001, 4002], 4).tokens == [4003, 4004, 4005, 4006]
    assert ix.match([3000, 3001, 3002], 4).tokens == [3003, 3004, 3005, 3006]
    # One answer longer than the budget stays whole while it is written (it is bounded by the context).
    big = list(range(5000, 5300))
    ix.open(big)
    assert ix.tokens == 300 and ix.match([5100, 5101, 5102], 4).tokens == [5103, 5104, 5105, 5106]
    with pytest.raises(ValueError, match="budget"):
        SuffixIndex(-1)


def test_a_cut_document_forgets_what_was_cut() -> None:
    ix = SuffixIndex()
    seq = [1, 2, 3, 4, 5, 6, 7, 8]
    doc = ix.open(seq)
    ix.follow(doc, [1, 2, 3, 4, 20, 21, 22])  # rewritten from the fifth token on
    assert ix.tokens == 7
    assert ix.match([2, 3, 4], 8).tokens == [20, 21, 22]
    assert ix.match([5, 6, 7], 8).tokens == []  # "5 6 7 8" was cut: its stale entries propose nothing
    for i in range(3000):  # many cuts: stale entries are dropped once they outnumber the live ones
        ix.follow(doc, [1, 2, 3, 4, 30 + i % 7, 31 + i % 5, 32])
    assert ix._entries <= 2 * ix.tokens + 4096


def test_the_source_writes_the_answer_and_offers_by_match_length() -> None:
    ix = SuffixIndex()
    ix.open([7, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    src = SuffixDraft(ix)
    src.begin([5, 1, 2, 3], Context(None, SamplingParams(), np.random.default_rng(0)))  # type: ignore[arg-type]
    offer = src.offer([5, 1, 2, 3], room=5)
    assert offer.max_k == 4 and offer.key == suffix_key(3) == "suffix:3"  # the batch must fit: room - 1
    assert src.propose([5, 1, 2, 3], 2).tokens == [4, 5]
    src.rollback(5)
    src.offer([5, 1, 2, 3, 4, 5], room=64)  # the answer so far is written into the pool as it grows
    assert ix.tokens == 10 + 6
    assert suffix_key(7) == "suffix:4" and suffix_key(40) == "suffix:16"


def test_greedy_stays_exact_on_a_micro_model(micro_model: ModelDir) -> None:
    """The same answer twice: the second drafts from the first (suffix lookup alone) and is token-identical
    to plain decoding."""
    parent = LlamaBackend(micro_model.tier_path("f16"), LoadOptions(n_ctx=512))
    prompt = parent.tokenize("<|im_start|>user\nCount to twenty.<|im_end|>\n<|im_start|>assistant\n")
    spec = SpecConfig(ngram=False, forced=False)
    said = SuffixIndex()

    def answer(decoding: Decoding) -> tuple[list[int], int]:
        out, accepted = [], 0
        for step in generate_steps(parent, prompt, decoding):
            out.extend(step.tokens)
            accepted += step.accepted if step.kind == "suffix" else 0
            if len(out) >= 32:
                return out[:32], accepted
        return out, accepted

    plain, _ = answer(Decoding())
    first, _ = answer(Decoding.drafting(spec, said=said))
    again, accepted = answer(Decoding.drafting(spec, said=said))
    assert first == plain and again == plain
    assert accepted > 0
