"""The multiturn workload's prompt lines (commands/bench/multiturn.py): the shipped set loads, a bad line gets
one clear error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands.bench.workloads import ASSETS, load_prompts
from runtime.errors import UserError


def test_the_shipped_set_loads() -> None:
    items = load_prompts([str(ASSETS / "multiturn.jsonl")], quick=False)
    assert {i["kind"] for i in items} == {"multiturn"}
    to_write = [m for i in items for m in i["turns"] if m["role"] == "assistant" and m.get("content") is None]
    assert len(items) == 6 and len(to_write) == 11
    assert all(i["prompt"] for i in items)  # the first message, for the progress lines


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"kind": "multiturn", "turns": [{"role": "user", "content": "hi"}]}, "at least one assistant turn"),
        ({"kind": "multiturn", "turns": "hi"}, "'turns' must be a list"),
        ({"kind": "multiturn", "turns": [{"content": "hi"}, {"role": "assistant"}]}, "needs a 'role'"),
        ({"kind": "multiturn", "turns": [{"role": "tool", "content": 3}, {"role": "assistant"}]}, "string 'content'"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: dict, says: str) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"kind": "multiturn", "turns": [{"role": "assistant"}]}) + "\n" + json.dumps(line))
    with pytest.raises(UserError, match=f"mine.jsonl:2: .*{says}"):
        load_prompts([str(path)], quick=False)
