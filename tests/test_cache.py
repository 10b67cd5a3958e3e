"""The model cache: names, lock, listing of incomplete models, location."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.errors import UserError
from runtime.models.cache import ModelDir, cache_root, check_name, list_models
from tests.conftest import assert_one_line_error, run_cli, run_cli_here


def test_cache_root_follows_env(isolated_cache: Path) -> None:
    assert cache_root() == isolated_cache


@pytest.mark.parametrize("name", ["qwen-coder-1.5b", "smollm2-135m-instruct", "a"])
def test_valid_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "..", "Upper", "a/b", "../x", "x" * 65, "-lead"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(UserError, match="invalid model name"):
        check_name(name)


def test_concurrent_conversion_of_one_model_is_refused(micro_gguf: Path, isolated_cache: Path) -> None:
    model = ModelDir(isolated_cache, "micro")
    with model.lock():
        result = run_cli("convert", str(micro_gguf))
    assert_one_line_error(result, "being converted by another process")
    assert not model.tier_path("f16").exists()


def test_list_reports_incomplete_models(isolated_cache: Path) -> None:
    broken = isolated_cache / "half-done"
    broken.mkdir(parents=True)
    (broken / "f16.gguf").write_bytes(b"GGUF")
    (broken / "manifest.json").write_text("{not json")
    [m] = list_models()
    assert m.name == "half-done" and not m.complete and m.manifest is None
    assert "incomplete" in run_cli_here("list").stdout  # in this process: the lock test above needs a child
    assert json.loads(run_cli_here("list", "--json").stdout)["models"][0]["complete"] is False


def test_list_on_empty_cache_says_what_to_do() -> None:
    result = run_cli_here("list")
    assert result.returncode == 0 and "specquant convert demo" in result.stdout


def test_bad_flag_is_one_line() -> None:
    assert_one_line_error(run_cli_here("convert", "demo", "--bogus"), "unrecognized arguments: --bogus")
