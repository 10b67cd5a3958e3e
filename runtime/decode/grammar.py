"""JSON-schema-constrained decoding over llguidance: the tokenizer, compiled grammars and per-answer constraints.

Three pieces, in the order a request uses them:

* `tokenizer_for(path_or_backend)`: llguidance's view of a GGUF's vocabulary (every token's bytes, the
  end-of-generation tokens, llama.cpp's own tokenizer as a native callback), built once per model file from a
  vocab-only load (~0.1 s) and cached for the life of the process.
* `Grammar.from_json_schema(schema, strict)` / `Grammar.json_object()`: a validated grammar. A schema llguidance
  cannot enforce raises `GrammarError` (a `UserError` and a `ValueError`) with llguidance's own words, which
  name the problem: `Unimplemented keys: ["not"]`, `Unknown format: foo`, `Invalid type: strin`, `Unsatisfiable
  schema: minimum (5) is greater than maximum (2)`, `Pointer '/defs/x' does not exist`, a regex error ...
* `Constraint`: one answer's parser state (an `llguidance.LLMatcher`): the mask of allowed tokens,
  `mask_logits`, `accepts`, `consume`, `rollback`, `forced` (tokens the grammar alone decides) and the masks a
  speculative verify step needs for a whole draft (`draft_masks`).

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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import llguidance
import numpy as np
from llguidance import LLMatcher, LLTokenizer

from runtime.decode.schema_limits import SchemaBudget
from runtime.errors import SpecQuantError, UserError

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


class GrammarError(UserError, ValueError):
    """A schema or grammar that llguidance cannot compile or enforce; the message says which part."""


class ConstraintError(SpecQuantError):
    """A token the grammar does not allow here, or a rollback past the first token; the state is unchanged."""


class GrammarLimit(GrammarError):
    """llguidance gave up mid-answer (a parser or lexer limit): the request's grammar, not the engine, is at fault."""


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
        budget: the request's `SchemaBudget` (runtime.decode.schema_limits), shared by all its schemas; a schema
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
            raise GrammarError(f"unsupported JSON schema: {_one_line(str(e))}") from None
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
            raise GrammarError(f"{what}: {_reason(messages[0])}")
        return cls(source, tuple(_one_line(m) for m in messages))

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
                raise GrammarError(f"the grammar does not compile: {_reason(template.get_error())}")
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


def _one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())[:600]


_INTERNALS = ("<non-verbose", "stack backtrace", "note: run with", "panicked at", "Parser state", "Grammar:")


def _reason(message: str) -> str:
    """An llguidance error on one line, up to what names its internals (parser state, a grammar dump, a Rust
    panic's location and backtrace), which say nothing about the schema's fault."""
    kept = []
    for line in message.splitlines():
        if any(line.strip().startswith(m) for m in _INTERNALS) or line.startswith("   0:"):
            break
        kept.append(line)
    return _one_line("\n".join(kept))[:400] or "llguidance gave no reason"


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


# --- one answer ----------------------------------------------------------------------------------------------


def _timed(method: Callable[..., Any]) -> Callable[..., Any]:
    """Add the call's time to the constraint's `seconds` (what the grammar costs an answer)."""

    @functools.wraps(method)
    def timed(self: Constraint, *args: Any, **kwargs: Any) -> Any:
        if self._timing:  # called from another timed method: counted there
            return method(self, *args, **kwargs)
        self._timing, t0 = True, time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._timing = False
            self.seconds += time.perf_counter() - t0

    return timed


_executor: llguidance.LLExecutor | None = None


def _single_thread_executor() -> llguidance.LLExecutor:
    global _executor
    if _executor is None:
        _executor = llguidance.LLExecutor(1)  # the decode owns the cores; masks are computed in line
    return _executor


