"""The Engine on the demo model drafts from everything said before (runtime/decode/drafts/suffix.py): an
answer asked for again is drafted from the earlier one, token-identical to plain F16."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.decode.sampling import SamplingParams
from runtime.engine.engine import ChatOptions, Engine, EngineSettings
from runtime.models.cache import DEMO_NAME, ModelDir
from tests.conftest import copy_of_demo

QUESTION = [{"role": "user", "content": "List the planets of the solar system in order, one per line."}]


@pytest.fixture(scope="module")
def root(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_of_demo(demo_model, tmp_path_factory.mktemp("said") / "cache")


def answer(engine: Engine, messages: list[dict[str, str]], options: ChatOptions) -> tuple[list[int], int, int]:
    """The answer's tokens, and how many of them suffix lookup drafted and the parent accepted."""
    chunks = list(engine.stream_chat(messages, options))
    stats = chunks[-1].stats
    return [t for c in chunks for t in c.tokens], stats.drafted_by("suffix"), stats.accepted_by("suffix")


def test_an_answer_asked_again_is_drafted_from_the_first(root: Path) -> None:
    engine = Engine(DEMO_NAME, EngineSettings(n_ctx=2048), root=root)
    try:
        greedy = SamplingParams()
        plain, drafted, _ = answer(engine, QUESTION, ChatOptions(max_tokens=64, sampling=greedy, no_spec=True))
        assert drafted == 0 and engine.said is not None and engine.said.tokens == 0  # plain writes nothing
        lookup = ChatOptions(max_tokens=64, sampling=greedy, draft="ngram")
        first, _, _ = answer(engine, QUESTION, lookup)
        assert engine.said.tokens > len(first)  # the prompt and the answer are in the pool
        # The same question again (a regenerate, or a new chat): the earlier answer is in no prompt now,
        # only in the pool, and the parent verifies every drafted token.
        again, drafted, accepted = answer(engine, QUESTION, lookup)
        assert first == plain and again == plain
        assert accepted > 0 and drafted >= accepted
        engine.reset_caches()  # a benchmark's next run: it must not draft the answer it repeats
        assert engine.said.tokens == 0
        repeat, drafted_again, _ = answer(engine, QUESTION, lookup)
        # The answer in progress is in the pool too (a numbered list repeats its own "\n3." patterns), so a
        # few drafts may come from it; the earlier answer, whose whole lines were drafted above, is gone.
        assert repeat == plain and drafted_again < accepted / 2
    finally:
        engine.close()


def test_a_zero_budget_turns_it_off(root: Path) -> None:
    engine = Engine(DEMO_NAME, EngineSettings(n_ctx=2048, said_tokens=0), root=root)
    try:
        assert engine.said is None
        _, drafted, _ = answer(engine, QUESTION, ChatOptions(max_tokens=4, sampling=SamplingParams(), draft="ngram"))
        assert drafted == 0
    finally:
        engine.close()
