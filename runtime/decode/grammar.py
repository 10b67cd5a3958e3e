"""JSON-schema-constrained decoding over llguidance: the tokenizer, compiled grammars and per-answer constraints.

Three pieces, in the order a request uses them:

* `tokenizer_for(path_or_backend)`: llguidance's view of a GGUF's vocabulary (every token's bytes, the
  end-of-generation tokens, llama.cpp's own tokenizer as a native callback), built once per model file from a
  vocab-only load (~0.1 s) and cached for the life of the process.
* `Grammar.from_json_schema(schema, strict)` / `Grammar.json_object()`: a validated grammar. A schema llguidance
  cannot enforce raises `GrammarError` (a `UserError` and a `ValueError`) with llguidance's own words, which
  name the problem: `Unimplemented keys: ["not"]`, `Unknown format: foo`, `Invalid type: strin`, `Unsatisfiable
  schema: minimum (5) is greater than maximum (2)`, `Pointer '/defs/x' does not exist`, a regex error ...
* `Constraint` (`runtime.decode.constraint`): one answer's parser state (an `llguidance.LLMatcher`): the mask
  of allowed tokens, `mask_logits`, `accepts`, `consume`, `rollback`, `forced` (tokens the grammar alone
  decides) and the masks a speculative verify step needs for a whole draft (`draft_masks`).

Only `tokenizer_for` reaches llama.cpp (through `llama_backend.load_vocabulary`); grammars and constraints work on
token ids and numpy arrays.

llguidance facts this module leans on (llguidance 1.9.1):

* An `LLMatcher` never raises for grammar or token errors: it enters an error state it never leaves, not even
  through `reset()` or `rollback()`. Consuming one forbidden token, or rolling back more tokens than it holds,
  poisons it. `Constraint` therefore validates first (`validate_tokens`, which changes nothing) and raises
  `ConstraintError` with the state intact.
* EOS is special: once the grammar is complete (`is_stopped()`, e.g. after the top-level `}`) the only allowed
  tokens are the EOS tokens, and consuming one is *not* recorded (rollback does not count it); while the
  grammar could still go on but may end (`is_accepting()`, e.g. after `42` for `{"type":"integer"}`) an EOS is
  recorded like any token. `Constraint.consume` keeps its own count so `rollback` stays exact.
* Control tokens (`<|im_end|>` ...) are marked special (their bytes prefixed with 0xff): no JSON grammar ever
  allows them, only EOS tokens are allowed, and only where the grammar may end.
* The matcher does no token healing: start it at a clean token boundary (right after the assistant header).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import llguidance
from llguidance import LLMatcher, LLTokenizer

# One answer's state, its errors and the bitmask helpers live in `constraint`; named here too, where a request
# meets them (the grammar it compiles, the errors it may raise).
from runtime.decode.constraint import Constraint as Constraint
from runtime.decode.constraint import ConstraintError as ConstraintError
from runtime.decode.constraint import GrammarError as GrammarError
from runtime.decode.constraint import GrammarLimit as GrammarLimit
from runtime.decode.constraint import apply_bitmask as apply_bitmask
from runtime.decode.constraint import llguidance_reason, one_line
from runtime.decode.constraint import unpack_bitmask as unpack_bitmask
from runtime.errors import SpecQuantError
from runtime.schema_limits import SchemaBudget

if TYPE_CHECKING:
    from runtime.decode.llama_backend import LlamaBackend

Whitespace = Literal["compact", "bounded", "flexible"]

# At each place JSON allows whitespace: up to 20 spaces/tabs, or one line break and up to 20 of them (enough for
# pretty-printed JSON ten levels deep). Unbounded whitespace ("flexible", llguidance's default) lets a small
# model loop on blank lines forever and widens every mask.
BOUNDED_WHITESPACE = r"[\x20\x09]{1,20}|\r?\n[\x20\x09]{0,20}"

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = (
    "items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "contains", "propertyNames",
    "not", "if", "then", "else",
)  # fmt: skip
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_OPEN_KEYS = ("additionalProperties", "patternProperties", "unevaluatedProperties")



# --- the tokenizer -------------------------------------------------------------------------------------------

_tokenizers: dict[str, LLTokenizer] = {}
_lock = threading.Lock()


def tokenizer_for(source: LlamaBackend | str | os.PathLike[str]) -> LLTokenizer:
    """llguidance's tokenizer for a GGUF (a path, or a `LlamaBackend` for its `.path`), cached per file.

    The first call per file loads only the vocabulary (llama.cpp `vocab_only`), so it neither needs nor touches
    a loaded backend's model or context, and stays valid after that backend is closed. Qwen's 151,936 tokens take
    about a second (most of it llguidance's own token-trie and slicer build).
    """
    path = Path(getattr(source, "path", source)).resolve()
    key = str(path)
    with _lock:
        tokenizer = _tokenizers.get(key)
        if tokenizer is None:
            tokenizer = _tokenizers[key] = _build_tokenizer(path)
        return tokenizer


def _build_tokenizer(path: Path) -> LLTokenizer:
    from runtime.decode.llama_backend import load_vocabulary

    vocab = load_vocabulary(path)
    # The same rule as llguidance.llamacpp.lltokenizer_from_vocab (and llama.cpp's common/llguidance.cpp, which
    # tests "renders as nothing without special=True"): markup tokens get a 0xff prefix, which makes them
    # special: no text rule can produce them and a grammar can only name them (`<|im_end|>`). Unused padding
    # entries (Qwen pads 151,665 to 151,936) render as b"" and are never allowed.
    tokens = [b"\xff" + p if p and m else p for p, m in zip(vocab.pieces, vocab.markup, strict=True)]
    # Every end-of-generation token ends an answer (LlamaBackend.is_end_of_generation stops on all of them);
    # the model's EOS comes first, as llguidance reports the first one as `eos_token`.
    if not vocab.eos_tokens:
        raise SpecQuantError(f"{path} declares no end-of-generation token: a grammar could never end")
    try:  # llguidance calls llama.cpp's tokenizer (add_special=False, parse_special=False) for forced tokens
        return LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]  # missing from llguidance's stubs
            tokens=tokens, vocab_ptr=vocab.vocab_ptr, tokenize_fptr=vocab.tokenize_fptr, eos_token=vocab.eos_tokens
        )
    except ValueError as e:
        raise SpecQuantError(f"llguidance cannot use the vocabulary of {path}: {e}") from None


def markup_token(path: str | os.PathLike[str], text: str) -> int | None:
    """The id of the markup token spelled `text` in the GGUF at `path` (Qwen's `<tool_call>`), if it has one: a
    grammar names it as `<[id]>`, since no text rule can produce it."""
    return _markup_tokens(str(Path(path).resolve())).get(text.encode())


def markup_spellings(path: str | os.PathLike[str]) -> dict[str, int]:
    """The markup tokens of the GGUF at `path` by spelling (`<|im_end|>`, `<tool_call>`): text that a message
    may hold, which must stay text (runtime.engine.markup)."""
    return {p.decode("utf-8", "replace"): i for p, i in _markup_tokens(str(Path(path).resolve())).items()}


@functools.lru_cache(maxsize=8)
def _markup_tokens(path: str) -> dict[bytes, int]:
    from runtime.decode.llama_backend import load_vocabulary

    vocab = load_vocabulary(Path(path))
    return {p: i for i, (p, m) in enumerate(zip(vocab.pieces, vocab.markup, strict=True)) if m and p}


# --- grammars ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grammar:
    """A validated llguidance grammar; `constraint(tokenizer)` starts one answer under it.

    `source` is llguidance's grammar text (for a JSON schema, a small wrapper around the schema: the real
    compilation happens per tokenizer, once, and is then shared by every `Constraint`). `warnings` lists what a
    non-strict schema asked for and will not be enforced.
    """

    source: str
    warnings: tuple[str, ...] = ()
    # per tokenizer (held, so its id stays unique): the compiled matcher every Constraint copies
    _compiled: dict[int, tuple[LLTokenizer, LLMatcher]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_json_schema(
        cls,
        schema: Mapping[str, Any] | str,
        strict: bool = True,
        *,
        whitespace: Whitespace = "bounded",
        close_objects: bool = True,
        budget: SchemaBudget | None = None,
    ) -> Grammar:
        """Compile a JSON schema (a dict or its JSON text).

        strict: every keyword must be enforced; an unsupported keyword or format raises `GrammarError`. With
            strict=False, llguidance's `lenient` mode: those are ignored (listed in `warnings`) and `oneOf` is
            read as `anyOf`. Invalid or unsatisfiable schemas raise either way.
        whitespace: "compact" (none: `{"a":1}`, the most forced tokens), "bounded" (`BOUNDED_WHITESPACE`) or
            "flexible" (any run of JSON whitespace, llguidance's default). A top-level `x-guidance` in the
            schema that sets `whitespace_flexible` or `whitespace_pattern` replaces it.
        close_objects: an object schema with `properties` but no `additionalProperties`/`patternProperties`/
            `unevaluatedProperties` gets `additionalProperties: false`, as llama.cpp's own schema converter
            does; without it, JSON Schema's default lets the model append keys of its own invention after the
            listed ones. Branches of an `allOf` (and definitions they reference) and objects combined with
            `anyOf`/`oneOf`/`allOf`/`$ref` siblings stay open, since closing them would change the intersection.
        budget: the request's `SchemaBudget` (runtime.schema_limits), shared by all its schemas; a schema
            over a limit raises `SchemaTooLarge` (a `GrammarError`'s sibling: a `UserError`) before compiling.
        """
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
        if not isinstance(schema, Mapping):
            raise GrammarError(f"a JSON schema must be a JSON object, not {type(schema).__name__}")
        (budget or SchemaBudget()).check(schema)
        schema, defaults, overrides = _prepared(schema, strict, whitespace, close_objects)
        try:
            source = LLMatcher.grammar_from_json_schema(schema, defaults=defaults, overrides=overrides)
        except (ValueError, TypeError) as e:
            raise GrammarError(f"unsupported JSON schema: {one_line(str(e))}") from None
        return cls._validated(source, "unsupported JSON schema")

    @classmethod
    def json_object(cls, *, whitespace: Whitespace = "bounded") -> Grammar:
        """Any JSON object (`response_format: {"type": "json_object"}`)."""
        return cls.from_json_schema({"type": "object"}, strict=True, whitespace=whitespace, close_objects=False)

    @classmethod
    def from_lark(cls, lark: str) -> Grammar:
        """A grammar in llguidance's Lark dialect (it may embed JSON schemas with `%json { ... }`)."""
        return cls._validated(LLMatcher.grammar_from_lark(lark), "invalid grammar")

    @classmethod
    def _validated(cls, source: str, what: str) -> Grammar:
        is_error, messages = LLMatcher.validate_grammar_with_warnings(source, limits=_limits())
        if is_error:
            raise GrammarError(f"{what}: {llguidance_reason(messages[0])}")
        return cls(source, tuple(one_line(m) for m in messages))

    def __getstate__(self) -> dict[str, Any]:  # to a child process: the text, not the compiled matchers
        return {"source": self.source, "warnings": self.warnings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "source", state["source"])
        object.__setattr__(self, "warnings", state["warnings"])
        object.__setattr__(self, "_compiled", {})

    def constraint(self, tokenizer: LLTokenizer) -> Constraint:
        """A fresh `Constraint` for one answer. The first call per tokenizer compiles the grammar against the
        vocabulary (lexer and token-trie tables); later ones copy that compiled matcher, which is much cheaper."""
        entry = self._compiled.get(id(tokenizer))
        if entry is None:
            template = LLMatcher(tokenizer, self.source, log_level=0, limits=_limits())
            if template.is_error():
                raise GrammarError(f"the grammar does not compile: {llguidance_reason(template.get_error())}")
            entry = self._compiled[id(tokenizer)] = (tokenizer, template)
        return Constraint(entry[1].deep_copy(), tokenizer)


def lark_json(
    schema: Mapping[str, Any],
    strict: bool = True,
    whitespace: Whitespace = "bounded",
    close_objects: bool = True,
    budget: SchemaBudget | None = None,
) -> str:
    """`schema` as the text after `%json` in a Lark grammar (`Grammar.from_lark`), read with the options
    `Grammar.from_json_schema` takes: the same defaults and overrides, in the schema's own `x-guidance`, and
    the same limits."""
    (budget or SchemaBudget()).check(schema)
    schema, defaults, overrides = _prepared(schema, strict, whitespace, close_objects)
    own = schema.get("x-guidance")
    schema["x-guidance"] = {**(defaults or {}), **(own if isinstance(own, dict) else {}), **overrides}
    return json.dumps(schema)  # ASCII: a lone surrogate stays an escape, which llguidance refuses by name


def _prepared(
    schema: Mapping[str, Any], strict: bool, whitespace: Whitespace, close_objects: bool
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """A copy of `schema` (its objects closed where asked) with llguidance's defaults for it (the whitespace,
    unless the schema's own `x-guidance` chooses it) and overrides (lenient unless strict)."""
    schema = copy.deepcopy(dict(schema))
    if close_objects:
        _close_objects(schema)
    own = schema.get("x-guidance")
    chosen = isinstance(own, dict) and any(k.startswith("whitespace") for k in own)
    return schema, None if chosen else _whitespace_options(whitespace), {"lenient": not strict}


def _whitespace_options(whitespace: Whitespace) -> dict[str, Any]:
    if whitespace == "compact":
        return {"whitespace_flexible": False}
    if whitespace == "bounded":
        return {"whitespace_pattern": BOUNDED_WHITESPACE}
    if whitespace == "flexible":
        return {"whitespace_flexible": True}
    raise ValueError(f"whitespace must be compact, bounded or flexible, not {whitespace!r}")




@functools.lru_cache(maxsize=1)
def _limits() -> llguidance.LLParserLimits:
    """llguidance's default resource limits, with terse errors: a verbose one carries the parser's state and
    the grammar, which are not for a client's eyes."""
    return llguidance.LLParserLimits(verbose_errors=False)


def _close_objects(root: dict[str, Any]) -> None:
    """Set `additionalProperties: false` on object schemas that list `properties` and say nothing else about
    extra keys, in place. What is intersected with another schema stays open: `allOf` branches, `anyOf`/`oneOf`
    branches beside `properties`, nodes with such siblings, and the definitions all those reach via `$ref`."""
    open_refs: set[str] = set()

    def refs_in(node: Any, intersected: bool) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and (intersected or "properties" in node):
                open_refs.add(ref)
            for key, value in node.items():
                if key not in ("enum", "const", "default", "examples"):
                    refs_in(value, intersected or _intersects(node, key))
        elif isinstance(node, list):
            for item in node:
                refs_in(item, intersected)

    refs_in(root, False)
    # Definitions reached from an allOf branch, and everything they reach in turn, stay open.
    defs = {f"#/{group}/{name}": sub for group in ("$defs", "definitions") if isinstance(root.get(group), dict)
            for name, sub in root[group].items()}  # fmt: skip
    seen: set[str] = set()
    while pending := (open_refs & defs.keys()) - seen:
        for ref in pending:
            seen.add(ref)
            refs_in(defs[ref], True)
    open_defs = {id(defs[r]) for r in seen}

    def close(node: Any, is_open: bool) -> None:
        if not isinstance(node, dict):
            return
        is_open = is_open or id(node) in open_defs
        # A node combined with siblings (`{"properties": ..., "anyOf": [...]}` is an intersection) stays open too.
        combined = any(k in node for k in ("allOf", "anyOf", "oneOf", "$ref"))
        if not is_open and not combined and "properties" in node and not any(k in node for k in _OPEN_KEYS):
            node["additionalProperties"] = False
        for key in _SCHEMA_MAPS:
            if isinstance(node.get(key), dict):
                for sub in node[key].values():
                    close(sub, is_open)
        for key in _SCHEMA_ONE:
            close(node.get(key), is_open)
        for key in _SCHEMA_LISTS:
            if isinstance(node.get(key), list):
                for sub in node[key]:
                    close(sub, is_open or _intersects(node, key))

    close(root, False)


def _intersects(node: dict[str, Any], key: str) -> bool:
    """Whether the schemas under `node[key]` are intersected with `node`'s own properties (or each other)."""
    return key == "allOf" or (key in ("anyOf", "oneOf") and "properties" in node)


