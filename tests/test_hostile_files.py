"""Hostile and broken input files (#30): each is one line naming the file and the value at fault, exit 2 from
`specquant convert`, never a traceback, and nothing left in the model cache. The files are real bytes: a
safetensors header written by hand (its layout is simple), GGUFs written by gguf's own writer and then damaged
at one field. Also model names, deleting linked model folders, and an interrupted conversion."""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from commands import main as cli
from converters.convert import ConvertProgress, convert
from runtime.errors import UserError
from runtime.models.cache import ModelDir, check_name, delete_model, fsync_file, list_models
from tests.conftest import assert_one_line_error, run_cli

# A one-layer llama config: small enough that every case below is a few kilobytes.
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 16,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
}
EMBED = "model.embed_tokens.weight"


def safetensors(tensors: dict[str, object], data: bytes = b"", header_length: int | None = None) -> bytes:
    """A safetensors file: 8-byte little-endian header length, JSON header, data. `header_length` lies."""
    head = json.dumps(tensors).encode()
    return struct.pack("<Q", len(head) if header_length is None else header_length) + head + data


def embed_entry(shape: object = None, offsets: object = None, dtype: str = "F16") -> dict[str, object]:
    """The header entry of a 16 x 64 F16 embedding at offset 0, unless told otherwise."""
    return {
        "dtype": dtype,
        "shape": [16, 64] if shape is None else shape,
        "data_offsets": [0, 2048] if offsets is None else offsets,
    }


GOOD_SHARD = safetensors({EMBED: embed_entry()}, bytes(2048))


def hf_dir(root: Path, config: dict[str, object] | None = None, shard: bytes = GOOD_SHARD) -> Path:
    d = root / "hostile-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**CONFIG, **(config or {})}))
    (d / "model.safetensors").write_bytes(shard)
    return d


