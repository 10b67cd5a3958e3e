"""Any converted model by name (issue #54): a real `specquant serve` on 127.0.0.1 over a cache holding two
micro models and the demo, driven by the official `openai` and `anthropic` clients. A request's `model` loads
that model; `--models-max 1` unloads the least recently used for the next; `--idle-unload` unloads an idle
one; a model too large for the memory (a small `--max-memory`) is a 400 naming those that fit; an unknown one
a 404 naming the known; a model that fails to load is one line, and the server goes on."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from runtime.machine.hardware import Inventory
from runtime.models.cache import ModelDir
from runtime.plan.placement import PlacementSettings
from runtime.plan.residency import Residency, manifest_tiers, models_that_fit, residency
from tests.conftest import copy_of_demo
from tests.test_server import DEMO, Served

A, B = "micro-a", "micro-b"
HELLO = [{"role": "user", "content": "Say hello."}]


def add_copy(micro: ModelDir, root: Path, name: str) -> None:
    """The micro model again under `name` in cache `root` (its own files: a test may damage one)."""
    target = root / name
    shutil.copytree(micro.path, target)
    manifest = json.loads((target / "manifest.json").read_text())
    (target / "manifest.json").write_text(json.dumps(manifest | {"name": name}))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, demo_model: ModelDir, micro_model: ModelDir) -> Path:
    root = copy_of_demo(demo_model, tmp_path_factory.mktemp("models") / "cache")
    for name in (A, B):
        add_copy(micro_model, root, name)
    return root


@pytest.fixture(scope="module")
def one_at_a_time(cache: Path) -> Iterator[Served]:
    server = Served(cache, "--models-max", "1")
    yield server
    assert server.stop() == 0, server.stderr()


def loaded(server: Served) -> list[str]:
    return server.health()["loaded"]


def ask(server: Served, model: str, **extra: Any) -> Any:
    return server.client().chat.completions.create(model=model, messages=HELLO, **({"temperature": 0,
                                                                                  "max_tokens": 6} | extra))


def anthropic_client(server: Served) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base, api_key="unused", max_retries=0, timeout=120)


def test_models_lists_every_converted_model_and_which_are_loaded(one_at_a_time: Served) -> None:
    listed = {m.id: m.model_extra["loaded"] for m in one_at_a_time.client().models.list()}
    assert listed.keys() == {A, B, DEMO}
    assert sorted(n for n, is_loaded in listed.items() if is_loaded) == loaded(one_at_a_time)
    assert one_at_a_time.health()["models_max"] == 1


def test_a_request_loads_its_model_and_the_least_recently_used_makes_room(one_at_a_time: Served) -> None:
    answer = ask(one_at_a_time, A)
    assert answer.model == A and answer.choices[0].message.content
    assert loaded(one_at_a_time) == [A]
    assert one_at_a_time.client().models.retrieve(A).model_extra["loaded"] is True

    message = anthropic_client(one_at_a_time).messages.create(model=B, max_tokens=6, messages=HELLO)
    assert message.model == B and message.content[0].text
    one_at_a_time.wait_idle(60)
    assert loaded(one_at_a_time) == [B]  # A unloaded for it
    assert one_at_a_time.client().models.retrieve(A).model_extra["loaded"] is False
    assert f"unloading {A} to make room for {B}" in one_at_a_time.stderr()


def test_a_load_waits_for_the_answer_in_flight_on_another_model_and_neither_is_disturbed(
    one_at_a_time: Served,
) -> None:
    """B is asked for while A streams: B's load waits its turn, A's answer runs to its end undisturbed, and
    each says what it says alone (every answer here starts from a fresh load: one model at a time)."""
    ask(one_at_a_time, B)  # so that A's next answer starts from a fresh load, as every later one does
    alone = {m: ask(one_at_a_time, m, max_tokens=32).choices[0].message.content for m in (A, B)}
    client = one_at_a_time.client()
    pieces = iter(client.chat.completions.create(model=A, messages=HELLO, temperature=0, max_tokens=32, stream=True))
    text = next(pieces).choices[0].delta.content or ""  # A is answering now
    other: dict[str, str | None] = {}
    asking = threading.Thread(target=lambda: other.update(b=ask(one_at_a_time, B, max_tokens=32).choices[0]
                                                         .message.content))
    asking.start()
    deadline = time.monotonic() + 30
    while one_at_a_time.health()["waiting"] == 0 and asking.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)  # until B waits behind A (unless A has finished already)
    text += "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
    asking.join(120)
    assert {A: text, B: other["b"]} == alone


def test_an_unknown_model_is_a_404_naming_the_known_ones_in_each_dialect(one_at_a_time: Served) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        ask(one_at_a_time, "no-such-model")
    assert e.value.body["code"] == "model_not_found" and all(n in e.value.message for n in (A, B, DEMO))
    with pytest.raises(anthropic.NotFoundError) as f:
        anthropic_client(one_at_a_time).messages.create(model="claude-x", max_tokens=6, messages=HELLO)
    assert f.value.body["error"]["type"] == "not_found_error" and A in f.value.message


@pytest.fixture(scope="module")
def small_memory(cache: Path, micro_model: ModelDir) -> Iterator[Served]:
    """200 MB for models: a micro model fits (without its draft), the demo does not. One micro model's f16
    tier is cut short, so that its load fails."""
    add_copy(micro_model, cache, "micro-damaged")
    damaged = cache / "micro-damaged" / "f16.gguf"
    damaged.write_bytes(damaged.read_bytes()[: 1 << 20])
    server = Served(cache, "--max-memory", "0.2", "--idle-unload", "0.02")  # 1.2 s
    yield server
    assert server.stop() == 0, server.stderr()


def test_a_model_too_large_for_the_memory_is_a_400_naming_those_that_fit(small_memory: Served) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        ask(small_memory, DEMO)
    assert e.value.body["code"] == "model_too_large" and e.value.body["param"] == "model"
    assert f"these fit: {A}, {B}" in e.value.message and "\n" not in e.value.message
    with pytest.raises(anthropic.BadRequestError) as f:
        anthropic_client(small_memory).messages.create(model=DEMO, max_tokens=6, messages=HELLO)
    assert f.value.body["error"]["type"] == "invalid_request_error" and A in f.value.message
    assert ask(small_memory, A).model == A  # the server goes on, with what fits


def test_an_idle_model_is_unloaded(small_memory: Served) -> None:
    assert ask(small_memory, B).model == B
    deadline = time.monotonic() + 60
    while B in loaded(small_memory) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert B not in loaded(small_memory)
    assert f"unloading {B}: idle for 1.2 s" in small_memory.stderr()


def test_a_model_that_fails_to_load_is_one_clear_error(small_memory: Served) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        ask(small_memory, "micro-damaged")
    assert "micro-damaged" in e.value.message and "\n" not in e.value.message
    assert ask(small_memory, A).choices[0].message.content  # the next request is answered


def test_the_default_count_is_how_many_fit_together_smallest_first() -> None:
    models = [Residency("big", 600), Residency("small", 100), Residency("mid", 300), Residency("no", 0, "too big")]
    assert models_that_fit(models, 400) == 2  # small and mid
    assert models_that_fit(models, 1000) == 3
    assert models_that_fit(models, 50) == 1  # one always may load (it is refused on its own if it cannot)


def test_a_models_resident_set_is_its_plan_and_its_prompt_cache(demo_model: ModelDir, micro_model: ModelDir) -> None:
    """The demo and the micro model on a machine with 8 GB available, and with a 200 MB budget."""
    machine = Inventory("cpu", 2, 16 * 10**9, 8 * 10**9)
    tiers = {m.name: manifest_tiers(m.read_manifest() or {}, 4096) for m in (demo_model, micro_model)}
    roomy = {n: residency(n, t, machine, PlacementSettings(), 10**8) for n, t in tiers.items()}
    assert all(r.fits for r in roomy.values())
    assert roomy[demo_model.name].ram_bytes > roomy[micro_model.name].ram_bytes > 10**8  # the cache counted
    small = PlacementSettings(max_memory_bytes=2 * 10**8)
    tight = {n: residency(n, t, machine, small, 10**8) for n, t in tiers.items()}
    assert tight[micro_model.name].fits  # its f16 without a draft
    assert not tight[demo_model.name].fits and "not enough memory" in tight[demo_model.name].why
    assert models_that_fit(list(roomy.values()), 10**12) == 2


def test_a_model_that_fails_to_load_takes_no_slot_and_evicts_none(one_at_a_time: Served, cache: Path,
                                                                   micro_model: ModelDir) -> None:
    """Before #59 a damaged model unloaded the working one to make room, then kept the slot it never used."""
    add_copy(micro_model, cache, "micro-cut")
    cut = cache / "micro-cut" / "f16.gguf"
    cut.write_bytes(cut.read_bytes()[: 1 << 20])
    assert ask(one_at_a_time, A).model == A
    with pytest.raises(openai.BadRequestError) as e:
        ask(one_at_a_time, "micro-cut")
    assert "micro-cut" in e.value.message and "damaged" in e.value.message
    assert loaded(one_at_a_time) == [A]
    assert f"unloading {A} to make room for micro-cut" not in one_at_a_time.stderr()


