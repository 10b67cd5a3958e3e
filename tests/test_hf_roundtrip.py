"""The Hugging Face path, proven on the real demo model rather than by a circular round trip alone.

1. Export the demo GGUF as a HF checkpoint, convert it back, and compare llama.cpp logits and tokens.
2. Check llama.cpp's logits on the converted model against an independent numpy forward pass with HF
   semantics over the exported safetensors: a bug shared by export and import (say, the Q/K permutation)
   passes check 1 but fails this one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from converters.convert import convert
from converters.hf_to_gguf import plan_hf
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.decode.sampling import recommended
from runtime.models.cache import ModelDir
from tests.hf_export import GEMMA3_WINDOW, export_to_hf, llama_to_family, llama_to_qwen
from tests.micro_model import MicroSpec, write_micro_gguf
from tests.numpy_reference import hf_gemma3_logits, hf_llama_logits

# Every test here converts a checkpoint or runs a numpy forward pass (10-20 s each on 2 cores): CI runs them.
pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n",
    "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n",
]
TOKENIZER_TEXTS = [
    "Grüße aus Köln! Ça va? ¿Qué tal? Привет, мир. こんにちは世界。안녕하세요. مرحبا بالعالم",
    "Emoji: 👍🏽 🇫🇷 👨‍👩‍👧‍👦 🤖✨ and digits 1234567890 3.14159",
    "  leading spaces\ttabs\nnew lines\r\n<|im_start|>special<|im_end|> 'quotes' don't",
]


def all_logits(path: Path, ids: list[int]) -> np.ndarray:
    with LlamaBackend(path, LoadOptions(n_ctx=512)) as b:
        return b.decode(ids, range(len(ids)))


def against_numpy(
    path: Path, src: Path, forward: Callable[[Path, list[int]], np.ndarray]
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """`path`'s logits on a longer prompt against `forward`, the numpy forward pass of `src` (the safetensors it
    was converted from): within 0.5% of the logit range, the same argmax at nine positions in ten. Returns the
    prompt's ids and both logits."""
    with LlamaBackend(path, LoadOptions(n_ctx=64)) as b:
        ids = b.tokenize(PROMPTS[0] + " Paris, and the capital of Italy is")
    got = all_logits(path, ids)
    want = forward(src, ids)
    assert np.abs(got - want).max() < 0.005 * np.abs(want).max()
    assert (got.argmax(axis=1) == want.argmax(axis=1)).mean() >= 0.9
    return ids, got, want


@pytest.fixture(scope="module")
def demo_hf(tmp_path_factory: pytest.TempPathFactory, demo_gguf: Path) -> Path:
    out = export_to_hf(demo_gguf, tmp_path_factory.mktemp("demo-hf") / "SmolLM2-135M-Instruct")
    # Qwen2.5's recommendation, as its generation_config.json gives it (it has no min_p).
    (out / "generation_config.json").write_text(
        json.dumps({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05})
    )
    return out


@pytest.fixture(scope="module")
def converted_hf(demo_hf: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelDir:
    root = tmp_path_factory.mktemp("hf-cache")
    manifest = convert(str(demo_hf), root=root)
    assert manifest["source"]["kind"] == "hf_dir" and manifest["reconstructed"] is False
    return ModelDir(root, manifest["name"])


def test_roundtrip_logits_match_the_original(converted_hf: ModelDir, demo_model: ModelDir) -> None:
    for prompt in PROMPTS:
        with LlamaBackend(demo_model.tier_path("f16"), LoadOptions(n_ctx=64)) as ref:
            ids = ref.tokenize(prompt)
        want = all_logits(demo_model.tier_path("f16"), ids)
        got = all_logits(converted_hf.tier_path("f16"), ids)
        # Same F16 weights through two paths: llama.cpp must compute (nearly) the same numbers.
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)


def test_roundtrip_tokenization_is_identical(converted_hf: ModelDir, demo_gguf: Path) -> None:
    with (
        LlamaBackend(demo_gguf, LoadOptions(n_ctx=64)) as a,
        LlamaBackend(converted_hf.tier_path("f16"), LoadOptions(n_ctx=64)) as b,
    ):
        for text in TOKENIZER_TEXTS:
            ids = a.tokenize(text)
            assert b.tokenize(text) == ids
            assert b.detokenize(ids, special=True) == text
        assert (a.bos, a.eos) == (b.bos, b.eos)
    meta = gguf.GGUFReader(converted_hf.tier_path("f16")).fields
    assert meta["tokenizer.ggml.pre"].contents() == "smollm"
    assert "im_start" in meta["tokenizer.chat_template"].contents()


