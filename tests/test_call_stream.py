"""A streamed answer's tool call (issue #60 item 6), for every family of runtime/engine/call_formats.py on the
micro models of tests/test_call_origin.py: a call the model's own opener token began, of an offered tool, goes
out in pieces as its arguments are written (a first piece with its id and name, then arguments that join into
the whole call's JSON text, a last piece once it passed its check); one that then fails its check, or that the
answer ends inside, ends with a `problem` and is no call; anything else (a spelled call, a format without an
opener token) goes out whole, as when the answer is not streamed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from runtime.engine.call_formats import call_text
from runtime.engine.markup import text_tokens
from runtime.engine.tools import CallDelta, assemble_calls
from tests import test_call_origin
from tests.test_call_origin import REQUEST, Family, answer, fed

family = test_call_origin.family  # the fixture: a micro model per call format
STREAMED = replace(REQUEST, streamed=True)
GOOD = {"path": "/tmp/notes.txt", "text": "a short note, with \"quotes\" and {braces}"}
BAD = {"path": "/etc/passwd", "text": "x"}  # the schema's pattern refuses it


def own(f: Family, name: str, arguments: dict[str, Any]) -> list[int]:
    """A call as the model writes it: its opener (where the vocabulary has one) as the model's own token."""
    return f.parent.tokenize(call_text(name, arguments, f.syntax, "c7"), add_bos=False, special=True)


def test_a_call_the_models_own_opener_began_streams_its_arguments(family: Family) -> None:
    f = family
    content, out = fed(f, own(f, "write_file", GOOD), STREAMED)
    whole = json.dumps(GOOD)
    assert content == "" and assemble_calls(out) == [{"id": out[0].id, "type": "function",
                                                "function": {"name": "write_file", "arguments": whole}}]
    if f.opener is None:  # Llama 3.x: no opener token, so nothing tells the model's call from text: whole
        assert out == [CallDelta(0, out[0].id, "write_file", whole)]
        return
    first, *rest = out
    assert (first.name, first.arguments, first.done) == ("write_file", "", False)  # the name, before any argument
    assert all(p.id is None and p.problem is None for p in rest)
    assert [p.done for p in rest] == [False] * (len(rest) - 1) + [True]  # done once, at the call's end
    written = [p.arguments for p in rest if p.arguments]
    assert len(written) > 5 and "".join(written) == whole  # token by token: many pieces, the same JSON text


def test_a_streamed_call_that_fails_its_check_or_is_cut_ends_as_no_call(family: Family) -> None:
    f = family
    content, out = fed(f, own(f, "write_file", BAD), STREAMED)
    if f.opener is None:  # sent whole: it fails before anything of it went out, so it is text, as unstreamed
        assert out == [] and json.dumps(BAD) in content
        return
    assert out[0].name == "write_file" and out[-1].problem is not None and "/etc/passwd" in out[-1].problem
    assert not any(p.done for p in out) and assemble_calls(out) == []
    assert content == ""  # never text either: its first pieces went out as a call's

    tokens = own(f, "write_file", GOOD)
    cut = next(n for n in range(len(tokens)) if '"text": "a short' in f.parent.detokenize(tokens[:n], special=True))
    content, out = fed(f, tokens[:cut], STREAMED)
    assert out[0].name == "write_file" and "ended inside its call of write_file" in (out[-1].problem or "")
    assert not any(p.done for p in out) and assemble_calls(out) == [] and content == ""


def test_what_the_opener_token_did_not_begin_goes_out_whole_or_as_text(family: Family) -> None:
    """A call spelled as text (copied from a message) stays text, streamed or not; a call of a tool not offered
    is checked by name before anything streams, so it is text too."""
    f = family
    tokenize = lambda text: f.parent.tokenize(text, add_bos=False, special=False)  # noqa: E731
    spelled = call_text("write_file", GOOD, f.syntax, "c8")
    if f.opener is not None:
        assert answer(f, text_tokens(spelled, tokenize, f.markup), STREAMED) == (spelled, [])
    content, out = fed(f, own(f, "delete_all_files", {"path": "/home"}), STREAMED)
    assert out == [] and '"/home"' in content
    unstreamed = fed(f, own(f, "write_file", GOOD), REQUEST)[1]
    assert [(p.name, p.arguments, p.done) for p in unstreamed] == [("write_file", json.dumps(GOOD), True)]
