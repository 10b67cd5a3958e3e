"""A smaller model of the same family as a draft source (`--draft-model`), on real models: micro models copy
the demo model's tokenizer, so a converted micro model can draft for the demo (and the demo for it)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import gguf
import pytest

from converters.convert import convert
from runtime.decode.controller import MIN_RATE_GAIN, Controller, Estimates, cap
from runtime.decode.draft_source import Offer
from runtime.decode.drafts.model import KIND, source_name
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.decode.sampling import SamplingParams
from runtime.decode.speculative import Decoding, SpecConfig, generate_steps
from runtime.decode.vocab import check_draft_model, draft_targets, mismatch, read_vocabulary
from runtime.engine.engine import ChatOptions, Engine, EngineSettings
from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan.placement import plan
from tests.conftest import assert_one_line_error, run_cli, run_cli_here
from tests.micro_model import MicroSpec, write_micro_gguf
from tests.test_speculative import PROMPT, assert_same_as_plain_greedy

GREEDY = SamplingParams()
MESSAGES = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]


@pytest.fixture
def cache(demo_cache: Path, micro_model: ModelDir) -> Path:
    """The user's cache with the demo model and the micro model (a copy: answers write estimates there)."""
    shutil.copytree(micro_model.path, demo_cache / micro_model.name)
    return demo_cache


def test_the_vocabulary_check_passes_for_a_micro_model_and_the_demo(cache: Path) -> None:
    micro, demo = ModelDir(cache, "micro"), ModelDir(cache, DEMO_NAME)
    check_draft_model(micro, demo)  # no error: the same vocabulary, token for token
    assert draft_targets([micro, demo]) == {"micro": [DEMO_NAME], DEMO_NAME: []}
    engine = Engine(DEMO_NAME, EngineSettings(draft_model="micro"), root=cache)
    try:
        assert engine.sibling is not None and engine.sibling[0].name == "micro"
        assert engine.sibling[1] == "q4_k_m"  # its cheapest tier drafts
    finally:
        engine.close()


def test_another_vocabulary_is_refused_in_one_line_naming_the_first_differing_token(
    cache: Path, demo_gguf: Path, tmp_path: Path
) -> None:
    changed = write_micro_gguf(tmp_path / "other.gguf", demo_gguf, MicroSpec(), token_texts={1234: "specquant-changed"})
    convert(str(changed), name="micro-other", root=cache)
    with pytest.raises(UserError, match="token 1234 is 'specquant-changed' against") as e:
        Engine(DEMO_NAME, EngineSettings(draft_model="micro-other"), root=cache)
    assert "micro-other" in str(e.value) and "\n" not in str(e.value)
    result = run_cli("chat", "--model", DEMO_NAME, "--draft-model", "micro-other", "--prompt", "Hi")
    assert_one_line_error(result, "'micro-other' cannot draft for", "token 1234")
    # `specquant list` offers the micro model for the demo, never the one with another vocabulary
    listed = json.loads(run_cli_here("list", "--json").stdout)["models"]  # in this process: no interpreter start
    assert {m["name"]: m["can_draft_for"] for m in listed} == {"micro": [DEMO_NAME], "micro-other": [], DEMO_NAME: []}


def test_the_vocabulary_llama_cpp_reads_is_the_files_token_for_token(demo_gguf: Path, tmp_path: Path) -> None:
    """read_vocabulary takes llama.cpp's vocab-only load (a tenth of gguf's reading time): the same texts, the
    same types (from llama.cpp's attributes, here with every type the demo lacks) and the same special tokens."""
    kinds = {5: gguf.TokenType.UNUSED, 6: gguf.TokenType.BYTE, 7: gguf.TokenType.USER_DEFINED}
    path = write_micro_gguf(tmp_path / "kinds.gguf", demo_gguf, MicroSpec(), token_types=kinds)
    read, reader = read_vocabulary(path), gguf.GGUFReader(path)
    assert read.tokens == tuple(reader.fields["tokenizer.ggml.tokens"].contents())
    assert read.types == tuple(reader.fields["tokenizer.ggml.token_type"].contents())
    assert {read.types[t] for t in kinds} == set(kinds.values()) and gguf.TokenType.CONTROL in read.types
    assert dict(read.special) == {
        name: reader.fields[f"tokenizer.ggml.{name}_token_id"].contents()
        for name in ("bos", "eos", "unknown", "padding")
    }
    assert read.add_bos is reader.fields["tokenizer.ggml.add_bos_token"].contents()


