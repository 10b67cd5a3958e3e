"""One conversation, owned in one place (#62): the CLI, the window and the API make a
runtime.chat.conversation.Conversation from their own inputs and ask it for the turn, so the same inputs send
the engine the same turn (messages, tools offered, documents) from all three; and the one documents policy
decides when `search_documents` is offered (#63: not in an arithmetic chat just because a collection exists)."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest

from app.chat_controller import Choices
from runtime.api.server import BackgroundServer, Defaults, ServeConfig, Service
from runtime.chat.conversation import Conversation
from runtime.chat.documents import DocumentChoice, about_documents
from runtime.chat.toolbox import ToolSetup
from runtime.documents.index import default_path
from runtime.engine.document_tool import NAME as SEARCH
from runtime.engine.options import ChatOptions
from runtime.engine.reader import Job
from runtime.engine.thread import EngineThread
from runtime.models.cache import DEMO_NAME
from tests.test_app import ANSWER_MS, ask, open_window
from tests.test_grounding import make_library

ARITHMETIC = "What is 17 times 23?"
ABOUT_THEM = "What do my documents say about installing Frobnicator?"


def offered(conversation: Conversation) -> tuple[list[str], str]:
    """The tools the conversation's next turn offers, and what the search's description says it searches."""
    with conversation.turn() as spec:
        tools = list(spec.toolbox.tools()) if spec.toolbox is not None else []
    return [t.name for t in tools], next((t.description or "" for t in tools if t.name == SEARCH), "")


def test_search_documents_is_offered_by_one_policy(tmp_path: Path) -> None:
    index = make_library(tmp_path)  # the collection `manuals`
    tools = ToolSetup(None, "none")

    def chat(question: str, collection: str | None = None, with_tools: bool = True) -> Conversation:
        return Conversation([{"role": "user", "content": question}], documents=DocumentChoice(collection, index=index),
                            tools=tools if with_tools else None)

    # A collection exists, the chat chose none, and the question is arithmetic: no search of the user's files.
    assert offered(chat(ARITHMETIC)) == ([], "")
    # A question about the documents: every collection is searched.
    names, where = offered(chat(ABOUT_THEM))
    assert names == [SEARCH] and "the user's documents" in where
    # The chat answers from a collection: its search looks there, whatever the question.
    names, where = offered(chat(ARITHMETIC, "manuals"))
    assert names == [SEARCH] and "'manuals'" in where
    # Without tools, nothing is offered; the grounding is the chat's all the same.
    no_tools = chat(ABOUT_THEM, "manuals", with_tools=False)
    assert offered(no_tools) == ([], "") and no_tools.search() is None
    grounding = no_tools.next_turn().options.documents
    assert grounding is not None and grounding.collection == "manuals" and grounding.index == str(index)
    # The search it opens reads the chosen collection.
    with chat(ARITHMETIC, "manuals").turn() as spec:
        assert spec.toolbox is not None and [t.name for t in spec.toolbox.tools()] == [SEARCH]  # as a turn lists them
        result = spec.toolbox.call(SEARCH, {"query": "install frobnicator"}, threading.Event())
    assert not result.is_error and "install.md" in result.text
    # No collection at all: never offered, and no index file is made by asking.
    missing = tmp_path / "none" / "documents.sqlite3"
    nothing = Conversation([{"role": "user", "content": ABOUT_THEM}], documents=DocumentChoice(index=missing),
                           tools=tools)
    assert offered(nothing) == ([], "") and not missing.exists()


def test_a_question_is_about_the_documents_when_it_names_them_or_a_collection() -> None:
    assert about_documents("Summarise the attached PDF.", [])
    assert about_documents("What does the Recipes say about flour?", ["recipes"])
    assert not about_documents("What is 2 + 2?", ["recipes"])
    assert not about_documents("Write a haiku about profiles.", ["files"])  # a whole word, not a part of one


def test_a_persona_that_does_not_exist_is_one_clear_error() -> None:
    from runtime.errors import UserError

    with pytest.raises(UserError, match="no persona 'Nope': choose from Assistant"):
        Conversation(persona="Nope").check()
    assert Conversation(persona="Nope").missing_persona() == "Nope"


# --- the three front ends, on the demo model ------------------------------------------------------------
def what_the_engine_was_asked(job: Job) -> tuple[Any, ...]:
    """A turn as the engine reads it: the messages, the documents (their index file resolved), the tools offered
    and how, the speed preset, the thinking switch, and the temperature the persona set."""
    o = job.options
    index = lambda d: str(Path(d.index or default_path()).resolve())  # noqa: E731  # None: the user's index
    documents = o.documents and replace(o.documents, index=index(o.documents))
    tools = None if o.tools is None else ([t.name for t in o.tools.tools], o.tools.choice)
    return (job.messages, documents, tools, o.preset, o.enable_thinking, dict(o.sampling_overrides).get("temperature"))


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[Job]:
    """Every job any engine thread is given, in order (the jobs run as they would)."""
    jobs: list[Job] = []
    submit = EngineThread.submit

    def spy(self: EngineThread, job: Job, bounded: bool = True) -> Job:
        jobs.append(job)
        return submit(self, job, bounded)

    monkeypatch.setattr(EngineThread, "submit", spy)
    return jobs


@pytest.mark.slow
def test_the_cli_the_window_and_the_api_build_the_same_turn(qtbot, demo_cache: Path, asked: list[Job]) -> None:
    from commands.main import main

    data = Path(os.environ["SPECQUANT_DATA_DIR"])
    make_library(data)  # the collection `manuals`, in the user's documents index
    # The same inputs: the Concise instructions, exact words, no thinking, tools (one answer a turn, so each turn
    # is one job), a short answer; once answering from `manuals`, once an arithmetic question without documents.
    common = ["--persona", "Concise", "--preset", "exact", "--no-thinking", "--max-tokens", "8"]
    cli = []
    for question, docs in ((ABOUT_THEM, ["--docs", "manuals"]), (ARITHMETIC, [])):
        assert main(["chat", "--prompt", question, *docs, *common, "--mcp", "--max-rounds", "1"]) == 0
        cli.append(what_the_engine_was_asked(asked[-1]))

    w = open_window(data, max_tokens=8, tool_approval="none", tool_rounds=1)
    qtbot.addWidget(w)
    window = []
    for question, docs in ((ABOUT_THEM, "manuals"), (ARITHMETIC, None)):
        w.new_conversation()
        w.chat.unsent = Choices(documents=docs, persona="Concise", tools=True, thinking=False, speed="exact")
        assert ask(qtbot, w, question, timeout=ANSWER_MS)
        window.append(what_the_engine_was_asked(asked[-1]))

    assert window == cli
    grounded, arithmetic = cli
    assert grounded[0][0]["role"] == "system" and grounded[0][-1] == {"role": "user", "content": ABOUT_THEM}
    assert grounded[1] is not None and grounded[1].collection == "manuals"
    assert grounded[2] == ([SEARCH], "none")  # the search of the chosen collection, shown on the last answer
    assert arithmetic[1] is None and arithmetic[2] is None  # #63: no search just because a collection exists
    assert grounded[3:] == ("exact", False, 0.3)

    # The API, on the window's engine: a client sends what the persona would have, and the same documents; it runs
    # its own tools, so none of the server's is offered.
    defaults = Defaults(DEMO_NAME, w.settings.engine_settings(), ChatOptions(max_tokens=8))
    server = BackgroundServer(Service(w.runner, lambda: defaults, ServeConfig(port=0)))
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0, timeout=120)
        client.chat.completions.create(
            model=DEMO_NAME, messages=grounded[0], temperature=0.3, max_tokens=8,
            extra_body={"specquant": {"documents": "manuals", "preset": "exact"},
                        "chat_template_kwargs": {"enable_thinking": False}},
        )
    finally:
        server.stop()
    api = what_the_engine_was_asked(asked[-1])
    assert api[2] is None and api[:2] + api[3:] == grounded[:2] + grounded[3:]
    w.close()