def convert_cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """`specquant convert ARGS` in this process (a child per case would cost a second each): exit code and the
    non-empty stderr lines."""
    code = cli.main(["convert", *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.strip()]


def assert_refused(cache: Path, code: int, lines: list[str], *needles: str) -> None:
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("specquant: error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not cache.exists() or not any(cache.iterdir()), list(cache.iterdir())


# --- safetensors ----------------------------------------------------------------------------------------


def embed(data: bytes = bytes(2048), **entry: object) -> bytes:
    """A shard holding only the embedding, with `entry` overriding its header fields."""
    return safetensors({EMBED: embed_entry(**entry)}, data)  # type: ignore[arg-type]


SAFETENSORS_CASES: dict[str, tuple[bytes, list[str]]] = {
    "negative shape": (embed(shape=[-1, 64]), ["invalid shape [-1, 64]"]),
    "float shape": (embed(shape=[16.0, 64]), ["invalid shape [16.0, 64]"]),
    "string shape": (embed(shape=["16", 64]), ["invalid shape ['16', 64]"]),
    "bool shape": (embed(shape=[True, 64]), ["invalid shape [True, 64]"]),
    # 2^32 x 2^32 F16 values are 2^65 bytes, 0 once wrapped in int64: it must not pass as an empty tensor.
    "shape wraps int64": (embed(b"", shape=[2**32, 2**32], offsets=[0, 0]), ["needs 36893488147419103232 bytes"]),
    "zero-sized dim": (embed(b"", shape=[0, 64], offsets=[0, 0]), ["zero-sized dimension", "[0, 64]"]),
    "negative offset": (embed(offsets=[-2048, 0]), ["lies outside the file", "-2048"]),
    "offset past the end": (embed(offsets=[0, 10**20]), ["lies outside the file", str(10**20)]),
    "string offset": (embed(offsets=[0, "2048"]), ["invalid data_offsets [0, '2048']"]),
    "offsets too short": (embed(offsets=[0, 1024]), ["needs 2048 bytes", "hold 1024"]),
    "entry not an object": (safetensors({EMBED: 5}, bytes(2048)), [f"malformed header entry for tensor {EMBED!r}"]),
    "unsupported dtype": (embed(dtype="I64"), ["is I64; only F16, BF16 and F32"]),
    "header over 100 MB": (safetensors({}, header_length=200 * 2**20), ["header length 209715200 bytes is over 100"]),
    "header past the end": (safetensors({}, header_length=10**6), ["header length 1000000 bytes, file"]),
    # Nesting deep enough to exhaust the JSON parser's recursion.
    "deeply nested JSON": (struct.pack("<Q", 100_000) + b"[" * 100_000, ["header is not JSON"]),
    "header is a list": (safetensors([1, 2]), ["header is not a table"]),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", SAFETENSORS_CASES)
def test_hostile_safetensors_header(
    case: str, tmp_path: Path, isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard, needles = SAFETENSORS_CASES[case]
    d = hf_dir(tmp_path, shard=shard)
    code, lines = convert_cli(str(d), capsys=capsys)
    assert_refused(isolated_cache, code, lines, "model.safetensors", *needles)


def test_hostile_safetensors_through_the_real_command(tmp_path: Path, isolated_cache: Path) -> None:
    """The same refusal from a `specquant` child process, as a user runs it."""
    d = hf_dir(tmp_path, shard=safetensors({EMBED: embed_entry(shape=[-16, 64])}, bytes(2048)))
    assert_one_line_error(run_cli("convert", str(d)), str(d / "model.safetensors"), "invalid shape [-16, 64]")
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())


def test_a_tensor_in_two_shards_is_refused(tmp_path: Path, isolated_cache: Path, capsys) -> None:
    d = hf_dir(tmp_path)
    (d / "model-2.safetensors").write_bytes(GOOD_SHARD)
    code, lines = convert_cli(str(d), capsys=capsys)
    assert_refused(isolated_cache, code, lines, "model.safetensors", f"tensor {EMBED!r} is also in")


# --- config.json ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"num_attention_heads": 0}, "'num_attention_heads' is 0; it must be a whole number from 1"),
        ({"num_attention_heads": -4}, "'num_attention_heads' is -4"),
        ({"num_attention_heads": 4.5}, "'num_attention_heads' is 4.5"),
        ({"num_attention_heads": "4"}, "'num_attention_heads' is '4'"),
        ({"num_attention_heads": True}, "'num_attention_heads' is True"),
        ({"num_hidden_layers": 0}, "'num_hidden_layers' is 0"),
        ({"hidden_size": 2**40}, f"'hidden_size' is {2**40}"),
        ({"vocab_size": None}, "'vocab_size' is missing"),
        ({"num_key_value_heads": 0}, "'num_key_value_heads' is 0"),
        ({"head_dim": -64}, "'head_dim' is -64"),
        ({"num_key_value_heads": 3}, "'num_attention_heads' 4 is not a multiple of 'num_key_value_heads' 3"),
        ({"num_attention_heads": 3, "num_key_value_heads": 1}, "'hidden_size' 64 is not a multiple"),
        ({"rms_norm_eps": "tiny"}, "'rms_norm_eps' is 'tiny'; it must be a positive number"),
        ({"rope_theta": float("nan")}, "'rope_theta' is nan"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 0}}, "'rope_scaling.factor' is 0"),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling type 'dynamic' is not supported"),
        ({"rope_scaling": "fast"}, "'rope_scaling' must be an object"),
        # Bounded by the data: a vocabulary the embedding does not have (and that would be padded to in memory).
        ({"vocab_size": 2**31 - 1}, f"'vocab_size' {2**31 - 1} does not match {EMBED} of shape [16, 64]"),
    ],
)
def test_hostile_config(
    change: dict[str, object], needle: str, tmp_path: Path, isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = hf_dir(tmp_path, change)
    code, lines = convert_cli(str(d), capsys=capsys)
    assert_refused(isolated_cache, code, lines, "config.json", needle)


def test_head_count_that_does_not_match_the_weights(tmp_path: Path, isolated_cache: Path, capsys) -> None:
    """Q rows must be heads x head size (the Q/K permutation reshapes by them)."""
    q = "model.layers.0.self_attn.q_proj.weight"
    tensors = {EMBED: embed_entry(), q: embed_entry(shape=[60, 64], offsets=[2048, 2048 + 7680])}
    d = hf_dir(tmp_path, shard=safetensors(tensors, bytes(2048 + 7680)))
    code, lines = convert_cli(str(d), capsys=capsys)
    assert_refused(isolated_cache, code, lines, "config.json", f"4 heads of size 16 do not match tensor {q!r}")


# A whole (if tiny) checkpoint that gets past every check: a 4 x 2 embedding, one layer of one head of size 2,
# and a byte-level BPE tokenizer of 4 tokens. The cases below bend config.json or drop a tensor.
TINY_CONFIG = {**CONFIG, "hidden_size": 2, "num_attention_heads": 1, "num_key_value_heads": 1, "vocab_size": 4}
Q, K = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight"
TINY_TENSORS = {EMBED: [4, 2], Q: [2, 2], K: [2, 2]}
TINY_TOKENIZER = {
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3}, "merges": ["a b"]},
}


