"""Bad input: exit 2, one stderr line naming the problem, no traceback, nothing left in the cache. The cases run
`specquant convert` in this process (`run_cli_here`: a child each would start an interpreter); those that need
their own environment run it in a child, as a user does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from converters.gguf_to_f16 import plan_gguf
from runtime.errors import UserError
from tests.conftest import assert_one_line_error, run_cli, run_cli_here


def cache_is_empty(root: Path) -> bool:
    return not root.exists() or not any(root.iterdir())


def hf_copy(micro_hf: Path, dest: Path, own: tuple[str, ...] = ()) -> Path:
    """The session's micro checkpoint in `dest` to change: config and tokenizer copied, the weights hard links
    (read only) unless named in `own` (written below)."""
    dest.mkdir()
    for src in micro_hf.iterdir():
        if src.suffix == ".safetensors" and src.name not in own:
            try:
                os.link(src, dest / src.name)
                continue
            except OSError:  # a file system without hard links
                pass
        shutil.copy2(src, dest / src.name)
    return dest


def test_missing_path(isolated_cache: Path) -> None:
    assert_one_line_error(run_cli_here("convert", "no/such/model.gguf"), "no/such/model.gguf", "no such file")
    assert cache_is_empty(isolated_cache)


def test_directory_without_config(tmp_path: Path, isolated_cache: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run_cli_here("convert", str(tmp_path / "empty")), "config.json is missing")
    assert cache_is_empty(isolated_cache)


def test_unsupported_architecture(micro_hf: Path, tmp_path: Path, isolated_cache: Path) -> None:
    d = hf_copy(micro_hf, tmp_path / "mamba")
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run_cli_here("convert", str(d)), "unsupported architecture MambaForCausalLM",
                          "supported: LlamaForCausalLM, Qwen2ForCausalLM", "Phi3ForCausalLM", "Gemma3ForCausalLM")
    assert cache_is_empty(isolated_cache)


@pytest.mark.parametrize(("change", "needle"), [
    ({"rope_local_base_freq": 20000.0}, "'rope_local_base_freq' is 20000.0"),
    ({"query_pre_attn_scalar": 100}, "'query_pre_attn_scalar' 100 differs"),
    ({"sliding_window_pattern": 2}, "every 6th one global"),
    ({"attn_logit_softcapping": 50.0}, "'attn_logit_softcapping' is set"),
])
def test_gemma3_config_llama_cpp_would_run_differently(micro_hf: Path, tmp_path: Path, change: dict,
                                                       needle: str) -> None:
    """llama.cpp's gemma3 fixes the layer pattern, the local RoPE base and the query scale: a config that
    differs is refused by name rather than converted into a model that answers wrongly."""
    d = hf_copy(micro_hf, tmp_path / "gemma3")
    cfg = json.loads((d / "config.json").read_text())
    cfg |= {"architectures": ["Gemma3ForCausalLM"], "head_dim": 64, "query_pre_attn_scalar": 64, **change}
    (d / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run_cli_here("convert", str(d)), "config.json", needle)


def test_a_damaged_sentencepiece_model_is_named(micro_hf: Path, tmp_path: Path, isolated_cache: Path) -> None:
    d = hf_copy(micro_hf, tmp_path / "tinyllama")
    (d / "tokenizer.json").unlink()
    (d / "tokenizer.model").write_bytes(b"\x0a\x0bsentencepiece")
    assert_one_line_error(run_cli_here("convert", str(d)), "tokenizer.model: not a SentencePiece model")
    assert cache_is_empty(isolated_cache)


def test_metaspace_tokenizer_json_is_sentencepiece(micro_hf: Path, tmp_path: Path) -> None:
    d = hf_copy(micro_hf, tmp_path / "llama2")
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}
    (d / "tokenizer.json").write_text(json.dumps(tok))
    assert_one_line_error(run_cli_here("convert", str(d)), "SentencePiece")


def test_unknown_pre_tokenizer_is_refused_by_name(micro_hf: Path, tmp_path: Path) -> None:
    d = hf_copy(micro_hf, tmp_path / "odd")
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Whitespace"}
    (d / "tokenizer.json").write_text(json.dumps(tok))
    assert_one_line_error(run_cli_here("convert", str(d)), "unknown pre-tokenizer (Whitespace)")


def test_pickle_checkpoint_is_refused(micro_hf: Path, tmp_path: Path, isolated_cache: Path) -> None:
    d = tmp_path / "pickled"
    d.mkdir()
    shutil.copy(micro_hf / "config.json", d)
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04\x95pickle")
    assert_one_line_error(run_cli_here("convert", str(d)), "pytorch_model.bin", "pickled")
    assert_one_line_error(run_cli_here("convert", str(d / "pytorch_model.bin")), "pickled")
    assert cache_is_empty(isolated_cache)


def test_truncated_safetensors(micro_hf: Path, tmp_path: Path, isolated_cache: Path) -> None:
    d = hf_copy(micro_hf, tmp_path / "trunc", own=("model.safetensors",))
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    assert_one_line_error(run_cli_here("convert", str(d)), "model.safetensors", "truncated")
    assert cache_is_empty(isolated_cache)


def test_garbage_safetensors(micro_hf: Path, tmp_path: Path, isolated_cache: Path) -> None:
    d = hf_copy(micro_hf, tmp_path / "garbage", own=("model.safetensors",))
    (d / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(4096))
    assert_one_line_error(run_cli_here("convert", str(d)), "model.safetensors", "not a safetensors file")
    assert cache_is_empty(isolated_cache)


def test_truncated_gguf(micro_gguf: Path, tmp_path: Path, isolated_cache: Path) -> None:
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(micro_gguf.read_bytes()[:3_000_000])
    assert_one_line_error(run_cli_here("convert", str(bad)), "cut.gguf")
    assert cache_is_empty(isolated_cache)


@pytest.mark.slow
def test_quantized_gguf_needs_allow_requant(demo_gguf: Path, isolated_cache: Path) -> None:
    assert_one_line_error(run_cli("convert", str(demo_gguf)), "Q4_1", "--allow-requant")
    assert cache_is_empty(isolated_cache)


def test_bad_model_name(micro_gguf: Path) -> None:
    assert_one_line_error(run_cli_here("convert", str(micro_gguf), "--name", "../escape"), "invalid model name")


def test_cache_under_a_regular_file(micro_gguf: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    result = run_cli("convert", str(micro_gguf), env={"SPECQUANT_CACHE_DIR": str(blocker / "models")})
    assert_one_line_error(result, "cannot create cache directory", "blocker")
    assert blocker.read_text() == "not a directory"


def test_offline_repo_id_not_cached(tmp_path: Path, isolated_cache: Path) -> None:
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    assert_one_line_error(run_cli("convert", "someorg/some-model", env=env), "someorg/some-model", "offline")
    assert cache_is_empty(isolated_cache)


@pytest.mark.slow
def test_full_disk_while_writing_is_one_clear_error(micro_gguf: Path) -> None:
    plan = plan_gguf(micro_gguf)
    with pytest.raises(UserError, match="disk full while writing /dev/full"):
        plan.write(Path("/dev/full"))


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 40 MB tmpfs: a real filesystem that fills up. Needs root and mount rights."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount rights)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_is_refused_before_writing(micro_gguf: Path, small_fs: Path) -> None:
    root = small_fs / "models"
    result = run_cli("convert", str(micro_gguf), env={"SPECQUANT_CACHE_DIR": str(root)})
    assert_one_line_error(result, "not enough disk space", "GB free")
    assert cache_is_empty(root)