def test_a_token_of_another_type_or_a_parent_padded_past_the_draft(demo_gguf: Path, tmp_path: Path) -> None:
    demo = read_vocabulary(demo_gguf)
    typed = write_micro_gguf(tmp_path / "typed.gguf", demo_gguf, MicroSpec(), token_types={7: gguf.TokenType.UNUSED})
    assert mismatch(read_vocabulary(typed), demo).startswith(f"token 7 ({demo.tokens[7]!r}) has type 5 against")
    # Qwen2.5-7B pads its vocabulary with unused tokens past its 0.5B's: allowed on the parent's side only
    pads = [f"[PAD{i}]" for i in range(demo.size, demo.size + 64)]
    padded = replace(demo, tokens=demo.tokens + tuple(pads), types=demo.types + (gguf.TokenType.UNUSED,) * 64)
    assert mismatch(demo, padded) is None
    assert "is not the parent's" in (mismatch(padded, demo) or "")
    used = replace(padded, types=demo.types + (gguf.TokenType.NORMAL,) * 64)
    assert f"the parent's token {demo.size} ('[PAD{demo.size}]')" in (mismatch(demo, used) or "")


def test_the_sibling_draft_is_exact(cache: Path) -> None:
    """Greedy with the micro model as the only draft source, at a fixed k so that it really drafts: the demo's
    own greedy tokens."""
    opts = LoadOptions(n_ctx=1024)
    parent = LlamaBackend(ModelDir(cache, DEMO_NAME).tier_path("f16"), opts)
    micro = LlamaBackend(ModelDir(cache, "micro").tier_path("q4_k_m"), opts)
    try:
        prompt = parent.tokenize(PROMPT)
        spec = SpecConfig(k=3, ngram=False, suffix=False, forced=False)
        decoding = Decoding.drafting(spec, sibling=(source_name("micro"), micro), params=GREEDY)
        out, drafted = [], 0
        for step in generate_steps(parent, prompt, decoding):
            out.extend(step.tokens)
            drafted += step.drafted
            assert step.source in (None, "model:micro") and step.kind in (None, KIND.name)
            if len(out) >= 48:
                break
        assert drafted > 0
        assert_same_as_plain_greedy(parent, prompt, out, 48)
    finally:
        parent.close()
        micro.close()


