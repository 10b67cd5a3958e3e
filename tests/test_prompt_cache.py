"""The prompt cache (#53): KV states of earlier prompts kept in RAM and restored for a later prompt that
shares them; never for another model, tier, build or party; and never changing an answer."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.documents.grounding import Citation, Grounding, grounded_messages
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.prompt_cache import MIN_TOKENS, Identity, PromptCache
from runtime.models.cache import DEMO_NAME, ModelDir
from tests.micro_model import MicroSpec, write_micro_gguf

GREEDY = ChatOptions(max_tokens=10, sampling_overrides=(("temperature", 0.0),))
DOCS = ("Frobnicator manual. Run pip install frobnicator, then frob init in your project folder. The init step "
        "writes frob.toml with the default settings. It needs Python 3.10 and 200 MB of disk space. ") * 3


def identity(party: str = "", build: str = "b1", tier: str = "f16") -> Identity:
    return Identity("m", tier, ("/m/f16.gguf", 10, 1, "sha"), build, 1024, party)


class FakeBackend:
    """A KV cache that is its tokens: a saved state is their bytes."""

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self.tokens = list(tokens)

    common_prefix = LlamaBackend.common_prefix  # the real one: it reads only `tokens`

    def save_prefix_state(self) -> tuple[tuple[int, ...], bytes]:
        return tuple(self.tokens), bytes(len(self.tokens))

    def restore_prefix_state(self, tokens: Sequence[int], state: bytes, keep: int) -> bool:
        self.tokens = list(tokens)[:keep]
        return True


def test_the_longest_saved_prefix_is_restored_for_its_own_identity_only() -> None:
    cache = PromptCache(10_000)
    a = list(range(100))
    live = FakeBackend(a)
    cache.keep_live(identity(), live, [7, 8, 9])  # the new prompt shares nothing: the live state is kept
    assert len(cache) == 1
    prompt = a[:60] + [999] * 5
    other = FakeBackend()
    assert cache.restore(identity(party="someone else"), other, prompt) == 0 and other.tokens == []
    assert cache.restore(identity(build="b2"), other, prompt) == 0  # another llama.cpp build
    assert cache.restore(identity(tier="q8_0"), other, prompt) == 0
    assert cache.restore(identity(), other, prompt) == 60 and other.tokens == a[:60]
    assert cache.restore(identity(), FakeBackend(), a) == 99  # one prompt token is always read
    short = FakeBackend()
    assert cache.restore(identity(), short, [*a[: MIN_TOKENS - 1], 5]) == 0  # too short to be worth it


def test_least_recently_used_out_within_the_budget_and_prefixes_kept_once() -> None:
    cache = PromptCache(250)
    for start in (1000, 2000, 3000):
        cache.keep_live(identity(), FakeBackend(range(start, start + 100)), ())
    assert len(cache) == 2 and cache.bytes == 200
    assert cache.restore(identity(), FakeBackend(), list(range(1000, 1100))) == 0  # the oldest went
    assert cache.restore(identity(), FakeBackend(), list(range(2000, 2050))) == 49  # now the most recent
    cache.keep_live(identity(), FakeBackend(range(4000, 4100)), ())
    assert cache.restore(identity(), FakeBackend(), list(range(3000, 3050))) == 0  # 3000 was least recent
    cache.keep_live(identity(), FakeBackend(range(2000, 2120)), ())  # holds the 2000 entry: replaces it
    assert len(cache) == 2 and cache.bytes == 220
    cache.keep_live(identity(), FakeBackend(range(2000, 2050)), ())  # already held by a longer one
    assert len(cache) == 2
    off = PromptCache(0)
    off.keep_live(identity(), FakeBackend(range(100)), ())
    assert len(off) == 0
    follow_up = PromptCache(10_000)  # a follow-up loses only the tail of the last answer: not worth a copy
    follow_up.keep_live(identity(), FakeBackend(range(200)), [*range(190), 5])
    assert len(follow_up) == 0


def test_a_restored_state_is_the_live_cache_it_was_saved_from(micro_gguf: Path) -> None:
    opts = LoadOptions(n_ctx=512, n_threads=2)
    with LlamaBackend(micro_gguf, opts) as b:
        prompt = b.tokenize(DOCS, add_bos=True)
        rest = b.tokenize(" What does frob init write?")
        fresh = b.decode([*prompt, *rest], [len(prompt) + len(rest) - 1])
        b.truncate(0)
        b.decode([*prompt, 11, 12, 13])  # the live cache also holds what followed the prefix
        tokens, state = b.save_prefix_state()
        b.truncate(len(prompt))
        live = b.decode(rest, [len(rest) - 1])  # the live cache reused, as a follow-up does without the cache
        b.truncate(0)
        b.decode([1, 2, 3])  # another chat in between
        assert b.restore_prefix_state(tokens, state, len(prompt))
        assert b.tokens == prompt
        restored = b.decode(rest, [len(rest) - 1])
    assert np.array_equal(live, restored)  # the very same cells, bit for bit
    # Against reading it all in one batch, only batch-shape rounding (DESIGN §5, "batched numerics").
    assert np.allclose(fresh, restored, atol=0.05) and fresh.argmax() == restored.argmax()


@pytest.fixture()
def micro_copy(micro_model: ModelDir, tmp_path: Path) -> ModelDir:
    """The micro model's own copy: answers write estimates into its folder."""
    shutil.copytree(micro_model.path, tmp_path / micro_model.name)
    return ModelDir(tmp_path, micro_model.name)