def tiny_hf_dir(root: Path, config: dict[str, object], tensors: dict[str, list[int]] | None = None) -> Path:
    """TINY_CONFIG updated by `config`, with `tensors` (name -> shape, F16 zeros; TINY_TENSORS unless told)."""
    header, offset = {}, 0
    for name, shape in (TINY_TENSORS if tensors is None else tensors).items():
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    d = hf_dir(root, shard=safetensors(header, bytes(offset)))
    (d / "config.json").write_text(json.dumps({**TINY_CONFIG, **config}))
    (d / "tokenizer.json").write_text(json.dumps(TINY_TOKENIZER))
    return d


def without(name: str) -> dict[str, list[int]]:
    return {k: v for k, v in TINY_TENSORS.items() if k != name}


# config.json sizes the old converter looped or allocated by before it read a tensor: each is now bounded by
# the tensors present, and refused in milliseconds instead of growing past gigabytes.
HUGE = 2**31 - 1
SIZED_BY_CONFIG = {
    # gguf's tensor name table, built for every layer: past 1.3 GB in 40 s (issue #40).
    "num_hidden_layers": (
        {"num_hidden_layers": HUGE},
        None,
        ["config.json", f"'num_hidden_layers' {HUGE} does not match the checkpoint", "tensors for layers 0"],
    ),
    # The token list padded to vocab_size: a MemoryError (issue #40).
    "vocab_size without an embedding": (
        {"vocab_size": HUGE},
        without(EMBED),
        [f"no tensor {EMBED!r} in the checkpoint", f"'vocab_size' is {HUGE}"],
    ),
    # Llama 3 rope factors, one per pair of head dimensions: 4 GB of float64 and a Python loop of 2^29 steps.
    "head_dim": (
        {"head_dim": 2**30, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        None,
        ["config.json", f"1 heads of size {2**30} do not match tensor {Q!r} of shape [2, 2]"],
    ),
}
_CHILD_MEMORY = 2 * 2**30  # bytes of address space: the old converter ran out of it, or of time, on each case
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # no per-core BLAS buffers in that space


@pytest.mark.parametrize("case", SIZED_BY_CONFIG)
def test_config_sizes_are_bounded_by_the_tensors_present(case: str, tmp_path: Path, isolated_cache: Path) -> None:
    """Issue #40: `specquant convert` of a tiny checkpoint whose config.json claims 2^31 - 1 layers (or vocabulary
    entries, or head size) answers one line, quickly, in 2 GB of address space."""
    change, tensors, needles = SIZED_BY_CONFIG[case]
    d = tiny_hf_dir(tmp_path, change, tensors)
    start = time.monotonic()
    try:
        result = run_cli("convert", str(d), env=_ONE_THREAD, timeout=30, memory=_CHILD_MEMORY)
    except subprocess.TimeoutExpired:
        pytest.fail(f"specquant convert was still running after 30 s on config.json {change}")
    assert_one_line_error(result, str(d), *needles)
    assert time.monotonic() - start < 30
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())


@pytest.mark.parametrize(
    ("config", "tensors", "needles"),
    [
        ({"num_hidden_layers": 2}, None, ["config.json", "'num_hidden_layers' 2 does not match", "for layers 0"]),
        (
            {"num_hidden_layers": 2},
            {**TINY_TENSORS, "model.layers.2.self_attn.q_proj.weight": [2, 2]},
            ["'num_hidden_layers' 2 does not match the checkpoint, which has tensors for layers 0, 2"],
        ),
        ({}, {EMBED: [4, 2]}, ["'num_hidden_layers' 1 does not match the checkpoint, which has no model.layers.N"]),
        ({"vocab_size": 5}, None, ["config.json", f"'vocab_size' 5 does not match {EMBED} of shape [4, 2]"]),
        ({"hidden_size": 4}, None, ["config.json", f"'hidden_size' 4 does not match {EMBED} of shape [4, 2]"]),
        ({}, {**TINY_TENSORS, "lm_head.weight": [5, 2]}, ["'vocab_size' 4 does not match lm_head.weight of shape"]),
        ({}, without(Q), [f"no tensor {Q!r} in the checkpoint"]),
        ({}, without(K), [f"no tensor {K!r} in the checkpoint"]),
        (
            {"num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 2},
            None,
            [f"2 heads of size 2 do not match tensor {Q!r} of shape [2, 2]"],
        ),
    ],
)
def test_config_must_match_the_tensors_present(
    config: dict[str, object],
    tensors: dict[str, list[int]] | None,
    needles: list[str],
    tmp_path: Path,
    isolated_cache: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    d = tiny_hf_dir(tmp_path, config, tensors)
    code, lines = convert_cli(str(d), capsys=capsys)
    assert_refused(isolated_cache, code, lines, str(d), *needles)


def test_the_tiny_checkpoint_gets_past_the_checks(tmp_path: Path) -> None:
    """The cases above fail for the size or tensor they change, not because the checkpoint was never valid."""
    from converters.hf_to_gguf import plan_hf

    plan = plan_hf(tiny_hf_dir(tmp_path, {}), "tiny")
    assert [t.name for t in plan.tensors] == ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight"]


@pytest.mark.parametrize(
    "shard", ["../elsewhere/model.safetensors", "/etc/passwd", "sub/model.safetensors", "..", "C:model.safetensors"]
)
def test_weight_map_may_name_only_files_in_the_model_folder(
    shard: str, tmp_path: Path, isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = hf_dir(tmp_path)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {EMBED: shard}}))
    code, lines = convert_cli(str(d), capsys=capsys)
    assert_refused(isolated_cache, code, lines, "model.safetensors.index.json", f"names shard {shard!r}")


