"""runtime.decode.grammar on SmolLM2-135M-Instruct's vocabulary (49,152 tokens; the demo model's GGUF):
the tokenizer, masks, forced tokens, rollback and schema errors. Only the vocabulary is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from runtime.decode.grammar import (
    ConstraintError,
    Grammar,
    GrammarError,
    apply_bitmask,
    tokenizer_for,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "role": {"enum": ["admin", "developer", "viewer"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    },
    "required": ["name", "age", "role", "tags"],
}
DOC = {"name": "Ada", "age": 36, "role": "developer", "tags": ["math", "engines"]}
IM_END = 2  # SmolLM2's <|im_end|>, its EOS


@pytest.fixture(scope="module")
def tok(demo_gguf: Path):
    return tokenizer_for(demo_gguf)


def test_tokenizer_from_the_gguf_vocabulary(tok, demo_gguf: Path) -> None:
    assert tok.vocab_size == 49152
    assert tok.eos_token == IM_END and set(tok.eos_tokens) >= {0, IM_END}  # every end-of-generation token
    assert tok.is_special_token(1) and tok.is_special_token(IM_END)  # <|im_start|>, <|im_end|>: control tokens
    assert not tok.is_special_token(tok.tokenize_str("{")[0])
    assert tok.tokenize_str("<|im_end|>") != [IM_END]  # plain text never becomes a control token
    assert tokenizer_for(str(demo_gguf)) is tok  # cached per file


def test_a_valid_document_is_accepted_token_by_token(tok) -> None:
    c = Grammar.from_json_schema(SCHEMA).constraint(tok)
    ids = tok.tokenize_str(json.dumps(DOC))
    for t in ids:
        assert c.accepts(t)
        assert c.allowed_mask()[t]
        assert not c.done
        c.consume(t)
    assert c.is_accepting and c.done and c.n_consumed == len(ids)
    assert set(c.allowed_tokens().tolist()) == set(tok.eos_tokens)  # only an end may follow
    c.consume(IM_END)
    assert c.n_consumed == len(ids)  # an EOS after the grammar stopped is not held


def test_a_forbidden_token_is_rejected_and_nothing_is_consumed(tok) -> None:
    c = Grammar.from_json_schema(SCHEMA).constraint(tok)
    ids = tok.tokenize_str(json.dumps(DOC))
    c.consume(ids[:3])
    bad = tok.tokenize_str("[")[0]
    assert not c.accepts(bad)
    assert not c.allowed_mask()[bad]
    with pytest.raises(ConstraintError, match="not allowed after 3 tokens"):
        c.consume(bad)  # a string must open after `{"name":`
    c.rollback(1)
    with pytest.raises(ConstraintError, match=r"not allowed after 3 tokens \(the 1 before it are\)"):
        c.consume([ids[2], bad])
    assert c.n_consumed == 2
    assert not c.accepts(IM_END)  # no end while the object is open
    c.consume(ids[2:])  # still usable: llguidance never saw the bad token
    assert c.done


def test_rollback_restores_the_state(tok) -> None:
    c = Grammar.from_json_schema(SCHEMA).constraint(tok)
    ids = tok.tokenize_str(json.dumps(DOC))
    c.consume(ids[:5])
    before = c.bitmask().copy()
    c.consume(ids[5:12])
    assert not np.array_equal(c.bitmask(), before)
    c.rollback(7)
    assert c.n_consumed == 5
    assert np.array_equal(c.bitmask(), before)
    with pytest.raises(ConstraintError, match="cannot roll back 6"):
        c.rollback(6)  # would poison llguidance's matcher; refused, state kept
    c.consume(ids[5:])
    assert c.done
    c.reset()
    assert c.n_consumed == 0 and c.accepts(ids[0])


def test_rollback_counts_an_eos_that_was_held(tok) -> None:
    c = Grammar.from_json_schema({"type": "integer"}).constraint(tok)
    c.consume(tok.tokenize_str("42"))
    assert c.is_accepting and not c.done  # 420 could follow
    c.consume(IM_END)  # accepted before a stop: held
    assert c.done and c.n_consumed == 3
    c.rollback(1)
    assert not c.done and c.accepts(tok.tokenize_str("7")[0])


def test_forced_tokens(tok) -> None:
    c = Grammar.from_json_schema(SCHEMA, whitespace="compact").constraint(tok)
    assert c.forced_bytes() == b'{"name":"'
    assert tok.decode_bytes(c.forced()) == b'{"name'  # the `":"` tail is held back: it may merge further
    c.consume(tok.tokenize_str('{"'))
    assert c.forced() == tok.tokenize_str("name")
    c.consume(c.forced())
    assert c.forced_bytes().startswith(b'":')
    allowed = [tok.decode_bytes([int(t)]) for t in c.allowed_tokens()]
    assert allowed and all(b.startswith(b'":') or b'":'.startswith(b) for b in allowed)
    # With whitespace allowed between tokens, only key names are forced.
    b = Grammar.from_json_schema(SCHEMA, whitespace="bounded").constraint(tok)
    b.consume(tok.tokenize_str('{"'))
    assert b.forced_bytes() == b'name"'


def test_mask_logits(tok) -> None:
    c = Grammar.from_json_schema(SCHEMA).constraint(tok)
    c.consume(tok.tokenize_str('{"name": "Ada", "age": '))
    logits = np.random.default_rng(0).standard_normal(tok.vocab_size).astype(np.float32)
    c.mask_logits(logits)
    finite = np.isfinite(logits)
    assert np.array_equal(finite, c.allowed_mask())
    allowed = {tok.decode_bytes([int(t)]) for t in np.flatnonzero(finite)}
    assert {b"0", b"1", b"9"} <= allowed  # digits, or more (bounded) whitespace
    assert all(b.isdigit() or not b.strip(b" \t") for b in allowed)
    two = np.zeros((2, tok.vocab_size + 64), dtype=np.float32)  # rows wider than the vocabulary
    apply_bitmask(two, np.stack([c.bitmask(), c.bitmask()]))
    assert np.isinf(two[:, tok.vocab_size :]).all() and np.array_equal(np.isfinite(two[1, : tok.vocab_size]), finite)


def test_draft_masks_match_step_by_step_masks(tok) -> None:
    c = Grammar.from_json_schema(SCHEMA).constraint(tok)
    ids = tok.tokenize_str(json.dumps(DOC))
    c.consume(ids[:4])
    draft = [*ids[4:9], tok.tokenize_str("[")[0], ids[10]]
    masks, n_valid = c.draft_masks(draft)
    assert n_valid == 5 and c.n_consumed == 4
    for i in range(n_valid + 1):
        assert np.array_equal(masks[i], c.bitmask()), i
        if i < n_valid:
            c.consume(draft[i])
    assert not masks[n_valid + 1 :].any()


def test_objects_are_closed_unless_asked(tok) -> None:
    extra = tok.tokenize_str(json.dumps({**DOC, "extra": 1}))
    closed = Grammar.from_json_schema(SCHEMA).constraint(tok)
    assert closed.valid_prefix(extra) < len(extra)
    open_ = Grammar.from_json_schema(SCHEMA, close_objects=False).constraint(tok)
    assert open_.valid_prefix(extra) == len(extra)
    # allOf branches stay open: closing them would make this intersection unsatisfiable for `b`.
    both = {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "integer"}}}]}
    doc = tok.tokenize_str('{"a": 1, "b": 2}')
    assert Grammar.from_json_schema(both).constraint(tok).valid_prefix(doc) == len(doc)
    siblings = {"properties": {"a": {"type": "integer"}}, "anyOf": [{"properties": {"b": {"type": "integer"}}}]}
    assert Grammar.from_json_schema(siblings).constraint(tok).valid_prefix(doc) == len(doc)
    nested = {"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}, "$defs": {"X": both}}
    doc_x = tok.tokenize_str('{"x": {"a": 1, "b": 2}}')
    assert Grammar.from_json_schema(nested).constraint(tok).valid_prefix(doc_x) == len(doc_x)
    # A nested model through $ref (pydantic's layout) is closed like any other.
    model = {"properties": {"x": {"$ref": "#/$defs/X"}}, "$defs": {"X": {"properties": {"a": {"type": "integer"}}}}}
    doc_extra = tok.tokenize_str('{"x": {"a": 1, "b": 2}}')
    assert Grammar.from_json_schema(model).constraint(tok).valid_prefix(doc_extra) < len(doc_extra)
    anything = Grammar.json_object().constraint(tok)
    doc = tok.tokenize_str('{"x": [1, {"y": null}], "z": "w"}')
    assert anything.valid_prefix(doc) == len(doc)


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, '["not"]'),
        ({"type": "string", "format": "credit-card"}, "Unknown format: credit-card"),
        ({"type": "strin"}, "Invalid type: strin"),
        ({"type": "integer", "minimum": 5, "maximum": 2}, "minimum (5) is greater than maximum (2)"),
        ({"type": "string", "pattern": "(?<=a)b"}, "look-around"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "/$defs/missing"),
        ('{"type": ', "not valid JSON"),
        ([{"type": "string"}], "must be a JSON object"),
    ],
)
def test_a_bad_schema_raises_naming_the_problem(schema: object, named: str) -> None:
    with pytest.raises(GrammarError) as err:
        Grammar.from_json_schema(schema)  # type: ignore[arg-type]
    assert named in str(err.value)
    assert isinstance(err.value, ValueError)


def test_non_strict_ignores_what_it_cannot_enforce(tok) -> None:
    g = Grammar.from_json_schema(
        {"type": "object", "properties": {"a": {"type": "string", "format": "credit-card"}, "b": {"not": {}}}},
        strict=False,
    )
    assert any("credit-card" in w for w in g.warnings) and any('"not"' in w for w in g.warnings)
    c = g.constraint(tok)
    doc = tok.tokenize_str('{"a": "x", "b": 1}')
    assert c.valid_prefix(doc) == len(doc)
    with pytest.raises(GrammarError, match="Unsatisfiable"):  # contradictions stay errors
        Grammar.from_json_schema({"type": "integer", "minimum": 5, "maximum": 2}, strict=False)


# --- limits (runtime.schema_limits) ----------------------------------------------------------------------


def _object(prefix: str, n: int, required: bool = False) -> dict:
    names = [f"{prefix}{i}" for i in range(n)]
    return {"type": "object", "properties": {name: {} for name in names}, **({"required": names} if required else {})}


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        (_object("k", 30_000), "more than 5000 properties"),  # the 409 KB schema that overflowed the stack
        (_object("k", 401), "401 optional properties; at most 400"),
        ({"anyOf": [{"const": i} for i in range(3_000)]}, "anyOf has 3000 branches; at most 500"),
        ({"enum": list(range(1_001))}, "more than 1000 enum values"),
        (_nested(70), "nested more than 64 levels deep"),
        ({"type": "array", "prefixItems": [{"type": "string"}] * 10_001}, "more than 10000 objects"),
    ],
    ids=["properties", "optional", "branches", "enum", "depth", "nodes"],
)
def test_a_schema_over_a_limit_is_refused_before_compiling(schema: dict, named: str) -> None:
    from runtime.schema_limits import SchemaTooLarge

    with pytest.raises(SchemaTooLarge, match=named):
        Grammar.from_json_schema(schema)


def test_the_limits_count_a_whole_request() -> None:
    """The response format's schema and the tools' parameters share one budget."""
    from runtime.schema_limits import SchemaBudget, SchemaTooLarge

    budget = SchemaBudget()
    Grammar.from_json_schema(_object("a", 3_000, required=True), budget=budget)
    with pytest.raises(SchemaTooLarge, match="more than 5000 properties"):
        Grammar.from_json_schema(_object("b", 3_000, required=True), budget=budget)
    Grammar.from_json_schema(_object("b", 3_000, required=True))  # alone it is within the limits


def test_a_parser_limit_mid_answer_is_the_grammars_fault_not_the_engines(tok) -> None:
    """Within the limits, two objects of 400 optional keys each in an anyOf still pass llguidance's row limit
    (2,000 items) at the first key: a GrammarLimit, a UserError with a one-line reason."""
    from runtime.decode.grammar import GrammarLimit

    schema = {"anyOf": [_object("k", 400), _object("j", 400)]}
    c = Grammar.from_json_schema(schema).constraint(tok)
    with pytest.raises(GrammarLimit, match="too complex to follow this answer: Parser Error: Current row") as e:
        c.consume(tok.tokenize_str('{"'))
        c.bitmask()
    assert "\n" not in str(e.value) and "non-verbose" not in str(e.value)
