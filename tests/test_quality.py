"""What precision buys (issue #61): each tier against F16 on the shipped reference text, llama.cpp's
--kl-divergence method, cached beside the tiers, shown by `info`, `list`, `convert` and the Models dialog."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan import quality
from tests.conftest import run_cli, run_cli_here


def test_f16_agrees_with_itself_and_q4_k_m_agrees_less_than_q8_0(demo_model: ModelDir) -> None:
    figures = quality.cached(demo_model)  # measured once for the session (tests/conftest.py), as convert does
    assert figures is not None
    tiers = figures["tiers"]
    assert set(tiers) == {"f16", "q8_0", "q4_k_m"}
    # F16 read twice gives the same logits: the method's own check (F16 is kept as 16-bit log-probabilities).
    assert tiers["f16"]["top1"] == 1.0 and abs(tiers["f16"]["kl_mean"]) < 1e-3
    assert abs(tiers["f16"]["ppl_ratio"] - 1) < 1e-3
    assert tiers["q4_k_m"]["top1"] < tiers["q8_0"]["top1"] <= 1.0
    assert tiers["q4_k_m"]["kl_mean"] > tiers["q8_0"]["kl_mean"] > 0
    assert tiers["q4_k_m"]["ppl_ratio"] > 1
    # The bound: at most MAX_CHUNKS chunks, the second half of each scored (llama.cpp scores CHUNK/2 - 1 a chunk).
    assert figures["chunk"] == quality.CHUNK and 1 <= figures["chunks"] <= quality.MAX_CHUNKS
    assert figures["tokens_scored"] == figures["chunks"] * (quality.CHUNK // 2 - 1) == tiers["q4_k_m"]["tokens"]
    assert figures["reconstructed"] is True  # the demo ships as a Q4_1 file: its F16 is rebuilt


def copy_of(model: ModelDir, root: Path) -> ModelDir:
    """A model folder copied whole (the micro model's tiers are small): measuring there touches nothing shared."""
    shutil.copytree(model.path, root / model.name, ignore=shutil.ignore_patterns(".lock"))
    return ModelDir(root, model.name)


def test_the_figures_are_reused_and_measured_again_when_a_tier_changes(micro_model: ModelDir, tmp_path: Path) -> None:
    model = copy_of(micro_model, tmp_path)
    assert quality.cached(model) is None
    first = quality.load_or_measure(model)
    assert first["reconstructed"] is False and quality.cached(model) == first
    saved = (model.path / quality.FILE).read_bytes()
    assert quality.load_or_measure(model) == first and (model.path / quality.FILE).read_bytes() == saved  # reused
    assert first["tiers"]["q4_k_m"]["top1"] < first["tiers"]["q8_0"]["top1"]  # random weights, 2 layers

    # A new Q4_K_M file (here the Q8_0 tier's bytes), renamed into place as the converter does.
    fresh = model.path / "q4_k_m.gguf.new"
    shutil.copyfile(model.tier_path("q8_0"), fresh)
    os.replace(fresh, model.tier_path("q4_k_m"))
    assert quality.cached(model) is None
    again = quality.load_or_measure(model)
    assert quality.cached(model) == again
    for figure in ("top1", "kl_mean", "perplexity"):  # the same file scores the same, figure for figure
        assert again["tiers"]["q4_k_m"][figure] == again["tiers"]["q8_0"][figure]
    assert again["tiers"]["q8_0"]["top1"] == first["tiers"]["q8_0"]["top1"]


def test_info_measures_when_missing(micro_model: ModelDir, isolated_cache: Path) -> None:
    model = copy_of(micro_model, isolated_cache)
    skipped = run_cli("info", "--model", "micro", "--json", "--no-quality")
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout)["quality"] is None and not (model.path / quality.FILE).exists()
    # The later calls in this process (run_cli_here): the same output without two more interpreter starts.
    measured = run_cli_here("info", "--model", "micro", "--json")
    assert measured.returncode == 0, measured.stderr
    [note] = [line for line in measured.stderr.splitlines() if "measuring" in line]  # one line says so
    assert note.startswith("warning: measuring what each tier keeps of F16's words")
    figures = json.loads(measured.stdout)["quality"]
    assert figures == quality.cached(model) and figures["tiers"]["f16"]["top1"] == 1.0
    again = run_cli_here("info", "--model", "micro")
    assert again.returncode == 0, again.stderr
    assert "measuring" not in again.stderr and "Q4_K_M: the same next word as full precision" in again.stdout


def test_info_and_list_show_the_figures_with_the_requant_note(demo_cache: Path) -> None:
    figures = quality.cached(ModelDir(demo_cache, DEMO_NAME))  # the session's, copied with the model
    assert figures is not None
    as_json = run_cli("info", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["quality"] == figures and "measuring" not in as_json.stderr
    shown = run_cli_here("info").stdout  # in this process: `info --json` above is the child
    q4 = quality.agreement_words(figures["tiers"]["q4_k_m"]["top1"])
    assert f"Q4_K_M: the same next word as its F16 (rebuilt from a quantized file) {q4}" in shown
    assert "note: this model's F16 was rebuilt from a quantized file (--allow-requant)" in shown
    # `list` in this process (run_cli_here): the same output without two more interpreter starts.
    assert f"the same next word as its F16 (rebuilt from a quantized file) {q4}" in run_cli_here("list").stdout
    assert json.loads(run_cli_here("list", "--json").stdout)["models"][0]["quality"] == figures


def test_agreement_in_words_never_rounds_a_difference_away() -> None:
    assert quality.agreement_words(1.0) == "every time"
    assert quality.agreement_words(0.998) == "more than 99 times in 100"
    assert quality.agreement_words(0.931) == "93 times in 100"


def test_the_models_dialog_says_what_each_tier_keeps(qtbot, demo_cache: Path) -> None:
    from PySide6.QtCore import Qt

    from app.models_dialog import ModelsDialog

    figures = quality.cached(ModelDir(demo_cache, DEMO_NAME))
    dialog = ModelsDialog(lambda: None)
    qtbot.addWidget(dialog)
    [item] = dialog.tree.findItems(DEMO_NAME, Qt.MatchFlag.MatchExactly)
    notes = {item.child(i).text(0): item.child(i).text(2) for i in range(item.childCount())}
    q4 = quality.agreement_words(figures["tiers"]["q4_k_m"]["top1"])
    assert notes["Compressed, 4-bit (Q4_K_M)"].startswith(
        f"The same next word as its F16 (rebuilt from a quantized file) {q4}"
    )
    assert notes["Full model (F16)"] == ""
    assert "rebuilt from a quantized file" in item.toolTip(1)
    dialog.shutdown()