def test_llama_cpp_matches_independent_numpy_forward(converted_hf: ModelDir, demo_hf: Path) -> None:
    with LlamaBackend(converted_hf.tier_path("f16"), LoadOptions(n_ctx=64)) as b:
        ids = b.tokenize(PROMPTS[1])
    got = all_logits(converted_hf.tier_path("f16"), ids)
    want = hf_llama_logits(demo_hf, ids)
    # llama.cpp rounds activations to F16 inside its matmuls; numpy stays in F32. Measured here: max
    # difference 0.1% of the logit range; we allow 0.5%, while a wrong Q/K permutation moves logits by >10%.
    scale = np.abs(want).max()
    assert np.abs(got - want).max() < 0.005 * scale
    for g, w in zip(got, want, strict=True):
        assert np.corrcoef(g, w)[0, 1] > 0.9999
    assert (got.argmax(axis=1) == want.argmax(axis=1)).mean() >= 0.9


def test_numpy_reference_would_catch_a_wrong_permutation(demo_hf: Path, converted_hf: ModelDir, tmp_path: Path) -> None:
    """Sensitivity check: skipping the Q/K permutation must fail the comparison above by a wide margin."""
    from converters import hf_to_gguf

    original = hf_to_gguf.permute_rotary
    hf_to_gguf.permute_rotary = lambda w, n_head: w
    try:
        manifest = convert(str(demo_hf), name="unpermuted", root=tmp_path / "cache")
    finally:
        hf_to_gguf.permute_rotary = original
    bad = ModelDir(tmp_path / "cache", manifest["name"]).tier_path("f16")
    with LlamaBackend(bad, LoadOptions(n_ctx=64)) as b:
        ids = b.tokenize(PROMPTS[1])
    got = all_logits(bad, ids)
    want = hf_llama_logits(demo_hf, ids)
    assert np.abs(got - want).max() > 0.1 * np.abs(want).max()