def test_weight_map_backslash_is_refused(tmp_path: Path, isolated_cache: Path, capsys) -> None:
    d = hf_dir(tmp_path)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {EMBED: "..\\x.safetensors"}}))
    code, lines = convert_cli(str(d), capsys=capsys)
    assert_refused(isolated_cache, code, lines, "a shard must be a plain *.safetensors file name")


# --- GGUF -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A small, valid F16 llama GGUF from gguf's own writer: the cases below damage one field of it."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny")
    w.add_token_list(["a", "b", "c", "d"])
    w.add_array("tiny.ids", [1, 2, 3])
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float16))
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def patch(data: bytes, after: bytes, skip: int, fmt: str, value: int) -> bytes:
    """`data` with the field `skip` bytes after the first `after` replaced by `value` (struct format `fmt`)."""
    at = data.index(after) + len(after) + skip
    return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt) :]


# After a metadata key: type (u32); a string's length (u64); an array's item type (u32) and length (u64).
# After a tensor name: dimension count (u32), dimensions (u64 each), type (u32), offset (u64).
GGUF_CASES = {
    "string array of 2^60 items": (
        lambda d: patch(d, b"tokenizer.ggml.tokens", 8, "<Q", 2**60),
        "metadata array 'tokenizer.ggml.tokens' claims 1152921504606846976 items",
    ),
    "number array of 2^60 items": (
        lambda d: patch(d, b"tiny.ids", 8, "<Q", 2**60),
        "metadata array 'tiny.ids' claims 1152921504606846976 items",
    ),
    "string longer than the file": (
        lambda d: patch(d, b"general.name", 4, "<Q", 10**12),
        "metadata 'general.name' claims 1000000000000 bytes",
    ),
    "2^60 metadata keys": (lambda d: patch(d, b"GGUF", 12, "<Q", 2**60), "the metadata table claims"),
    "2^60 tensors": (lambda d: patch(d, b"GGUF", 4, "<Q", 2**60), "the tensor table claims"),
    "unknown value type": (
        lambda d: patch(d, b"general.name", 0, "<I", 99),
        "metadata 'general.name' has unknown type 99",
    ),
    "zero-sized dimension": (
        lambda d: patch(d, b"token_embd.weight", 4, "<Q", 0),
        "tensor 'token_embd.weight' has a zero-sized dimension",
    ),
    "too many dimensions": (
        lambda d: patch(d, b"token_embd.weight", 0, "<I", 2**31),
        "tensor 'token_embd.weight' has 2147483648 dimensions",
    ),
    "unknown tensor type": (
        lambda d: patch(d, b"token_embd.weight", 4 + 16, "<I", 999),
        "tensor 'token_embd.weight' has unknown type 999",
    ),
    "tensor beyond the end": (
        lambda d: patch(d, b"token_embd.weight", 4 + 16 + 4, "<Q", 2**40),
        "tensor 'token_embd.weight' lies outside the file",
    ),
    "huge shape": (
        lambda d: patch(d, b"token_embd.weight", 4, "<Q", 2**62),
        "tensor 'token_embd.weight' lies outside the file",
    ),
    "bad version": (lambda d: patch(d, b"GGUF", 0, "<I", 7), "GGUF version 7 is not supported"),
}