class Constraint:
    """One answer's position in a grammar: what may come next, what must, and how to take tokens back.

    Token masks are bitmasks of int32 words, bit `t % 32` of word `t // 32` set when token `t` is allowed (the
    layout llguidance, xgrammar and llama.cpp share). A mask is computed at most once per state.
    """

    def __init__(self, matcher: LLMatcher, tokenizer: LLTokenizer) -> None:
        self._m = matcher
        self.tokenizer = tokenizer
        self.vocab_size: int = tokenizer.vocab_size
        self.n_words = (self.vocab_size + 31) // 32
        self.eos_tokens: frozenset[int] = frozenset(tokenizer.eos_tokens)
        self._n = 0  # tokens the matcher holds (what rollback may undo)
        self._mask = np.zeros((1, self.n_words), dtype=np.int32)
        self._mask_ok = False
        self.seconds = 0.0  # spent in this constraint's calls: masks, forced tokens, consuming, rolling back
        self._timing = False
        if matcher.is_error():
            raise GrammarError(f"the grammar does not compile: {_reason(matcher.get_error())}")

    def _check(self) -> None:
        """Raise `GrammarLimit` if llguidance has given up on this answer (a parser or lexer limit reached
        mid-answer: the grammar is too large for what the model wrote), instead of masking everything."""
        if self._m.is_error():
            raise GrammarLimit(f"the grammar is too complex to follow this answer: {_reason(self._m.get_error())}")

    # --- state ---
    @property
    def n_consumed(self) -> int:
        """Tokens consumed and still held (an EOS consumed after the grammar completed is not held)."""
        return self._n

    @property
    def is_accepting(self) -> bool:
        """The text so far is a complete match: an EOS may come now."""
        return self._m.is_accepting()

    @property
    def done(self) -> bool:
        """Nothing but an EOS may follow (the grammar is complete and cannot be extended, or an EOS was taken)."""
        return self._m.is_stopped()

    # --- masks ---
    @_timed
    def bitmask(self) -> np.ndarray:
        """The allowed tokens now, as int32 words (shape (n_words,)); a view valid until the state changes."""
        if not self._mask_ok:
            self._m.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
            self._check()
            self._mask_ok = True
        return self._mask[0]

    @_timed
    def allowed_mask(self) -> np.ndarray:
        """The allowed tokens now, as a bool array of vocab_size."""
        return unpack_bitmask(self.bitmask(), self.vocab_size)

    def allowed_tokens(self) -> np.ndarray:
        """The allowed token ids now, ascending."""
        return np.flatnonzero(self.allowed_mask())

    @_timed
    def mask_logits(self, logits: np.ndarray) -> np.ndarray:
        """Set the logits of forbidden tokens to -inf, in place (a row of n_vocab floats); returns `logits`."""
        apply_bitmask(logits, self.bitmask())
        return logits

    def accepts(self, token: int) -> bool:
        """Whether `token` may come next (no state change)."""
        if self._mask_ok:
            return 0 <= token < self.vocab_size and bool((int(self._mask[0, token >> 5]) >> (token & 31)) & 1)
        return self.valid_prefix([token]) == 1

    @_timed
    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the grammar allows in a row from here (no state change)."""
        batch = [int(t) for t in tokens]
        if not batch:
            return 0
        n = self._m.validate_tokens(batch)
        self._check()
        # llguidance's validate_tokens refuses an EOS once the grammar has stopped, though the mask allows it and
        # consume_token takes it (without holding it): count EOS tokens there as valid.
        if n < len(batch) and batch[n] in self.eos_tokens and self._stopped_after(batch[:n]):
            while n < len(batch) and batch[n] in self.eos_tokens:
                n += 1
        return n

    def _stopped_after(self, prefix: list[int]) -> bool:
        """Whether the grammar is stopped after `prefix` (valid tokens); the state is restored."""
        if not prefix:
            return self._m.is_stopped()
        self._m.consume_tokens(prefix)  # validated: every EOS in it was taken before a stop, hence held
        stopped = self._m.is_stopped()
        self._m.rollback(len(prefix))
        return stopped

    def forced(self) -> list[int]:
        """Tokens the grammar forces from here, whatever the model would say (may be empty): they can be
        appended without sampling, and are a draft the verifier accepts for sure. They are not consumed.
        llguidance holds back a forced tail that could merge into a longer token (see `forced_bytes`)."""
        return self._m.compute_ff_tokens()

    def forced_bytes(self) -> bytes:
        """The bytes the grammar forces from here (a superset of what `forced()` tokenizes)."""
        return self._m.compute_ff_bytes()

    # --- moving ---
    @_timed
    def consume(self, tokens: int | np.integer | Sequence[int]) -> None:
        """Advance over `tokens` (sampled or accepted ones). A token the grammar forbids raises
        `ConstraintError` and consumes none of them."""
        batch = [int(tokens)] if isinstance(tokens, (int, np.integer)) else [int(t) for t in tokens]
        if not batch:
            return
        n_valid = self.valid_prefix(batch)
        if n_valid < len(batch):
            bad = batch[n_valid]
            raise ConstraintError(
                f"token {bad} ({self.tokenizer.dbg_tokens([bad])}) is not allowed after "
                f"{self._n + n_valid} tokens{'' if n_valid == 0 else f' (the {n_valid} before it are)'}"
            )
        self._mask_ok = False
        if self.eos_tokens.isdisjoint(batch):
            ok = self._m.consume_tokens(batch)
            held = len(batch)
        else:  # an EOS consumed once the grammar has stopped is not held: count one by one
            ok, held = True, 0
            for t in batch:
                stopped = self._m.is_stopped()
                ok = self._m.consume_token(t)
                if not ok:
                    break
                held += not (stopped and t in self.eos_tokens)
        if not ok:  # validate_tokens said yes: a limit reached on the way, or llguidance disagreeing with itself
            self._check()
            raise ConstraintError(f"llguidance refused tokens it had validated: {_one_line(self._m.get_error())}")
        self._n += held

    @_timed
    def rollback(self, n: int) -> None:
        """Undo the last `n` held tokens (rejected draft tokens)."""
        if n < 0 or n > self._n:
            raise ConstraintError(f"cannot roll back {n} tokens: {self._n} are held")
        if n:
            if not self._m.rollback(n):
                raise ConstraintError(f"llguidance could not roll back {n} tokens: {_one_line(self._m.get_error())}")
            self._n -= n
            self._mask_ok = False

    def reset(self) -> None:
        """Back to the start of the grammar."""
        self.rollback(self._n)

    @_timed
    def draft_masks(self, draft: Sequence[int], out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """The masks a verify step needs: row 0 is the mask now, row i+1 the mask after draft[:i+1].

        Returns (masks of shape (len(draft)+1, n_words), n_valid): draft[:n_valid] is what the grammar allows;
        rows 0..n_valid are filled and the rest are all-forbidden. The state is unchanged afterwards. One call
        into llguidance (`LLExecutor`, one thread), which consumes and rolls back internally.
        """
        rows = len(draft) + 1
        if out is None:
            out = np.zeros((rows, self.n_words), dtype=np.int32)
        else:
            if out.shape[0] < rows or out.shape[1] != self.n_words or out.dtype != np.int32:
                raise ValueError(f"out must be int32 of at least ({rows}, {self.n_words}), not {out.dtype} {out.shape}")
            if not out.flags["C_CONTIGUOUS"]:
                raise ValueError("out must be C-contiguous")
            out[:rows] = 0
        n_valid = self.valid_prefix(draft)
        if n_valid == 0:  # llguidance wants a non-empty draft; the mask now is all there is
            out[0] = self.bitmask()
            return out, 0
        _single_thread_executor().unsafe_compute_mask_ptr_with_draft_token(
            [(self._m, 0, [int(t) for t in draft[:n_valid]])], out.ctypes.data, self.n_words * 4, out.shape[0]
        )
        self._check()
        return out, n_valid


    @_timed
    def mask_rows(self, rows: np.ndarray, draft: Sequence[int]) -> None:
        """Mask verify rows in place: row i as constrained decoding sees it after `draft[:i]` (all of `draft`
        must be allowed; rows has len(draft) + 1 rows)."""
        masks, n_valid = self.draft_masks(draft)
        if n_valid < len(draft):
            raise ConstraintError(f"draft token {draft[n_valid]} is not allowed after {self._n + n_valid} tokens")
        apply_bitmask(rows, masks)


# --- bitmask helpers -----------------------------------------------------------------------------------------


def unpack_bitmask(bitmask: np.ndarray, vocab_size: int) -> np.ndarray:
    """int32 words (..., n_words) -> bool (..., vocab_size)."""
    words = np.ascontiguousarray(bitmask, dtype=np.int32)
    bits = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")
    return bits[..., :vocab_size].view(np.bool_)


def apply_bitmask(logits: np.ndarray, bitmask: np.ndarray) -> None:
    """In place: -inf for the tokens a bitmask forbids. `logits` (V,) with `bitmask` (n_words,), or (R, V) with
    (R, n_words); logits past the mask's 32*n_words tokens are forbidden too."""
    if logits.ndim != bitmask.ndim or logits.shape[:-1] != bitmask.shape[:-1]:
        raise ValueError(f"logits {logits.shape} and bitmask {bitmask.shape} do not match")
    vocab = logits.shape[-1]
    covered = min(vocab, 32 * bitmask.shape[-1])
    allowed = unpack_bitmask(bitmask, covered)
    head = logits[..., :covered]
    if head.ndim == 1 and np.count_nonzero(allowed) * 8 < covered:  # few allowed (most JSON steps): keep those
        idx = np.flatnonzero(allowed)
        keep = head[idx]
        head.fill(-np.inf)
        head[idx] = keep
    else:
        np.copyto(head, -np.inf, where=~allowed)
    if covered < vocab:
        logits[..., covered:] = -np.inf
