"""A draft source is one module plus one registry line (runtime/decode/drafts): a throwaway source registered
here, and nowhere else, is offered to the controller, counted in the answer's stats, named in its summary,
recorded and summed by the benchmark, and read back from a configuration name, with no other file naming it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from commands.bench.configs import parse_config
from commands.bench.run import summarize
from commands.bench.runners import run_engine
from runtime.decode import drafts
from runtime.decode.controller import Controller, CycleOutcome, Estimates, Offer, Timing
from runtime.decode.draft_source import Context, DraftSource, Kind, Proposal, Setup
from runtime.decode.drafts.tier import KIND as TIER
from runtime.engine.answer import Stats
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.summary import answer_facts, sources_text
from runtime.models.cache import DEMO_NAME, ModelDir
from tests.conftest import copy_of_demo

PROMPT = "List the planets of the solar system in order, one per line."
TOKENS = 32
STEP = 0.1  # a parent step of 100 ms, for the controller's made-up costs
# What the throwaway source proposes: the parent's own plain greedy answer (set by the test), so the parent
# accepts its proposals and the controller, once it has seen that, keeps choosing it.
ORACLE = Kind("oracle", "the oracle", k_max=6, prior=0.95, word="the oracle")
ANSWER: list[int] = []


class OracleDraft(DraftSource):
    kind = ORACLE
    name = ORACLE.name

    def begin(self, seq: Sequence[int], context: Context) -> None:
        self.start = len(seq)

    def offer(self, seq: Sequence[int], room: int) -> Offer:
        left = ANSWER[len(seq) - self.start :]
        return Offer(self.name, ORACLE.name, min(len(left), ORACLE.k_max, room - 1))

    def propose(self, seq: list[int], k: int) -> Proposal:
        return Proposal(ANSWER[len(seq) - self.start :][:k])


def build(setup: Setup) -> DraftSource | None:
    return OracleDraft() if setup.spec.lookups and ANSWER else None


@pytest.fixture
def oracle() -> Iterator[Kind]:
    drafts.register(ORACLE, build)  # the one registry line
    try:
        yield ORACLE
    finally:
        drafts.unregister(ORACLE.name)
        ANSWER.clear()


@pytest.fixture(scope="module")
def root(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_of_demo(demo_model, tmp_path_factory.mktemp("registry") / "cache")


def test_a_kind_is_registered_once_and_forgotten_after(oracle: Kind) -> None:
    assert drafts.KINDS[oracle.name] is oracle and oracle in drafts.offered() and oracle in drafts.lookups()
    with pytest.raises(ValueError, match="already registered"):
        drafts.register(oracle, build)
    ANSWER.append(1)
    assert any(s.kind is oracle for s in drafts.build_sources(drafts.SpecConfig()))
    assert not any(s.kind is oracle for s in drafts.build_sources(drafts.SpecConfig(lookups=False)))


def test_the_registry_is_what_the_kinds_are_read_from() -> None:
    """Unregistered, the throwaway kind is unknown everywhere (the fixture's teardown really takes it away)."""
    assert ORACLE.name not in drafts.KINDS and "oracle_accepted" not in Stats().counters()
    assert Estimates.from_dict({"sources": {"oracle": {"kind": "oracle", "accept": [0.9], "seen": [1]}}}).sources == {}


def test_the_controller_prices_a_new_kind_by_its_own_priors(oracle: Kind) -> None:
    est = Estimates()
    for n in range(1, 14):
        est.verify[n] = Timing([STEP * (1 + 0.15 * (n - 1))] * 5)
    controller = Controller(est)
    plan = controller.plan_cycle([Offer(oracle.name, oracle.name, 6)], remaining=200)
    assert plan.source == oracle.name and 1 <= plan.k <= oracle.k_max
    # Against a tier draft that costs a model step per token, the free oracle with the higher prior wins.
    both = controller.plan_cycle([Offer("q4_k_m", TIER.name, 8), Offer(oracle.name, oracle.name, 6)], remaining=200)
    assert both.source == oracle.name
    # What it measured is saved and read back under its kind, as a built-in's is.
    controller.record(CycleOutcome(oracle.name, oracle.name, 4, 4, 0.0001, STEP * 1.45))
    again = Estimates.from_dict(controller.estimates.as_dict())
    assert again.sources[oracle.name].kind == oracle.name


def test_a_new_kind_flows_through_the_answer_its_summary_and_the_bench(oracle: Kind, root: Path) -> None:
    engine = Engine(DEMO_NAME, EngineSettings(n_ctx=1024), root=root)
    chat = [{"role": "user", "content": PROMPT}]
    try:
        plain = list(engine.stream_chat(chat, parse_config("f16").options(TOKENS)))  # F16 alone, greedy
        ANSWER.extend(t for c in plain for t in c.tokens)
        config = parse_config("f16<-ngram")  # the same parent, the lookups on, the oracle among them
        record = run_engine(engine, config, PROMPT, TOKENS)
        engine.reset_caches()
        last = list(engine.stream_chat(chat, config.options(TOKENS)))[-1]
    finally:
        engine.close()
    # The parent verified every proposal: the answer is its own plain greedy one, partly from the oracle.
    assert record["token_ids"] == ANSWER and len(ANSWER) > 8
    assert 0 < record["oracle_accepted"] <= record["oracle_drafted"]
    assert record["accepted"] >= record["oracle_accepted"]
    # The answer's stats and summary count it and name it in its own word.
    facts = answer_facts(last)
    assert facts["draft_sources"]["oracle"] == last.stats.accepted_by("oracle") > 0
    assert f"{last.stats.accepted_by('oracle')} from the oracle" in sources_text(facts)
    assert last.stats.as_dict()["oracle_accepted"] == last.stats.accepted_by("oracle")
    # The benchmark's summary sums it under its own name.
    runs = [record | {"config": config.name, "workload": "w", "prompt_id": "p", "repeat": 0, "correct": None,
                      "matches_baseline": None, "rss_mb": 1.0, "cpu_s": 1.0, "overhead": None}]
    shares = summarize(runs, [config], "f16", {})["w"][config.name]["token_sources"]
    assert shares is not None and shares["oracle"] == pytest.approx(record["oracle_accepted"] / len(ANSWER), abs=1e-4)


def test_the_summary_names_each_kind_in_its_own_word(oracle: Kind) -> None:
    facts = {"draft_sources": {"ngram": 2, "suffix": 0, "tier": 5, oracle.name: 7}, "forced": 3}
    assert sources_text(facts) == "3 forced by the grammar, 2 from n-gram, 5 from the draft tier, 7 from the oracle"
