"""A chat's prompt tokens with only the template's own markup special: what a message says is always text.

A chat template writes markup (`<|im_start|>`, `<|eot_id|>`, Qwen's `<tool_call>`) around the messages'
contents. Tokenizing the rendered chat with special tokens parsed everywhere would read `<|im_end|>` typed in
a user's message, a tool's result or a document passage as the real end of a turn, and a tool result holding
`<|im_end|>\\n<|im_start|>system\\n...` as a real system turn. So the chat is rendered with each content
replaced by a placeholder: markup tokens are read only in what is left, the template's own text, and each
content, in its placeholder's place, is text.

Where the template renders contents verbatim (ChatML, Llama 3.x, Qwen, the generic prompt), the text the model
sees is exactly the template's; a template that rewrites contents (`| trim`, splitting off `<think>` parts) gets
them as the messages hold them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Private-use characters: no template writes them, and a message holding the same ones is still text (only
# the placeholder rendering is searched for them).
_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")


def chat_tokens(
    messages: Sequence[dict[str, Any]],
    render: Callable[[list[dict[str, Any]]], str],
    tokenize: Callable[[str], list[int]],
    markup: Mapping[str, int],
) -> list[int]:
    """Tokens of `render(messages)`: the vocabulary's `markup` tokens (spelling -> id) where the template
    writes them, and everything between them, contents included, as text (`tokenize`, special tokens off).

    Text runs span the template's text and the contents together, as llama.cpp's own tokenizer splits a
    string only at special tokens: an ordinary chat gets exactly the tokens of its whole rendered text."""
    # A thinking model's earlier thought (`reasoning_content`, runtime.engine.thinking) is text the template
    # writes too: it gets a placeholder of its own, numbered after the contents.
    contents = [m.get("content") or "" for m in messages]
    thoughts = [m.get("reasoning_content") or "" for m in messages]
    n = len(contents)
    marked = [{**m, **({"content": f"{_OPEN}{i}{_CLOSE}"} if text else {}),
               **({"reasoning_content": f"{_OPEN}{n + i}{_CLOSE}"} if thought else {})}
              for i, (m, text, thought) in enumerate(zip(messages, contents, thoughts, strict=True))]
    contents += thoughts
    skeleton = render(marked)
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
        if index >= len(contents):  # not one of ours: the template's own text
            continue
        template_text(skeleton[at : found.start()])
        run.append(contents[index])
        at = found.end()
    template_text(skeleton[at:])
    end_run()
    return tokens


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