def conversations() -> list[list[dict[str, str]]]:
    """Turn 1, the follow-up, another chat (its prompt shares only the template's start), a new chat on the
    same documents, and the first chat's third turn after all that (its live KV long gone)."""
    system = {"role": "system", "content": f"Sources:\n{DOCS}"}
    first = [system, {"role": "user", "content": "How do I install it?"}]
    return [
        first,
        [*first, {"role": "assistant", "content": "{0}"}, {"role": "user", "content": "And then?"}],
        [{"role": "user", "content": "Write a poem about pancakes and syrup on a sunday morning."}],
        [system, {"role": "user", "content": "How much disk space?"}],
        [*first, {"role": "assistant", "content": "{0}"}, {"role": "user", "content": "And then?"},
         {"role": "assistant", "content": "{1}"}, {"role": "user", "content": "Which Python?"}],
    ]


def answers(engine: Engine, options: ChatOptions, fresh: bool) -> tuple[list[tuple[int, ...]], list[int]]:
    """Each conversation's answer tokens (earlier answers filled in) and how many prompt tokens were reused."""
    said: list[str] = []
    tokens, reused = [], []
    for chat in conversations():
        chat = [{**m, "content": m["content"].format(*said)} for m in chat]
        if fresh:
            engine.reset_caches()
        answer = engine.chat(chat, options)
        said.append(answer.text)
        tokens.append(answer.token_ids)
        reused.append(answer.last.stats.reused_tokens)
    return tokens, reused


