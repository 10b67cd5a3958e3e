"""Structured output through `specquant serve`, with the official openai client: a Pydantic model parsed
from the answer, JSON mode, streamed JSON, and the forced tokens counted in the `specquant` object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tests.conftest import assert_one_line_error, run_cli, run_cli_here
from tests.test_server import DEMO, Served, greedy


class Person(BaseModel):
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=120)
    colors: list[Literal["red", "green", "blue", "yellow"]] = Field(max_length=3)


@pytest.fixture
def server(api_server: Served) -> Served:
    return api_server  # one server for this file and the other API-feature tests (tests/conftest.py)


ASK = "Describe a person named Ann, aged 31, whose favourite colours are red and blue."


def test_the_openai_client_parses_a_pydantic_answer(server: Served) -> None:
    completion = server.client().chat.completions.parse(
        model=DEMO, messages=[{"role": "user", "content": ASK}], response_format=Person, temperature=0, max_tokens=128
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop" and message.refusal is None
    person = message.parsed
    assert isinstance(person, Person) and 0 <= person.age <= 120 and len(person.colors) <= 3


def test_json_mode_and_a_schema_stream_valid_json_and_count_forced_tokens(server: Served) -> None:
    short = "Return a JSON object with the keys name and age for Ann, aged 31."
    status, _, body = server.post(greedy(short, 128, response_format={"type": "json_object"}))
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "stop"
    doc = json.loads(body["choices"][0]["message"]["content"])
    assert isinstance(doc, dict) and doc  # the keys are the model's to choose in JSON mode

    schema = Person.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    status, _, whole = server.post(greedy(ASK, 128, response_format=fmt))
    assert status == 200, whole
    facts = whole["specquant"]
    # Tokens the grammar forces are counted where a cycle starts at them; whether one does depends on the
    # drafts this machine's costs choose (a draft may propose the keys first), so only the bounds hold on
    # every CPU. tests/test_constrained.py counts forced tokens where they must occur.
    assert 0 <= facts["forced"] < facts["tokens"], facts
    Person.model_validate_json(whole["choices"][0]["message"]["content"])

    stream = server.client().chat.completions.create(
        model=DEMO, messages=[{"role": "user", "content": ASK}], temperature=0, max_tokens=128, stream=True,
        response_format=fmt,  # type: ignore[arg-type]  # the dict form the API documents
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == whole["choices"][0]["message"]["content"]


def test_without_a_draft_the_json_is_the_same(server: Served) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": Person.model_json_schema()}}
    spec = server.post(greedy(ASK, 128, response_format=fmt))[2]
    plain = server.post(greedy(ASK, 128, response_format=fmt, specquant={"draft": "none"}))[2]
    assert plain["choices"][0]["message"]["content"] == spec["choices"][0]["message"]["content"]



def test_chat_answers_in_a_json_schema_from_a_file(demo_cache: Path, tmp_path: Path) -> None:
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(Person.model_json_schema()))
    result = run_cli("chat", "--prompt", ASK, "--json-schema", str(schema), "--temp", "0", "--max-tokens", "128")
    assert result.returncode == 0, result.stderr
    Person.model_validate_json(result.stdout)
    assert "tokens" in result.stderr  # the stats line (its "forced by the grammar" depends on the drafts chosen)

    # The refusals in this process (tests/conftest.py run_cli_here): the same exit code and one line, no child.
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "not": {}}')
    assert_one_line_error(run_cli_here("chat", "--prompt", "hi", "--json-schema", str(bad)), str(bad), '"not"')
    assert_one_line_error(run_cli_here("chat", "--prompt", "hi", "--json-schema", str(tmp_path / "no.json")), "no.json")
    bad.write_text("{not json")
    assert_one_line_error(run_cli_here("chat", "--prompt", "hi", "--json-schema", str(bad)), str(bad), "not valid JSON")


@pytest.mark.slow
def test_bench_runs_a_json_workload_and_scores_validity(demo_cache: Path, tmp_path: Path) -> None:
    small = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer",
             "minimum": 0, "maximum": 9}}, "required": ["colour", "n"]}
    prompts = tmp_path / "json.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"j{i}", "prompt": p, "schema": small}) + "\n" for i, p in
                               enumerate(["Pick a colour and a digit.", "Name the colour of grass and a digit."])))
    out = tmp_path / "out"
    result = run_cli("bench", "--prompts", str(prompts), "--configs", "f16", "exact", "--max-tokens", "48",
                     "--threads", "2", "--no-memory", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "results.json").read_text())["summary"]["json"]
    assert summary["f16"]["accuracy"] == 1.0 and summary["exact"]["accuracy"] == 1.0  # valid: jsonschema says
    assert summary["f16"]["token_sources"]["forced"] == 0  # the baseline decodes one token per step
    assert summary["exact"]["token_sources"]["forced"] > 0
    refused = run_cli("bench", "--prompts", str(prompts), "--configs", "f16", "llama.cpp", "--no-memory")
    assert_one_line_error(refused, "JSON schema")