def test_the_draft_model_is_planned_in_memory_and_answers_stay_the_parents(cache: Path) -> None:
    engine = Engine(DEMO_NAME, EngineSettings(n_ctx=1024, draft_model="micro"), root=cache)
    try:
        sibling = engine.tier_size("q4_k_m", ModelDir(cache, "micro"))
        decision = engine.decide("Write a story.", ChatOptions(parent="f16", draft="q4_k_m"))
        assert decision.placement.sibling is not None and decision.placement.sibling.tier == "q4_k_m"
        alone = plan(engine.hardware, engine.tier_size("f16"), engine.tier_size("q4_k_m"), engine.settings.placement)
        # its weights, KV cache and compute buffer are counted beside the pair
        weights_and_kv = sibling.file_bytes + sibling.kv_bytes + sibling.compute_bytes
        assert decision.placement.ram_bytes == alone.ram_bytes + weights_and_kv
        # Memory for the pair, not for the draft model too: the user's draft model stays, the preset's tier goes
        f16, q4 = engine.tier_size("f16"), engine.tier_size("q4_k_m")
        tight = replace(engine.settings.placement, max_memory_bytes=alone.ram_bytes + weights_and_kv // 2)
        kept = plan(engine.hardware, f16, q4, tight, sibling)
        assert kept.sibling is not None and kept.draft is None and "q4_k_m draft was dropped" in kept.reason
        # Memory for the parent alone: the draft model is dropped too, and the reason says so
        parent_alone = plan(engine.hardware, f16, None, engine.settings.placement).ram_bytes
        tighter = replace(tight, max_memory_bytes=parent_alone + weights_and_kv // 2)
        dropped = plan(engine.hardware, f16, q4, tighter, sibling)
        assert dropped.sibling is None and dropped.draft is None and "the draft model was dropped" in dropped.reason
        # No speculation: no draft model planned or loaded
        assert engine.decide("Write a story.", ChatOptions(no_spec=True)).placement.sibling is None
        exact = ChatOptions(max_tokens=40, sampling=GREEDY, preset="exact")  # F16's words: its costs are read below
        chunks = list(engine.stream_chat(MESSAGES, exact))
        spec_text, last = "".join(c.text for c in chunks), chunks[-1]
        plain = list(engine.stream_chat(MESSAGES, replace(exact, no_spec=True)))
        assert spec_text == "".join(c.text for c in plain)
        assert last.placement.sibling is not None
        costs = engine.measurements.known_costs("f16")
        assert costs is not None and source_name("micro") in costs.c  # measured like a tier
    finally:
        engine.close()


def test_the_controller_declines_a_draft_model_that_costs_more_than_it_can_save(cache: Path) -> None:
    """The demo model drafting for the micro model: measured, its step costs more than the micro's own, so no
    acceptance can make it pay; the micro model drafting for the demo: the controller follows the cost model
    with the measured c and v at every acceptance."""
    for parent, draft in (("micro", DEMO_NAME), (DEMO_NAME, "micro")):
        engine = Engine(parent, EngineSettings(n_ctx=1024, draft_model=draft), root=cache)
        try:
            name = source_name(draft)
            costs, _ = engine.costs("f16", [name])
            c, v = costs.c[name], costs.v
            assert 0 <= costs.acceptance[name] <= 1
            if parent == "micro":
                assert c > 1.0  # measured: a 30-layer 135M step against a 2-layer micro's
                assert cap(1.0, c, v, KIND.k_max) == (1.0, 0)
            for a in (0.0, 0.3, 0.6, 0.9, 1.0):
                est = Estimates()
                est.seed(costs.shape())
                stats = est.source(name, KIND.name)
                stats.accept, stats.seen = [a] * KIND.k_max, [1e6] * KIND.k_max  # acceptance known for sure
                chosen = Controller(est).plan_cycle([Offer(name, KIND.name, KIND.k_max)], 1 << 20)
                best, _ = cap(a, c, v, KIND.k_max)
                pays = best > MIN_RATE_GAIN * 1.02
                if best < MIN_RATE_GAIN * 0.98 or parent == "micro":
                    assert chosen.source is None, (parent, a, c, best)
                elif pays:
                    assert chosen.source == name and not chosen.explore, (parent, a, c, best)
        finally:
            engine.close()


def test_the_catalogue_names_the_larger_models_of_a_family() -> None:
    from runtime.plan.catalog import can_draft_for as catalogue_drafts_for
    from runtime.plan.catalog import load_catalog

    entries = {e.name: e for e in load_catalog()}
    small = catalogue_drafts_for(entries["Qwen2.5-0.5B-Instruct"], list(entries.values()))
    # the 7B pads its vocabulary to 152,064: still the family's; Qwen3 is another architecture
    assert small == ["Qwen2.5-1.5B-Instruct", "Qwen2.5-3B-Instruct", "Qwen2.5-7B-Instruct"]
    assert catalogue_drafts_for(entries["Qwen2.5-7B-Instruct"], list(entries.values())) == []
    assert "Llama-3.2-3B-Instruct" in catalogue_drafts_for(entries["Llama-3.2-1B-Instruct"], list(entries.values()))