@pytest.mark.parametrize("no_spec", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_the_cache_never_changes_an_answer(micro_copy: ModelDir, no_spec: bool) -> None:
    settings = EngineSettings(n_ctx=1024, n_threads=2)
    options = replace(GREEDY, no_spec=no_spec)
    engine = Engine(micro_copy.name, settings, root=micro_copy.root)
    try:
        cached, reused = answers(engine, options, fresh=False)
        assert engine.prompt_cache.hits >= 1  # the last chat came back from the cache, not from its prompt
        plain, none_reused = answers(engine, options, fresh=True)
    finally:
        engine.close()
    assert cached == plain
    assert none_reused == [0] * 5
    # The follow-up and the new chat on the same documents reuse them; the first chat's third turn reuses
    # its whole earlier conversation, restored after two other chats.
    assert reused[1] > reused[3] > 50 and reused[4] > reused[1]


def test_an_entry_is_never_used_for_another_model(micro_gguf: Path, demo_gguf: Path, tmp_path: Path) -> None:
    other = write_micro_gguf(tmp_path / "other.gguf", demo_gguf, replace(MicroSpec(), seed=99))
    cache = PromptCache(1 << 30)
    opts = LoadOptions(n_ctx=512, n_threads=2)
    with LlamaBackend(micro_gguf, opts) as a, LlamaBackend(other, opts) as b:
        prompt = a.tokenize(DOCS, add_bos=True)
        a.decode(prompt)
        mine = Identity.of("micro", "f16", micro_gguf, "", 512, "")
        cache.keep_live(mine, a, ())
        theirs = Identity.of("other", "f16", other, "", 512, "")
        assert cache.restore(theirs, b, [*prompt, 5]) == 0 and b.tokens == []
        assert cache.restore(replace(mine, build="another build"), b, [*prompt, 5]) == 0
        assert cache.restore(mine, a, [*prompt, 5]) == len(prompt)  # its own: used


def test_whole_documents_go_before_the_conversation_and_passages_into_the_question() -> None:
    whole = (Citation(1, "/a/install.md", "m", "Run pip install frob.", 1.0, whole=True),
             Citation(2, "/a/pancakes.md", "m", "Mix flour.", 1.0, whole=True))
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "How?"}]
    grounded = grounded_messages(chat, whole)
    assert grounded[0]["role"] == "system" and grounded[1:] == chat  # the turns stay as typed: a fixed prefix
    assert "[1] install.md\nRun pip install frob." in grounded[0]["content"]
    assert "[2] pancakes.md" in grounded[0]["content"] and "[1]" in grounded[0]["content"].split("Sources")[0]
    own = grounded_messages([{"role": "system", "content": "Be brief."}, *chat], whole)
    assert own[0]["content"].startswith("Be brief.\n\n") and len(own) == 4
    no_system = grounded_messages(chat, whole, system=False)  # a template without the role
    assert no_system[:2] == chat[:2] and "[1] install.md" in no_system[2]["content"]
    passage = replace(whole[0], whole=False)
    asked = grounded_messages(chat, [passage])
    assert asked[:2] == chat[:2] and asked[2]["content"].endswith("Question: How?")


@pytest.mark.slow
def test_a_follow_up_on_whole_documents_reads_only_the_new_turn_on_the_demo(
    demo_model: ModelDir, tmp_path: Path
) -> None:
    from tests.conftest import copy_of_demo
    from tests.test_grounding import QUESTION, make_library

    index = make_library(tmp_path)
    root = copy_of_demo(demo_model, tmp_path / "cache")
    options = replace(GREEDY, max_tokens=16, documents=Grounding("manuals", index=str(index)))
    engine = Engine(DEMO_NAME, EngineSettings(n_threads=2), root=root)

    def chat(messages: list[dict[str, str]], opts: ChatOptions, fresh: bool):
        if fresh:  # without the cache: every prompt read whole
            engine.reset_caches()
        return engine.chat(messages, opts)

    runs = []
    try:
        for fresh in (False, True):
            first = [{"role": "user", "content": QUESTION}]
            one = chat(first, options, fresh)
            follow = [*first, {"role": "assistant", "content": one.text}, {"role": "user", "content": "And then?"}]
            chat([{"role": "user", "content": "Tell me about pancakes."}], replace(GREEDY, max_tokens=8), fresh)
            two = chat(follow, options, fresh)  # the other chat evicted its live KV: the cache brings it back
            new = chat([{"role": "user", "content": "How much disk space?"}], options, fresh)
            runs.append(([one.token_ids, two.token_ids, new.token_ids],
                         [a.last.stats.reused_tokens for a in (one, two, new)],
                         one.last.stats.prompt_tokens))
    finally:
        engine.close()
    (cached, reused, first_prompt), (plain, plain_reused, _) = runs
    assert cached == plain and plain_reused == [0, 0, 0]
    assert reused[1] >= first_prompt and reused[2] > 0.8 * first_prompt  # the documents were read once
