"""The demo model through the converter: three verified tiers, idempotent reruns, repair, cancel and kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gguf
import pytest

from converters.convert import ConvertProgress, convert
from converters.gguf_to_f16 import ArrayLength, check_layout
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.errors import Cancelled
from runtime.models.cache import DEMO_NAME, TIERS, ModelDir, sha256_file
from tests.conftest import REPO, copy_of_demo, run_cli, run_cli_here


def greedy(path: Path, prompt: str, n: int = 8) -> str:
    with LlamaBackend(path, LoadOptions(n_ctx=256)) as b:
        tokens = b.tokenize(prompt)
        out = []
        logits = b.decode(tokens, [len(tokens) - 1])[0]
        for _ in range(n):
            tok = int(logits.argmax())
            out.append(tok)
            logits = b.decode([tok], [0])[0]
        return b.detokenize(out)


def copy_model(src: ModelDir, root: Path, own: tuple[str, ...] = ()) -> ModelDir:
    """The session's demo in `root`: its tiers hard links, but for those in `own` (damaged in place below)."""
    copy_of_demo(src, root, own)
    return ModelDir(root, src.name)


def test_demo_tiers_are_verified_and_answer(demo_model: ModelDir) -> None:
    manifest = demo_model.read_manifest()
    assert manifest is not None and manifest["complete"]
    assert manifest["reconstructed"] is True
    assert manifest["source"]["kind"] == "demo"
    for tier in TIERS:
        rec = manifest["tiers"][tier]
        path = demo_model.tier_path(tier)
        assert path.stat().st_size == rec["bytes"]
        assert sha256_file(path) == rec["sha256"]
    assert set(manifest["tiers"]["f16"]["tensor_types"]) == {"F16", "F32"}
    assert set(manifest["tiers"]["q8_0"]["tensor_types"]) == {"Q8_0", "F32"}
    q4 = manifest["tiers"]["q4_k_m"]
    assert "Q4_K" in q4["tensor_types"]
    # Hidden size 576 is not a multiple of 256: most matrices fall back to other types, and we count them.
    assert q4["fallbacks"] > 100
    assert q4["bytes"] < manifest["tiers"]["q8_0"]["bytes"] < manifest["tiers"]["f16"]["bytes"]
    for tier in ("f16", "q8_0"):
        assert "Paris" in greedy(demo_model.tier_path(tier), "The capital of France is")
    assert greedy(demo_model.tier_path("q4_k_m"), "The capital of France is").strip()


def test_convert_json_then_rerun_touches_nothing(demo_model: ModelDir, isolated_cache: Path) -> None:
    model = copy_model(demo_model, isolated_cache)
    before = {t: model.tier_path(t).stat() for t in TIERS}
    result = run_cli("convert", "demo", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["name"] == DEMO_NAME and out["source"] == "demo" and out["reconstructed"] is True
    assert [t["tier"] for t in out["tiers"]] == list(TIERS)
    for row in out["tiers"]:
        assert set(row) >= {"tier", "path", "sha256", "bytes", "tensor_types"}
        assert Path(row["path"]) == model.tier_path(row["tier"])
        st = model.tier_path(row["tier"]).stat()
        assert (st.st_ino, st.st_mtime_ns) == (before[row["tier"]].st_ino, before[row["tier"]].st_mtime_ns)
    # The same tiers: the saved quality figures (runtime.plan.quality), not a new measure.
    assert out["quality"] == json.loads((model.path / "quality.json").read_text()) and "measuring" not in result.stderr

    # `list` in this process (run_cli_here): the same output without two more interpreter starts.
    listed = json.loads(run_cli_here("list", "--json").stdout)
    [entry] = listed["models"]
    assert entry["name"] == DEMO_NAME and entry["complete"] and entry["reconstructed"]
    assert entry["tiers"][2]["fallbacks"] > 0
    plain = run_cli_here("list").stdout
    assert "reconstructed" in plain and "fallback" in plain


@pytest.mark.slow
def test_damaged_tier_is_rebuilt(demo_model: ModelDir, isolated_cache: Path) -> None:
    model = copy_model(demo_model, isolated_cache, own=("q8_0",))
    good = model.read_manifest()["tiers"]["q8_0"]["sha256"]
    f16_ino = model.tier_path("f16").stat().st_ino
    with open(model.tier_path("q8_0"), "r+b") as f:
        f.seek(50_000_000)
        byte = f.read(1)
        f.seek(50_000_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    manifest = convert("demo")
    assert manifest["complete"]
    assert sha256_file(model.tier_path("q8_0")) == manifest["tiers"]["q8_0"]["sha256"] == good
    assert model.tier_path("f16").stat().st_ino == f16_ino  # the intact tier was kept


@pytest.mark.parametrize("stage", ["f16", "q8_0"])
@pytest.mark.slow
def test_cancel_leaves_no_tier_and_next_run_completes(stage: str, isolated_cache: Path) -> None:
    cancel = threading.Event()
    seen: list[ConvertProgress] = []

    def on_progress(p: ConvertProgress) -> None:
        seen.append(p)
        if p.stage == stage and p.done > 0:
            cancel.set()

    with pytest.raises(Cancelled):
        convert("demo", on_progress=on_progress, cancel=cancel)
    assert any(p.stage == stage and p.done > 0 for p in seen)  # it really was mid-way
    model = ModelDir(isolated_cache, DEMO_NAME)
    assert not model.path.exists() or not list(model.path.glob("*.gguf*"))
    manifest = convert("demo")
    assert manifest["complete"] and all(model.tier_path(t).is_file() for t in TIERS)


@pytest.mark.slow
def test_kill_mid_conversion_is_repaired(isolated_cache: Path) -> None:
    model = ModelDir(isolated_cache, DEMO_NAME)
    proc = subprocess.Popen(
        [sys.executable, "-m", "commands", "convert", "demo"],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not model.partial_path("q8_0").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "conversion ended before q8_0 started"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert model.tier_path("f16").is_file() and not model.tier_path("q8_0").exists()
    f16_ino = model.tier_path("f16").stat().st_ino

    manifest = convert("demo")
    assert manifest["complete"]
    assert model.tier_path("f16").stat().st_ino == f16_ino
    assert not list(model.path.glob("*.partial"))
    for tier in TIERS:
        assert sha256_file(model.tier_path(tier)) == manifest["tiers"][tier]["sha256"]


@pytest.mark.parametrize("tier", TIERS)
def test_the_header_walk_reads_what_ggufs_reader_reads(demo_model: ModelDir, tier: str) -> None:
    """Tiers are checked from `check_layout`'s walk (gguf's reader takes seconds on a large vocabulary): it
    must agree with the library on every tensor and every metadata value."""
    path = demo_model.tier_path(tier)
    layout, reader = check_layout(path), gguf.GGUFReader(path)
    assert [(t.name, t.shape, t.type) for t in layout.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), t.tensor_type) for t in reader.tensors
    ]
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's own entries for the header's counts
            continue
        ours = layout.metadata[key]
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            assert ours == ArrayLength(len(field.data)), key
        else:
            assert ours == field.contents(), key
    assert set(layout.metadata) == {k for k in reader.fields if not k.startswith("GGUF.")}
