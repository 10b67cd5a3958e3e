"""Grounded answers (#42): the best passages of a collection go into the prompt, numbered; the answer's last
Chunk carries them as citations; the CLI prints them and the API returns them; bad requests are one line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path, PurePath

import openai
import pytest

from runtime.documents.grounding import Citation, Grounding, cited_numbers, grounded_messages, retrieve
from runtime.documents.library import Library
from runtime.engine.engine import Engine
from runtime.engine.options import ChatOptions
from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME, ModelDir
from tests.conftest import assert_one_line_error, engine_on_copy, run_cli, run_cli_here
from tests.test_server import Served

INSTALL = """# Installing Frobnicator

Run `pip install frobnicator` and then `frob init` in your project folder.
The init step writes a frob.toml file with the default settings.

## Requirements

Frobnicator needs Python 3.10 or later and about 200 MB of disk space.
"""
PANCAKES = """# Pancakes

Mix 200 g of flour, two eggs and 300 ml of milk. Rest the batter for 30 minutes, then fry in butter.
"""
QUESTION = "How do I install Frobnicator?"
GREEDY = ChatOptions(max_tokens=24, sampling_overrides=(("temperature", 0.0),))


def make_library(root: Path) -> Path:
    """Two small documents in the collection `manuals`, indexed into root/documents.sqlite3."""
    folder = root / "docs"
    folder.mkdir(parents=True)
    (folder / "install.md").write_text(INSTALL)
    (folder / "pancakes.md").write_text(PANCAKES)
    index = root / "documents.sqlite3"
    with Library(index) as lib:
        lib.add([folder], collection="manuals")
    return index


@pytest.fixture(scope="module")
def engine(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory):
    with engine_on_copy(demo_model, tmp_path_factory.mktemp("grounding")) as e:
        yield e


def test_the_question_is_rewritten_with_numbered_sources_and_the_other_turns_are_kept(tmp_path: Path) -> None:
    with Library(make_library(tmp_path)) as lib:
        citations = retrieve(lib, QUESTION, Grounding("manuals"))
    assert [c.n for c in citations] == list(range(1, len(citations) + 1))
    assert citations[0].path.endswith("install.md")  # BM25: the question's words are in it
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": QUESTION}]
    grounded = grounded_messages(chat, citations)
    assert grounded[:2] == chat[:2] and chat[2]["content"] == QUESTION  # the caller's chat is untouched
    text = grounded[2]["content"]
    assert "[1] install.md" in text and "pip install frobnicator" in text and text.endswith(f"Question: {QUESTION}")
    assert str(tmp_path) not in text  # full paths are for the reader, not the prompt


def test_a_question_without_words_finds_nothing_and_says_so(tmp_path: Path) -> None:
    with Library(make_library(tmp_path)) as lib:
        assert retrieve(lib, "?!", Grounding()) == ()
    grounded = grounded_messages([{"role": "user", "content": "?!"}], ())
    assert "No passage of the user's documents matched" in grounded[0]["content"]


def test_the_numbers_an_answer_cites() -> None:
    assert cited_numbers("Run pip [1]. Then init [2, 3], not [x] or [1.5].") == {1, 2, 3}


def test_where_names_the_file_the_lines_and_the_heading() -> None:
    c = Citation(1, "/home/ann/notes/install.md", "notes", "text", 1.0, lines=(3, 20), heading="Installing")
    assert c.where() == '/home/ann/notes/install.md, lines 3-20, "Installing"'
    assert Citation(1, "/x/report.md", "notes", "text", 1.0, whole=True).where() == "/x/report.md, whole document"
    assert Citation(2, "a.pdf", "x", "t", 1.0, page=4).where() == "a.pdf, page 4"
    with pytest.raises(UserError, match="out of range"):
        Grounding(top=0)


def test_a_grounded_answer_carries_its_citations_and_its_prompt_holds_the_passage(
    engine: Engine, tmp_path: Path
) -> None:
    index = make_library(tmp_path)
    options = ChatOptions(max_tokens=24, sampling_overrides=(("temperature", 0.0),),
                          documents=Grounding("manuals", top=2, index=str(index), whole=False))
    ask = [{"role": "user", "content": QUESTION}]
    plan = engine.prepare(ask, options)
    prompt = plan.parent.detokenize(plan.prompt)
    assert "pip install frobnicator" in prompt and "[1] install.md" in prompt  # n-gram lookup can draft from it
    assert plan.decision.route == engine.decide(QUESTION, options).route  # the question routes, not its sources
    answer = engine.chat(ask, options)
    cited = answer.last.citations
    assert 1 <= len(cited) <= 2 and [c.n for c in cited] == list(range(1, len(cited) + 1))
    assert answer.last.citations[0].path.endswith("install.md")
    plain = engine.chat(ask, GREEDY)
    assert plain.last.citations == () and plain.text != answer.text  # the sources changed the answer


def test_documents_that_fit_the_context_go_in_whole_and_passages_when_they_do_not(
    engine: Engine, tmp_path: Path
) -> None:
    index = make_library(tmp_path)
    ask = [{"role": "user", "content": "Summarise my manuals."}]  # no word of it is in them: BM25 finds nothing
    whole = engine.prepare(ask, replace(GREEDY, documents=Grounding("manuals", index=str(index))))
    assert [(c.n, PurePath(c.path).name, c.whole) for c in whole.citations] == [
        (1, "install.md", True), (2, "pancakes.md", True)
    ]
    prompt = whole.parent.detokenize(whole.prompt)
    assert "frob.toml" in prompt and "Rest the batter" in prompt and "[2] pancakes.md" in prompt
    assert whole.citations[0].as_dict()["whole"] is True and "lines" not in whole.citations[0].as_dict()
    with Library(index) as lib:
        assert retrieve(lib, "Summarise my manuals.", Grounding("manuals"), whole_chars=len(INSTALL)) == ()
        small = retrieve(lib, QUESTION, Grounding("manuals"), whole_chars=len(INSTALL))  # too big: passages
    assert small and not any(c.whole for c in small) and small[0].lines is not None


def test_a_missing_collection_is_a_user_error(engine: Engine, tmp_path: Path) -> None:
    options = ChatOptions(max_tokens=8, documents=Grounding("nope", index=str(make_library(tmp_path))))
    with pytest.raises(UserError, match="nope"):
        engine.chat([{"role": "user", "content": QUESTION}], options)


def test_the_cli_prints_the_sources_and_refuses_bad_flags_in_one_line(demo_cache: Path, tmp_path: Path) -> None:
    make_library(tmp_path)
    env = {"SPECQUANT_DATA_DIR": str(tmp_path)}
    out = run_cli("chat", "--docs", "manuals", "--docs-top", "1", "--max-tokens", "16", "--temp", "0",
                  "--prompt", QUESTION, env=env)
    assert out.returncode == 0, out.stderr
    assert "Sources:\n  [1] " in out.stdout and "install.md" in out.stdout
    data = run_cli("chat", "--docs", "--json", "--max-tokens", "8", "--prompt", QUESTION, env=env)
    assert data.returncode == 0, data.stderr
    answer = json.loads(data.stdout)
    assert answer["citations"][0]["path"].endswith("install.md")  # every collection
    assert all(c["cited"] == (f"[{c['n']}]" in answer["text"]) for c in answer["citations"])
    # The refusals in this process (run_cli_here): the same one line, without three more interpreter starts.
    assert_one_line_error(run_cli_here("chat", "--docs", "nope", "--prompt", "hi", env=env), "nope")
    assert_one_line_error(run_cli_here("chat", "--docs", "--docs-top", "0", "--prompt", "hi", env=env), "out of range")
    assert_one_line_error(run_cli_here("chat", "--docs-top", "3", "--prompt", "hi", env=env), "--docs-top needs --docs")


def test_the_api_answers_from_documents_with_citations(api_server: Served) -> None:
    api_server.data.mkdir(parents=True, exist_ok=True)
    if not (api_server.data / "documents.sqlite3").exists():
        make_library(api_server.data)
    client = api_server.client()
    ask = [{"role": "user", "content": QUESTION}]
    r = client.chat.completions.create(
        model=DEMO_NAME, messages=ask, max_tokens=16, temperature=0,
        extra_body={"specquant": {"documents": "manuals", "documents_top": 1}},
    )
    cited = r.model_extra["specquant"]["citations"]
    assert len(cited) == 1 and cited[0]["n"] == 1 and cited[0]["path"].endswith("install.md")
    plain = client.chat.completions.create(model=DEMO_NAME, messages=ask, max_tokens=4)
    assert "citations" not in plain.model_extra["specquant"]  # nothing changes for a request that does not ask
    for bad, needle in (({"documents": 3}, "specquant.documents"), ({"documents_top": 2}, "needs"),
                        ({"documents": True, "documents_top": 99}, "1 to 20")):
        with pytest.raises(openai.BadRequestError, match=needle):
            client.chat.completions.create(model=DEMO_NAME, messages=ask, max_tokens=4,
                                           extra_body={"specquant": bad})
    with pytest.raises(openai.BadRequestError, match="nope"):
        client.chat.completions.create(model=DEMO_NAME, messages=ask, max_tokens=4,
                                       extra_body={"specquant": {"documents": "nope"}})


def test_the_rag_workload_reads_as_a_grounded_answer_and_scores_its_key_phrase() -> None:
    from commands.bench.workloads import ASSETS, load_prompts, score

    prompts = load_prompts([str(ASSETS / "rag.jsonl")], quick=False)
    assert len(prompts) == 12 and all(p["kind"] == "contains" for p in prompts)
    first = prompts[0]
    assert first["prompt"].startswith("Answer the question from the numbered sources below.")
    assert "[1] install.md (Installing Frobnicator)" in first["prompt"]
    assert score(first, "It writes a FROB.TOML file [1].") is True and score(first, "No idea.") is False