def test_an_unknown_models_long_name_is_cut_in_the_error(one_at_a_time: Served) -> None:
    name = "m" * 900_000
    with pytest.raises(openai.NotFoundError) as e:
        ask(one_at_a_time, name)
    assert len(e.value.message) < 400 and f"{'m' * 80}'… (900,000 characters)" in e.value.message
    with pytest.raises(anthropic.NotFoundError) as f:
        anthropic_client(one_at_a_time).messages.create(model=name, max_tokens=6, messages=HELLO)
    assert len(f.value.message) < 400


def test_a_context_that_cannot_be_created_is_a_400_naming_the_memory(micro_model: ModelDir) -> None:
    """Before #59: SpecQuantError, a 500 where a load failure is a 400. llama.cpp is made to refuse the context
    without allocating anything (no batch size at all): a context too large for the memory would first take
    it, which a test must not do to a shared machine."""
    from runtime.api.answers import api_error
    from runtime.decode.llama_backend import LlamaBackend, LoadOptions
    from runtime.engine.reader import failure_of
    from runtime.errors import ModelError

    with pytest.raises(ModelError) as e:
        LlamaBackend(micro_model.tier_path("f16"), LoadOptions(n_ctx=256, n_threads=1, n_batch=0))
    words = str(e.value)
    assert "cannot create a context of 256 tokens for f16.gguf" in words and "GB of RAM available" in words
    assert "--ctx" in words and "\n" not in words
    assert api_error(failure_of(e.value), "messages").status == 400
