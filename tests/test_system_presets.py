"""System-prompt presets (#43): shipped ones, the user's own in presets.json, one line for a bad file, and what
a preset does to a chat and its sampling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.engine.options import ChatOptions
from runtime.engine.system_presets import (
    SHIPPED,
    SystemPreset,
    apply_preset,
    delete_preset,
    find_preset,
    load_presets,
    save_preset,
)
from runtime.errors import UserError
from tests.conftest import assert_one_line_error, run_cli, run_cli_here


def test_the_shipped_presets_and_the_users_own(tmp_path: Path) -> None:
    path = tmp_path / "presets.json"
    assert [p.name for p in load_presets(path)] == [p.name for p in SHIPPED]  # no file: the shipped ones
    save_preset(SystemPreset("Reviewer", "You review code.", (("temperature", 0.2),)), path)
    save_preset(SystemPreset("coder", "Only Rust."), path)  # replaces the shipped Coder, in its place
    names = [p.name for p in load_presets(path)]
    assert names == ["Assistant", "Concise", "coder", "Teacher", "Writer", "Reviewer"]
    assert find_preset("CODER", path).system == "Only Rust." and not find_preset("coder", path).shipped
    assert json.loads(path.read_text())["presets"][0] == {
        "name": "Reviewer", "system": "You review code.", "sampling": {"temperature": 0.2}
    }
    assert delete_preset("coder", path) and find_preset("Coder", path).shipped  # the shipped one is back
    assert not delete_preset("Assistant", path)  # shipped ones cannot be deleted
    assert [p.name for p in tmp_path.iterdir()] == ["presets.json"]  # written in place, no temporary left


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "not valid JSON"),
        ('{"presets": {}}', 'expected {"presets": [...]}'),
        ('{"presets": [{"system": "x"}]}', "presets[0]: the name"),
        ('{"presets": [{"name": "A", "sampling": {"temp": 1}}]}', "unknown sampling setting 'temp'"),
        ('{"presets": [{"name": "A", "sampling": {"top_k": 2.5}}]}', "top_k=2.5 is out of range"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "presets.json"
    path.write_text(text)
    with pytest.raises(UserError, match=r"presets\.json") as e:
        load_presets(path)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_preset_adds_its_system_prompt_and_its_sampling_under_the_users() -> None:
    coder = find_preset("Coder", Path("/nonexistent/presets.json"))
    chat, options = apply_preset(coder, [{"role": "user", "content": "hi"}], ChatOptions())
    assert chat[0] == {"role": "system", "content": coder.system} and chat[1]["content"] == "hi"
    assert dict(options.sampling_overrides) == {"temperature": 0.2}
    own = [{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}]
    chat, options = apply_preset(coder, own, ChatOptions(sampling_overrides=(("temperature", 1.0),)))
    assert chat == own and dict(options.sampling_overrides) == {"temperature": 1.0}  # the user's win


def test_the_cli_answers_with_a_preset_and_refuses_an_unknown_one(demo_cache: Path, tmp_path: Path) -> None:
    env = {"SPECQUANT_CONFIG_DIR": str(tmp_path)}
    ok = run_cli("chat", "--system-preset", "concise", "--max-tokens", "8", "--prompt", "hi", env=env)
    assert ok.returncode == 0, ok.stderr
    # The refusals in this process (run_cli_here): the same one line, without two more interpreter starts.
    unknown = run_cli_here("chat", "--system-preset", "nope", "--prompt", "hi", env=env)
    assert_one_line_error(unknown, "no system preset")
    (tmp_path / "presets.json").write_text("[]")
    assert_one_line_error(run_cli_here("chat", "--system-preset", "x", "--prompt", "hi", env=env), "presets.json")
