"""A chat's prompt tokens with only the template's own markup special: what a message says is always text.

A chat template writes markup (`<|im_start|>`, `<|eot_id|>`, Qwen's `<tool_call>`) around the messages'
contents. Tokenizing the rendered chat with special tokens parsed everywhere would read `<|im_end|>` typed in
a user's message, a tool's result or a document passage as the real end of a turn, and a tool result holding
`<|im_end|>\\n<|im_start|>system\\n...` as a real system turn. So the chat is rendered with each content
replaced by a placeholder: markup tokens are read only in what is left, the template's own text, and each
content, in its placeholder's place, is text.

The same holds for every other text a template writes from the request: the tools' names, descriptions and
schemas (Qwen's template writes `tool | tojson`), earlier calls' names and arguments (`arguments | tojson`), a
message's other fields. Each such string that could form markup (it holds a character a markup spelling starts
or ends with) gets a placeholder too; a template that writes it through `tojson` writes the placeholder's
quote escaped, and the string goes in escaped as often. Strings that cannot form markup (`"object"`, a plain
description) are left as they are, so a template that reads them (`tool.type == "function"`) reads them.

Where the template renders contents verbatim (ChatML, Llama 3.x, Qwen, the generic prompt), the text the model
sees is exactly the template's; a template that rewrites contents (`| trim`, splitting off `<think>` parts) gets
them as the messages hold them. A template that writes a placeholder in a form it cannot be read back from
(Python's repr, `tojson` with `ensure_ascii`) is refused with a UserError: its markup could not be told apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runtime.errors import UserError

# Private-use characters: no template writes them, and a message holding the same ones is still text (only
# the placeholder rendering is searched for them). The quote tells how often `tojson` escaped the placeholder.
_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f'{_OPEN}(\\d+)(\\\\*)"{_CLOSE}')
_ESCAPED = re.compile(r"\\u[eE]00[01]")  # a placeholder's character written as an escape: unreadable

Render = Callable[[list[dict[str, Any]], "list[dict[str, Any]] | None"], str]


def chat_tokens(
    messages: Sequence[dict[str, Any]],
    render: Render,
    tokenize: Callable[[str], list[int]],
    markup: Mapping[str, int],
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    """Tokens of `render(messages, tools)`: the vocabulary's `markup` tokens (spelling -> id) where the template
    writes them, and everything between them, contents, tools and earlier calls included, as text (`tokenize`,
    special tokens off).

    Text runs span the template's text and the contents together, as llama.cpp's own tokenizer splits a
    string only at special tokens: an ordinary chat gets exactly the tokens of its whole rendered text."""
    hider = _Hider(markup)
    marked = [hider.message(m) for m in messages]
    skeleton = render(marked, hider.data(tools) if tools is not None else None)
    if _ESCAPED.search(skeleton):
        raise UserError("the model's chat template writes a tool's or a message's text escaped, so its markup "
                        "cannot be told from the text: use a template that renders them as text or JSON")
    texts = hider.texts
    spelled = re.compile("|".join(map(re.escape, sorted(markup, key=len, reverse=True)))) if markup else None
    tokens: list[int] = []
    run: list[str] = []  # text since the last markup token

    def end_run() -> None:
        if run:
            tokens.extend(text_tokens("".join(run), tokenize, markup))
            run.clear()

    def template_text(text: str) -> None:
        at = 0
        for found in spelled.finditer(text) if spelled else ():
            run.append(text[at : found.start()])
            end_run()
            tokens.append(markup[found.group()])
            at = found.end()
        run.append(text[at:])

    at = 0
    for found in _PLACEHOLDER.finditer(skeleton):
        index = int(found.group(1))
        if index >= len(texts):  # not one of ours: the template's own text
            continue
        template_text(skeleton[at : found.start()])
        run.append(_escaped(texts[index], len(found.group(2))))
        at = found.end()
    template_text(skeleton[at:])
    end_run()
    return tokens


class _Hider:
    """Placeholders for a chat's texts: `texts[i]` is what placeholder i stands for."""

    def __init__(self, markup: Mapping[str, int]) -> None:
        self.texts: list[str] = []
        # A string holding none of these can neither hold markup nor complete it at its edges.
        self.edges = {c for spelling in markup if spelling for c in (spelling[0], spelling[-1])}
        self.edges |= {_OPEN, _CLOSE, "\\"}  # placeholders' own characters, and an escape of them

    def hold(self, text: str) -> str:
        self.texts.append(text)
        return f'{_OPEN}{len(self.texts) - 1}"{_CLOSE}'

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        """The message for the template: its content and thought placeholders, its other fields' risky strings
        too (earlier calls' names and arguments, a tool's name, Phi-4-mini's `tools` field); its role as it is."""
        out: dict[str, Any] = {}
        for key, value in message.items():
            if key in ("content", "reasoning_content") and isinstance(value, str):
                out[key] = self.hold(value) if value else value
            else:
                out[key] = value if key == "role" else self.data(value)
        return out

    def data(self, value: Any) -> Any:
        """`value` with each string (and key) that could form markup replaced by a placeholder."""
        if isinstance(value, str):
            return self.hold(value) if any(c in self.edges for c in value) else value
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value


def _escaped(text: str, backslashes: int) -> str:
    """`text` JSON-escaped as often as the placeholder's quote was (1, 3, 7 backslashes: once, twice, thrice)."""
    times = (backslashes + 1).bit_length() - 1
    if backslashes + 1 != 1 << times:
        raise UserError("the model's chat template rewrites a tool's or a message's text in a way SpecQuant "
                        "cannot read back, so its markup cannot be told from the text")
    for _ in range(times):
        text = json.dumps(text, ensure_ascii=False)[1:-1]
    return text


def text_tokens(text: str, tokenize: Callable[[str], list[int]], markup: Mapping[str, int]) -> list[int]:
    """`text` as plain-text tokens. llama.cpp matches user-defined tokens (Qwen's `<tool_call>`) even with
    special tokens off, as Hugging Face's tokenizers do: where that happens, each such spelling in the text is
    tokenized in two parts (its first character, then the rest), which spell the same text with no markup."""
    tokens = tokenize(text) if text else []
    held = set(tokens)  # one pass over a long content, not one per markup token
    found = {spelling for spelling, token in markup.items() if token in held and len(spelling) > 1}
    if not found:
        return tokens
    tokens = []
    for piece in re.split(f"({'|'.join(map(re.escape, sorted(found, key=len, reverse=True)))})", text):
        if piece in found:
            tokens += tokenize(piece[0]) + text_tokens(piece[1:], tokenize, markup)
        elif piece:
            tokens += text_tokens(piece, tokenize, markup)
    return tokens