def test_bf16_sharded_checkpoint_counts_f16_range_losses(micro_gguf: Path, tmp_path: Path) -> None:
    def inject(tensors: dict[str, np.ndarray]) -> None:
        w = tensors["model.layers.0.mlp.up_proj.weight"]
        w[0, 0], w[0, 1], w[0, 2] = 1.0e6, -3.0e5, 1.0e-30  # two beyond F16's range, one below it

    src = export_to_hf(micro_gguf, tmp_path / "micro-bf16", dtype="BF16", shards=2, tensors_hook=inject)
    assert (src / "model.safetensors.index.json").is_file()
    manifest = convert(str(src), root=tmp_path / "cache")
    assert manifest["f16_conversion"] == {"overflow": 2, "underflow": 1, "source_dtypes": ["BF16"]}
    assert manifest["complete"]
    # Weights survive the trip: BF16-rounded original values, now in F16, in the right (permuted) rows.
    orig = {t.name: t for t in gguf.GGUFReader(micro_gguf).tensors}
    conv = {t.name: t for t in gguf.GGUFReader(ModelDir(tmp_path / "cache", "micro-bf16").tier_path("f16")).tensors}
    for name in ("token_embd.weight", "blk.1.attn_q.weight", "blk.1.attn_k.weight", "output.weight"):
        a = np.asarray(orig[name].data, dtype=np.float32)
        b = np.asarray(conv[name].data, dtype=np.float32)
        np.testing.assert_allclose(b, a, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("arch", ["Qwen2ForCausalLM", "Qwen3ForCausalLM"])
def test_qwen_architectures_match_numpy_forward(arch: str, micro_gguf: Path, tmp_path: Path) -> None:
    """qwen2 (biases, NEOX RoPE, no permutation) and qwen3 (per-head q/k norms) on a micro checkpoint."""
    llama = export_to_hf(micro_gguf, tmp_path / "micro-llama")
    src = llama_to_qwen(llama, tmp_path / f"micro-{arch.lower()}", arch)
    manifest = convert(str(src), root=tmp_path / "cache")
    assert manifest["complete"]
    path = ModelDir(tmp_path / "cache", manifest["name"]).tier_path("f16")
    meta = gguf.GGUFReader(path).fields
    assert meta["general.architecture"].contents() == arch[:5].lower()
    assert meta["tokenizer.ggml.pre"].contents() == "qwen2"
    against_numpy(path, src, hf_llama_logits)


@pytest.mark.parametrize(("arch", "gguf_arch"), [
    ("MistralForCausalLM", "llama"), ("SmolLM3ForCausalLM", "smollm3"), ("GraniteForCausalLM", "granite"),
    ("Phi3ForCausalLM", "phi3")])
def test_llama_like_families_match_numpy_forward(arch: str, gguf_arch: str, demo_gguf: Path, tmp_path: Path) -> None:
    """Mistral (llama, as llama.cpp reads it), SmolLM3 (layer 3 of 4 without RoPE), Granite (its four scales)
    and Phi-3 as Phi-4-mini is (fused projections, 3/4 of each head rotated, LongRoPE) on a 4-layer micro
    checkpoint, against the numpy forward pass of the same safetensors."""
    # llama.cpp's phi3 looks its end-of-turn token up by name: Phi's vocabularies all have `<|end|>`.
    texts = {49151: "<|end|>"} if arch == "Phi3ForCausalLM" else {}
    types = dict.fromkeys(texts, gguf.TokenType.CONTROL)
    micro = write_micro_gguf(tmp_path / "micro4.gguf", demo_gguf, MicroSpec(n_layer=4, seed=21), texts, types)
    src = llama_to_family(export_to_hf(micro, tmp_path / "micro-llama"), tmp_path / f"micro-{arch.lower()}", arch)
    path = tmp_path / "family-f16.gguf"
    plan_hf(src, "micro").write(path)  # the F16 alone: quantized tiers are the same code for every family
    assert gguf.GGUFReader(path).fields["general.architecture"].contents() == gguf_arch
    ids, _, want = against_numpy(path, src, hf_llama_logits)
    if arch != "MistralForCausalLM":  # the family's own part matters: without it the logits differ
        plain = hf_llama_logits(export_to_hf(micro, tmp_path / "plain"), ids)
        assert np.abs(plain - want).max() > 0.05 * np.abs(want).max()


def test_gemma3_matches_numpy_forward(demo_gguf: Path, tmp_path: Path) -> None:
    """Gemma 3's text model on a 6-layer micro checkpoint (five sliding layers with a 4-token window, then a
    global one), against the numpy forward pass of the same safetensors; then the same checkpoint as
    Gemma3ForConditionalGeneration lays it out (text config nested, tensors under model.language_model.,
    a vision tower left out) gives the same file."""
    micro = write_micro_gguf(tmp_path / "micro6.gguf", demo_gguf, MicroSpec(n_layer=6, seed=23))
    src = llama_to_family(export_to_hf(micro, tmp_path / "micro-llama"), tmp_path / "micro-gemma3",
                          "Gemma3ForCausalLM")
    path = tmp_path / "gemma3-f16.gguf"
    plan_hf(src, "micro").write(path)
    meta = gguf.GGUFReader(path).fields
    assert meta["general.architecture"].contents() == "gemma3"
    assert meta["gemma3.attention.sliding_window"].contents() == GEMMA3_WINDOW
    ids, got, want = against_numpy(path, src, hf_gemma3_logits)
    assert len(ids) > 2 * GEMMA3_WINDOW
    # Each of Gemma's parts shows in the logits: without the window or the softcap they differ.
    cfg = json.loads((src / "config.json").read_text())
    for change in ({"sliding_window": 4096}, {"final_logit_softcapping": None}):
        (src / "config.json").write_text(json.dumps(cfg | change))
        assert np.abs(hf_gemma3_logits(src, ids) - want).max() > 0.05 * np.abs(want).max(), change
    (src / "config.json").write_text(json.dumps(cfg))

    multimodal = _as_gemma3_multimodal(src, tmp_path / "micro-gemma3-mm")
    plan_hf(multimodal, "micro").write(tmp_path / "gemma3-mm.gguf")
    np.testing.assert_array_equal(all_logits(tmp_path / "gemma3-mm.gguf", ids), got)


def _as_gemma3_multimodal(src: Path, out: Path) -> Path:
    from safetensors.numpy import load_file, save_file

    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((src / name).read_bytes())
    text = json.loads((src / "config.json").read_text())
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": text | {"architectures": None}, "vision_config": {"hidden_size": 8}}
    (out / "config.json").write_text(json.dumps(config))
    tensors = {"model.language_model." + k[len("model."):]: v for k, v in load_file(src / "model.safetensors").items()}
    tensors["model.vision_tower.vision_model.post_layernorm.weight"] = np.ones(8, dtype=np.float16)
    tensors["model.multi_modal_projector.mm_input_projection_weight"] = np.ones((8, 4), dtype=np.float16)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def test_the_models_recommended_sampling_reaches_every_tier(converted_hf: ModelDir, demo_model: ModelDir) -> None:
    for tier in ("f16", "q4_k_m"):
        with LlamaBackend(converted_hf.tier_path(tier), LoadOptions(n_ctx=64)) as b:
            params = recommended(b.metadata())
        assert (params.temperature, params.top_p, params.top_k) == pytest.approx((0.7, 0.8, 20))
        assert params.repeat_penalty == pytest.approx(1.05) and params.min_p == pytest.approx(0.05)  # llama.cpp's
    with LlamaBackend(demo_model.tier_path("f16"), LoadOptions(n_ctx=64)) as b:  # recommends nothing
        params = recommended(b.metadata())
    assert (params.temperature, params.top_k, params.top_p, params.min_p) == pytest.approx((0.8, 40, 0.95, 0.05))