@pytest.mark.parametrize("case", GGUF_CASES)
def test_hostile_gguf(
    case: str, tiny_gguf: bytes, tmp_path: Path, isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, needle = GGUF_CASES[case]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(damage(tiny_gguf))
    code, lines = convert_cli(str(path), capsys=capsys)
    assert_refused(isolated_cache, code, lines, str(path), needle)


def test_hostile_gguf_through_the_real_command(tiny_gguf: bytes, tmp_path: Path, isolated_cache: Path) -> None:
    """A 2^60-item array used to send gguf's reader into a loop that never ended; now one line, at once."""
    path = tmp_path / "endless.gguf"
    path.write_bytes(patch(tiny_gguf, b"tokenizer.ggml.tokens", 8, "<Q", 2**60))
    result = run_cli("convert", str(path), timeout=60)
    assert_one_line_error(result, str(path), "claims 1152921504606846976 items, more than the file could hold")
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())


def test_the_undamaged_tiny_gguf_gets_past_the_checks(tiny_gguf: bytes, tmp_path: Path) -> None:
    """The cases above fail for the field they damage, not because the file was never valid."""
    from converters.gguf_to_f16 import plan_gguf

    path = tmp_path / "tiny.gguf"
    path.write_bytes(tiny_gguf)
    assert [t.name for t in plan_gguf(path).tensors] == ["token_embd.weight"]


# --- model names, deleting, interrupting ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["abc\n", "con", "con.txt", "nul", "aux", "prn.gguf", "com1", "lpt9", "lpt9.tar.gz", "name.", "a\nb"]
)
def test_names_refused(name: str) -> None:
    with pytest.raises(UserError, match="invalid model name") as e:
        check_name(name)
    assert "\n" not in str(e.value).replace(repr(name), "")


@pytest.mark.parametrize("name", ["console", "com10", "lpt0", "nul-model", "auxiliary.v2", "con-1.5b"])
def test_names_that_only_look_reserved_are_fine(name: str) -> None:
    assert check_name(name) == name


def test_a_reserved_name_from_the_command_line(tmp_path: Path, isolated_cache: Path, capsys) -> None:
    source = tmp_path / "any.gguf"
    source.write_bytes(b"GGUF")
    code, lines = convert_cli(str(source), "--name", "con.txt", capsys=capsys)
    assert_refused(isolated_cache, code, lines, "invalid model name 'con.txt'", "reserved device name on Windows")


def test_deleting_a_linked_model_folder_removes_the_link_only(tmp_path: Path, isolated_cache: Path) -> None:
    target = tmp_path / "elsewhere" / "big-model"
    target.mkdir(parents=True)
    (target / "f16.gguf").write_bytes(b"weights")
    (target / "manifest.json").write_text("{}")
    (target / "notes.txt").write_text("keep me")
    isolated_cache.mkdir()
    (isolated_cache / "linked").symlink_to(target, target_is_directory=True)
    assert [m.name for m in list_models(isolated_cache)] == ["linked"]
    delete_model(isolated_cache, "linked")
    assert not (isolated_cache / "linked").exists() and not (isolated_cache / "linked").is_symlink()
    assert sorted(p.name for p in target.iterdir()) == ["f16.gguf", "manifest.json", "notes.txt"]


def test_deleting_a_model_leaves_what_its_links_point_at(tmp_path: Path, isolated_cache: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    model = isolated_cache / "mine"
    model.mkdir(parents=True)
    (model / "f16.gguf").write_bytes(b"weights")
    (model / "dir-link").symlink_to(outside, target_is_directory=True)
    (model / "file-link").symlink_to(outside / "precious.txt")
    delete_model(isolated_cache, "mine")
    assert not model.exists()
    assert (outside / "precious.txt").read_text() == "keep me"


def test_fsync_file(tmp_path: Path) -> None:
    f = tmp_path / "tier.gguf.partial"
    f.write_bytes(b"x" * 4096)
    fsync_file(f)
    with pytest.raises(UserError, match="cannot write"):
        fsync_file(tmp_path / "missing")


def test_ctrl_c_mid_conversion_leaves_no_model_folder(tiny_gguf: bytes, tmp_path: Path, isolated_cache: Path) -> None:
    """Ctrl-C (KeyboardInterrupt) while the F16 tier is written: the new model's folder and its partial files are
    removed (while the cache lock is still held), and the interrupt goes on to the caller."""
    source = tmp_path / "tiny.gguf"
    source.write_bytes(tiny_gguf)
    seen: list[ConvertProgress] = []

    def on_progress(p: ConvertProgress) -> None:
        seen.append(p)
        if p.stage == "f16" and p.done > 0:
            assert ModelDir(isolated_cache, "tiny").partial_path("f16").is_file()  # really mid-way
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert(str(source), on_progress=on_progress)
    assert any(p.stage == "f16" and p.done > 0 for p in seen)
    assert not isolated_cache.exists() or not any(isolated_cache.iterdir())
