"""One answer's position in a grammar (`Constraint`, over an `llguidance.LLMatcher`): the mask of allowed tokens,
`mask_logits`, `accepts`, `consume`, `rollback`, `forced` and the masks a verify step needs for a whole draft;
the bitmask helpers; and the errors grammars and constraints raise. `runtime.decode.grammar` compiles the
grammars that make one (its docstring has the llguidance facts both lean on)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import llguidance
import numpy as np
from llguidance import LLMatcher, LLTokenizer

from runtime.errors import SpecQuantError, UserError


class GrammarError(UserError, ValueError):
    """A schema or grammar that llguidance cannot compile or enforce; the message says which part."""


class ConstraintError(SpecQuantError):
    """A token the grammar does not allow here, or a rollback past the first token; the state is unchanged."""


class GrammarLimit(GrammarError):
    """llguidance gave up mid-answer (a parser or lexer limit): the request's grammar, not the engine, is at fault."""


def one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())[:600]


_INTERNALS = ("<non-verbose", "stack backtrace", "note: run with", "panicked at", "Parser state", "Grammar:")


def llguidance_reason(message: str) -> str:
    """An llguidance error on one line, up to what names its internals (parser state, a grammar dump, a Rust
    panic's location and backtrace), which say nothing about the schema's fault."""
    kept = []
    for line in message.splitlines():
        if any(line.strip().startswith(m) for m in _INTERNALS) or line.startswith("   0:"):
            break
        kept.append(line)
    return one_line("\n".join(kept))[:400] or "llguidance gave no reason"


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
            raise GrammarError(f"the grammar does not compile: {llguidance_reason(matcher.get_error())}")

    def _check(self) -> None:
        """Raise `GrammarLimit` if llguidance has given up on this answer (a parser or lexer limit reached
        mid-answer: the grammar is too large for what the model wrote), instead of masking everything."""
        if self._m.is_error():
            raise GrammarLimit(
                f"the grammar is too complex to follow this answer: {llguidance_reason(self._m.get_error())}"
            )

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
            raise ConstraintError(f"llguidance refused tokens it had validated: {one_line(self._m.get_error())}")
        self._n += held

    @_timed
    def rollback(self, n: int) -> None:
        """Undo the last `n` held tokens (rejected draft tokens)."""
        if n < 0 or n > self._n:
            raise ConstraintError(f"cannot roll back {n} tokens: {self._n} are held")
        if n:
            if not self._m.rollback(n):
                raise ConstraintError(f"llguidance could not roll back {n} tokens: {one_line(self._m.get_error())}")
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
