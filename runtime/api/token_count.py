"""A prompt's tokens counted without an engine turn (`POST /v1/messages/count_tokens`): the chat is rendered
through the model's own template and tokenized as an answer's prompt is (runtime.engine.prompt's
ChatTemplates, runtime.engine.tools' preparation of a chat with tools), from a vocabulary-only load of one of
its tiers (every tier has the same tokenizer and template). Nothing waits for the engine: Claude Code counts
while an answer runs (a 31-token count waited 132 s behind an answer when it was an engine job).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from runtime.engine import tools
from runtime.engine.options import ChatOptions, Message
from runtime.engine.prompt import ChatTemplates
from runtime.errors import UserError
from runtime.models.cache import ModelDir, cache_root

_lock = threading.Lock()  # the templates' cache and the vocabularies' are shared by the parse threads
_templates = ChatTemplates()
_parents: dict[Path, VocabularyParent] = {}


class VocabularyParent:
    """What a chat's rendering reads of a loaded parent (runtime.decode.llama_backend.LlamaBackend: its path,
    metadata, BOS and EOS, tokenize and detokenize), from the vocabulary alone: no weights, no context."""

    def __init__(self, path: Path) -> None:
        import llama_cpp

        from runtime.decode.llama_backend import file_metadata, load_vocabulary

        self.path = path
        self.vocabulary = load_vocabulary(path)  # cached per file: the tool grammars load the same one
        ptr = self.vocabulary.vocab_ptr
        self.bos, self.eos = llama_cpp.llama_vocab_bos(ptr), llama_cpp.llama_vocab_eos(ptr)
        self._metadata = file_metadata(path)  # as a loaded backend reports it

    def metadata(self) -> dict[str, str]:
        return self._metadata

    def tokenize(self, text: str, add_bos: bool = False, special: bool = True) -> list[int]:
        import llama_cpp

        data = text.encode("utf-8")
        room = len(data) + 2
        out = (llama_cpp.llama_token * room)()
        n = llama_cpp.llama_tokenize(self.vocabulary.vocab_ptr, data, len(data), out, room, add_bos, special)
        if n < 0:  # more tokens than bytes (cannot happen, but llama.cpp says how many were needed)
            room = -n
            out = (llama_cpp.llama_token * room)()
            n = llama_cpp.llama_tokenize(self.vocabulary.vocab_ptr, data, len(data), out, room, add_bos, special)
        return list(out[:n])

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        pieces = self.vocabulary.pieces  # control tokens as their text: only `special` asks for them here
        return b"".join(pieces[t] for t in tokens).decode("utf-8", errors="replace")


def parent_of(model: str) -> VocabularyParent:
    """A vocabulary-only parent for cached `model`: its first tier file on disk."""
    md = ModelDir(cache_root(), model)
    manifest = md.read_manifest() or {}
    for tier in sorted(manifest.get("tiers", {})):
        path = md.tier_path(tier)
        if path.is_file():
            with _lock:
                if path not in _parents:
                    _parents[path] = VocabularyParent(path)
                return _parents[path]
    raise UserError(f"model {model!r} has no tier file to count its tokens with")


def count_prompt(model: str, messages: list[Message], options: ChatOptions) -> int:
    """The tokens of the prompt an answer to `messages` under `options` would read (before any trimming)."""
    parent = parent_of(model)
    shown: list[Any] = list(messages)
    template_tools = None
    if options.tools is not None:
        syntax = tools.syntax_for(parent.metadata().get("tokenizer.chat_template"))
        shown, template_tools = tools.prepare_tools(messages, options.tools, syntax)
    with _lock:
        return len(_templates.render(parent, shown, template_tools, options.enable_thinking))  # type: ignore[arg-type]
