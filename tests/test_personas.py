"""Personas (#43, named apart from the speed presets in #62): shipped ones, the user's own in presets.json, one
line for a bad file, and what a persona does to a chat and its sampling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.engine.options import ChatOptions
from runtime.engine.personas import (
    SHIPPED,
    Persona,
    apply_persona,
    delete_persona,
    find_persona,
    load_personas,
    save_persona,
)
from runtime.errors import UserError
from tests.conftest import assert_one_line_error, run_cli, run_cli_here


def test_the_shipped_personas_and_the_users_own(tmp_path: Path) -> None:
    path = tmp_path / "presets.json"
    assert [p.name for p in load_personas(path)] == [p.name for p in SHIPPED]  # no file: the shipped ones
    save_persona(Persona("Reviewer", "You review code.", (("temperature", 0.2),)), path)
    save_persona(Persona("coder", "Only Rust."), path)  # replaces the shipped Coder, in its place
    names = [p.name for p in load_personas(path)]
    assert names == ["Assistant", "Concise", "coder", "Teacher", "Writer", "Reviewer"]
    assert find_persona("CODER", path).system == "Only Rust." and not find_persona("coder", path).shipped
    assert json.loads(path.read_text())["presets"][0] == {
        "name": "Reviewer", "system": "You review code.", "sampling": {"temperature": 0.2}
    }
    assert delete_persona("coder", path) and find_persona("Coder", path).shipped  # the shipped one is back
    assert not delete_persona("Assistant", path)  # shipped ones cannot be deleted
    assert [p.name for p in tmp_path.iterdir()] == ["presets.json"]  # written in place, no temporary left


def test_a_presets_file_saved_before_personas_were_named_so_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "presets.json"  # as an earlier version wrote it, the file's name and key unchanged
    path.write_text('{"presets": [{"name": "Pirate", "system": "Arr.", "sampling": {"top_k": 5}}]}')
    assert find_persona("pirate", path) == Persona("Pirate", "Arr.", (("top_k", 5),))


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
        load_personas(path)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_persona_adds_its_system_prompt_and_its_sampling_under_the_users() -> None:
    coder = find_persona("Coder", Path("/nonexistent/presets.json"))
    chat, options = apply_persona(coder, [{"role": "user", "content": "hi"}], ChatOptions())
    assert chat[0] == {"role": "system", "content": coder.system} and chat[1]["content"] == "hi"
    assert dict(options.sampling_overrides) == {"temperature": 0.2}
    own = [{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}]
    chat, options = apply_persona(coder, own, ChatOptions(sampling_overrides=(("temperature", 1.0),)))
    assert chat == own and dict(options.sampling_overrides) == {"temperature": 1.0}  # the user's win


def test_the_cli_answers_with_a_persona_and_refuses_an_unknown_one(demo_cache: Path, tmp_path: Path) -> None:
    env = {"SPECQUANT_CONFIG_DIR": str(tmp_path)}
    ok = run_cli("chat", "--persona", "concise", "--max-tokens", "8", "--prompt", "hi", env=env)
    assert ok.returncode == 0, ok.stderr
    # The refusals in this process (run_cli_here): the same one line, without two more interpreter starts.
    unknown = run_cli_here("chat", "--persona", "nope", "--prompt", "hi", env=env)
    assert_one_line_error(unknown, "no persona 'nope': choose from Assistant, Concise")
    # The flag's old name still works for the scripts that use it; --help names only the new one.
    old = run_cli_here("chat", "--system-preset", "nope", "--prompt", "hi", env=env)
    assert_one_line_error(old, "no persona 'nope'")
    usage = run_cli_here("chat", "--help").stdout
    assert "--persona NAME" in usage and "--system-preset" not in usage
    (tmp_path / "presets.json").write_text("[]")
    assert_one_line_error(run_cli_here("chat", "--persona", "x", "--prompt", "hi", env=env), "presets.json")
