"""Prompt states on disk (#53): a long stable prefix (whole documents in the system message) saved after the
answer, restored by a fresh Engine as by a restarted program, never changing an answer; a truncated,
damaged or foreign file is ignored with one log line; least recently used out within the budget."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.prompt_cache import Identity
from runtime.engine.prompt_store import MIN_TOKENS, SUFFIX, PromptStore, decode_state, encode, evict
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
    assert decode_state(files[0].read_bytes(), identity_of(damaged), ()) != "truncated"  # rewritten whole


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
    assert decode_state(data, identity(), tokens[:280]) == (tokens, state)
    assert decode_state(data, identity(party="someone else"), tokens[:280]) == (
        "made for another model file, build, context or party")
    assert decode_state(data, identity(), (*tokens[:279], 7)) == "made for another prompt"
    assert decode_state(data[:-1], identity(), tokens[:280]) == "truncated"
    flipped = data[:-1] + bytes([data[-1] ^ 1])
    assert decode_state(flipped, identity(), tokens[:280]) == "damaged (checksum)"
    assert decode_state(b"GGUF" + data[4:], identity(), tokens[:280]) == "not a SpecQuant prompt state"


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


def malformed(identity: Identity, state: bytes) -> bytes:
    """A file whose header says n_tokens = -1, its length made to agree (issue 59 item 4)."""
    import json
    import struct
    import zlib
    from dataclasses import asdict

    from runtime.engine.prompt_store import MAGIC

    header = json.dumps({"identity": asdict(identity), "n_tokens": -1, "stable": 0,
                         "state_bytes": len(state) + 4, "crc32": zlib.crc32(state)}).encode()
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, state])


def test_a_malformed_header_is_refused_not_raised() -> None:
    # n_tokens = -1 with a length that agrees: numpy read the whole tail (ValueError: buffer size must be a
    # multiple of element size), a 500 on every request with that prompt.
    assert decode_state(malformed(identity(), b"\x01" * 1001), identity(), ()).startswith("damaged header")
    data = encode(identity(), tuple(range(300)), 280, b"s" * 64)
    assert decode_state(data.replace(b'"stable": 280', b'"stable": 999'), identity(), tuple(range(280))).startswith(
        "damaged header")


def test_a_file_that_cannot_be_used_is_deleted_counted_and_never_fails_the_answer(
    micro_copy: ModelDir, caplog: pytest.LogCaptureFixture
) -> None:
    _, [plain], _ = ask(micro_copy, [FIRST])
    [path] = list(Path(os.environ["SPECQUANT_PROMPT_STATES_DIR"]).glob(f"*{SUFFIX}"))
    good = path.read_bytes()
    own = identity_of_file(path)
    # 1. n_tokens = -1 (decode raised ValueError); 2. a whole, checksummed file whose state llama.cpp refuses
    # (it was kept, read and refused on every request, and never replaced).
    whole = decode_any(good)
    bad_state = encode(own, whole[0], whole[1], b"\x07" * 999)
    for bad, why in ((malformed(own, b"\x01" * 1001), "damaged header"), (bad_state, "refused by llama.cpp")):
        path.write_bytes(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="runtime.engine.prompt_store"):
            engine, [again], reused = ask(micro_copy, [FIRST], prompt_cache_bytes=0)
        assert again == plain and reused == [0]
        assert engine.prompt_store.dropped == 1 and engine.prompt_store.hits == 0
        assert [r for r in caplog.records if why in r.getMessage() and "deleted" in r.getMessage()]
        assert path.read_bytes() != bad and decode_any(path.read_bytes())  # a good one, written after the answer
        _, _, reused = ask(micro_copy, [FIRST], prompt_cache_bytes=0)
        assert reused[0] >= MIN_TOKENS  # and it is used


def identity_of_file(path: Path) -> Identity:
    import json

    data = path.read_bytes()
    n = int.from_bytes(data[14:18], "little")
    return Identity(**{k: tuple(v) if k == "file" else v for k, v in json.loads(data[18 : 18 + n])["identity"].items()})


def decode_any(data: bytes) -> tuple[tuple[int, ...], int]:
    """A whole file's tokens and stable count, whatever prompt it was made for."""
    import json

    n = int.from_bytes(data[14:18], "little")
    header = json.loads(data[18 : 18 + n])
    tokens = tuple(int(t) for t in np.frombuffer(data, "<i4", header["n_tokens"], 18 + n))
    return tokens, header["stable"]
