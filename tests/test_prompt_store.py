"""Prompt states on disk (#53): a long stable prefix (whole documents in the system message) saved after the
answer, restored by a fresh Engine as by a restarted program, never changing an answer; a truncated,
damaged or foreign file is ignored with one log line; least recently used out within the budget."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.prompt_cache import Identity
from runtime.engine.prompt_store import MIN_TOKENS, SUFFIX, PromptStore, decode, encode, evict
from runtime.models.cache import ModelDir

GREEDY = ChatOptions(max_tokens=8, sampling_overrides=(("temperature", 0.0),))
DOCS = ("Frobnicator manual. Run pip install frobnicator, then frob init in your project folder. The init step "
        "writes frob.toml with the default settings. It needs Python 3.10 and 200 MB of disk space. ") * 8
SYSTEM = {"role": "system", "content": f"Sources:\n{DOCS}"}
FIRST = [SYSTEM, {"role": "user", "content": "How do I install it?"}]


def identity(party: str = "") -> Identity:
    return Identity("m", "f16", ("/m/f16.gguf", 10, 1, "sha"), "b1", 1024, party)


@pytest.fixture()
def micro_copy(micro_model: ModelDir, tmp_path: Path) -> ModelDir:
    """The micro model's own copy: answers write estimates into its folder."""
    shutil.copytree(micro_model.path, tmp_path / micro_model.name)
    return ModelDir(tmp_path, micro_model.name)


def ask(
    model: ModelDir, chats: list[list[dict[str, str]]], cold: bool = False, **settings: int
) -> tuple[Engine, list, list[int]]:
    """A fresh Engine (as after a restart) answers each chat (`cold`: each with empty KV caches); its answers'
    tokens and reused prompt tokens."""
    engine = Engine(model.name, EngineSettings(n_ctx=1024, n_threads=2, **settings), root=model.root)
    tokens, reused = [], []
    try:
        for chat in chats:
            if cold:
                engine.reset_caches()
            answer = engine.chat(chat, replace(GREEDY, no_spec=True))
            tokens.append(answer.token_ids)
            reused.append(answer.last.stats.reused_tokens)
    finally:
        engine.close()  # waits for the state's write
    return engine, tokens, reused


def test_a_restarted_engine_restores_the_documents_from_disk_and_answers_the_same(
    micro_copy: ModelDir, caplog: pytest.LogCaptureFixture
) -> None:
    first, [answer], _ = ask(micro_copy, [FIRST])
    assert first.prompt_store.written == 1
    files = list(first.prompt_store.folder.glob(f"*{SUFFIX}"))
    assert len(files) == 1
    follow_up = [*FIRST, {"role": "assistant", "content": first_text(micro_copy, answer)},
                 {"role": "user", "content": "And then?"}]
    new_question = [SYSTEM, {"role": "user", "content": "How much disk space?"}]
    restarted, cached, reused = ask(micro_copy, [new_question, follow_up], prompt_cache_bytes=0)
    assert restarted.prompt_store.hits == 2  # both from disk: RAM was off
    assert reused[0] >= MIN_TOKENS and reused[1] > reused[0]  # the follow-up also skips the first turn
    _, plain, none = ask(micro_copy, [new_question, follow_up], True, prompt_cache_bytes=0, prompt_store_bytes=0)
    assert cached == plain and none == [0, 0]
    # A truncated file: one log line, read as if absent, and replaced by a whole one after the answer.
    files[0].write_bytes(files[0].read_bytes()[:-100])
    with caplog.at_level(logging.WARNING, logger="runtime.engine.prompt_store"):
        damaged, again, reused = ask(micro_copy, [new_question], prompt_cache_bytes=0)
    assert again == plain[:1] and reused == [0] and damaged.prompt_store.hits == 0
    assert [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()] and len(caplog.records) == 1
    assert decode(files[0].read_bytes(), identity_of(damaged), ()) != "truncated"  # rewritten whole


def first_text(model: ModelDir, tokens: tuple[int, ...]) -> str:
    from runtime.decode.llama_backend import LlamaBackend, LoadOptions

    with LlamaBackend(model.tier_path("f16"), LoadOptions(n_ctx=64, n_threads=1)) as b:
        return b.detokenize(tokens)


def identity_of(engine: Engine) -> Identity:
    # the only file's own identity, read back: enough to tell a truncated file from a whole one
    import json

    path = next(engine.prompt_store.folder.glob(f"*{SUFFIX}"))
    data = path.read_bytes()
    n = int.from_bytes(data[14:18], "little")
    return Identity(**{k: tuple(v) if k == "file" else v for k, v in json.loads(data[18 : 18 + n])["identity"].items()})


def test_a_file_is_used_only_for_its_identity_and_prompt_and_only_when_whole() -> None:
    tokens, state = tuple(range(300)), bytes(range(256)) * 4
    data = encode(identity(), tokens, 280, state)
    assert decode(data, identity(), tokens[:280]) == (tokens, state)
    assert decode(data, identity(party="someone else"), tokens[:280]) == (
        "made for another model file, build, context or party")
    assert decode(data, identity(), (*tokens[:279], 7)) == "made for another prompt"
    assert decode(data[:-1], identity(), tokens[:280]) == "truncated"
    flipped = data[:-1] + bytes([data[-1] ^ 1])
    assert decode(flipped, identity(), tokens[:280]) == "damaged (checksum)"
    assert decode(b"GGUF" + data[4:], identity(), tokens[:280]) == "not a SpecQuant prompt state"


def test_least_recently_used_states_go_first(tmp_path: Path) -> None:
    store = PromptStore(tmp_path, max_bytes=10_000)
    paths = []
    for i in range(3):
        path = store.path(identity(), [i] * 300)
        path.write_bytes(bytes(4000))
        os.utime(path, ns=(i * 10**9, i * 10**9))
        paths.append(path)
    os.utime(paths[0])  # used just now
    evict(tmp_path, 10_000)
    assert [p.exists() for p in paths] == [True, False, True]
    assert PromptStore(tmp_path, max_bytes=0).load(identity(), [0] * 300) is None  # off: not even read
