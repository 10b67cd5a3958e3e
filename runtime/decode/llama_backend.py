"""The one module that touches llama-cpp-python's internals (`_internals`: model, context, batch).

A custom verify loop needs what the `Llama` class hides: logits for chosen batch rows only, KV-cache
rollback, and an abort hook. An upgrade of llama-cpp-python should touch this file alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runtime.errors import Cancelled, ModelError, SpecQuantError, UserError
from runtime.machine.hardware import ensure_backends, physical_cores
from runtime.machine.llama_log import route_llama_log


@dataclass(frozen=True)
class LoadOptions:
    """How one tier is loaded. Threads are explicit: llama-cpp-python's default is 1 on a 2-core machine."""

    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 0  # 0: physical cores
    n_gpu_layers: int = 0
    op_offload: bool | None = None  # None: llama.cpp's default; False for CPU-only plans
    seed: int = 0


# ggml's CPU backend computes a batch of rows with other kernels than one token, from a size on: the rows
# then differ from one-token decoding in their last bits (0.7 logits apart on the 1.5B's Q4_K_M), and a
# greedy verify can keep a word that plain decoding of the same tier would not write. A verify batch stays
# below these sizes, so that every kept token is the tier's own one-token greedy choice.
REPACKED_GEMM_ROWS = 4  # repacked weights (CPU_REPACK, AMX, KleidiAI): GEMV per row below 4 rows, GEMM from 4
TILED_ROWS = 8  # ggml-cpu's tiled K-quant and IQ matmul (x86) from 8 rows; GGML_CPU_TILED_MM=0 turns it off
_PLAIN_BUFFERS = {"CPU", "CPU_Mapped", "CPU_HOST"}
_TILED_TYPES = {"q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s"}
_TILED_TYPES |= {"iq1_s", "iq1_m"}


def exact_rows(facts: Sequence[str], n_gpu_layers: int) -> int | None:
    """The largest batch whose rows equal one-token decoding bit for bit, from what the load logged; None:
    no bound known. F16 and Q8_0/Q4_0/Q5_0 weights go through llamafile's sgemm from 2 rows, which keeps
    Q8_0's rows exact and F16's within float rounding (1e-6 relative): no bound is set for them. On a GPU the
    kernels' own batch thresholds are not measured here."""
    if n_gpu_layers:
        return None
    buffers = {f.split(":", 1)[1] for f in facts if f.startswith("buffer:")}
    types = {f.split(":", 1)[1] for f in facts if f.startswith("type:")}
    if buffers - _PLAIN_BUFFERS:
        return REPACKED_GEMM_ROWS - 1
    tiled_on = os.environ.get("GGML_CPU_TILED_MM", "1").strip() not in ("0", "")
    if types & _TILED_TYPES and tiled_on and platform.machine().lower() in ("x86_64", "amd64"):
        return TILED_ROWS - 1
    return None


class LlamaBackend:
    """One loaded GGUF with one KV cache (sequence 0): decode, roll back, read logits, tokenize."""

    def __init__(self, path: Path, options: LoadOptions | None = None) -> None:
        import llama_cpp
        from llama_cpp import _internals

        self._llama_cpp = llama_cpp
        route_llama_log()
        ensure_backends()
        opts = options or LoadOptions()
        self.options = opts
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"model file {self.path} does not exist")
        threads = opts.n_threads or physical_cores()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = opts.n_gpu_layers
        mparams.use_mmap = True
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = opts.n_ctx
        cparams.n_batch = opts.n_batch
        cparams.n_ubatch = min(opts.n_ubatch, opts.n_batch)
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.embeddings = False
        if opts.op_offload is not None:
            cparams.op_offload = opts.op_offload
        facts_from = route_llama_log().load_count
        try:
            # verbose=True only means "do not redirect stdout/stderr"; the log goes through llama_log_set.
            self._model = _internals.LlamaModel(path_model=str(self.path), params=mparams, verbose=True)
        except ValueError as e:  # a damaged file: the model's fault, not the request's (an API's 400)
            raise ModelError(f"llama.cpp cannot load {self.path}: {route_llama_log().last() or e}") from None
        try:
            self._ctx = _internals.LlamaContext(model=self._model, params=cparams, verbose=True)
        except ValueError as e:
            self._model.close()
            raise ModelError(context_failure(self.path, opts.n_ctx, route_llama_log().last() or str(e))) from None
        self.n_batch = opts.n_batch
        # Verify batches of a parent stay within this many rows (None: no bound): see REPACKED_GEMM_ROWS.
        self.exact_rows = exact_rows(route_llama_log().facts_since(facts_from), opts.n_gpu_layers)
        self._batch = _internals.LlamaBatch(n_tokens=opts.n_batch, embd=0, n_seq_max=1, verbose=True)
        self.n_ctx = self._ctx.n_ctx()
        self.n_vocab = self._model.n_vocab()
        self.tokens: list[int] = []  # exactly the tokens held in the KV cache, in order
        self._metadata: dict[str, str] | None = None
        self.llama_seconds = 0.0  # time spent inside llama_decode, to measure our own overhead
        self.threads = threads
        self._abort_event: threading.Event | None = None
        self._abort_cb = llama_cpp.ggml_abort_callback(self._should_abort)
        llama_cpp.llama_set_abort_callback(self._ctx.ctx, self._abort_cb, None)

    # --- tokens -----------------------------------------------------------------------------------
    def tokenize(self, text: str, add_bos: bool = False, special: bool = True) -> list[int]:
        return self._model.tokenize(text.encode("utf-8"), add_bos, special)

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        return _piece(self._model.vocab, token, special)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        return b"".join(self.token_bytes(t, special) for t in tokens).decode("utf-8", errors="replace")

    @property
    def eos(self) -> int:
        return self._model.token_eos()

    @property
    def bos(self) -> int:
        return self._model.token_bos()

    def is_end_of_generation(self, token: int) -> bool:
        return bool(self._llama_cpp.llama_vocab_is_eog(self._model.vocab, token))

    def metadata(self) -> dict[str, str]:
        """GGUF metadata as strings (read once: the chat template is asked for every turn)."""
        if self._metadata is None:
            self._metadata = self._model.metadata()
        return self._metadata

    # --- decoding ---------------------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the KV cache already holds."""
        n = 0
        for a, b in zip(self.tokens, tokens, strict=False):
            if a != b:
                break
            n += 1
        return n

    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = (), max_rows: int | None = None) -> np.ndarray:
        """Append `tokens` to the KV cache; return logits (len(logit_rows), n_vocab) for those row indices.

        Only the requested rows get logits from llama.cpp. Long inputs are split into n_batch chunks, or into
        pieces of `max_rows` (a verify within `exact_rows`).
        """
        if self.n_past + len(tokens) > self.n_ctx:
            raise SpecQuantError(f"context full: {self.n_past} + {len(tokens)} tokens > n_ctx {self.n_ctx}")
        wanted = sorted(set(logit_rows))
        if wanted and (wanted[0] < 0 or wanted[-1] >= len(tokens)):
            raise ValueError(f"logit rows {wanted} outside a batch of {len(tokens)}")
        out = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        row_of = {r: i for i, r in enumerate(wanted)}
        b = self._batch.batch
        piece = min(self.n_batch, max_rows) if max_rows else self.n_batch
        for start in range(0, len(tokens), piece):
            chunk = tokens[start : start + piece]
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = self.n_past + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = (start + i) in row_of
            b.n_tokens = len(chunk)
            t0 = time.perf_counter()
            try:
                rc = self._llama_cpp.llama_decode(self._ctx.ctx, b)
            finally:
                route_llama_log().aborting = False
            self.llama_seconds += time.perf_counter() - t0
            if rc != 0:
                # llama.cpp keeps the KV cache consistent up to the last finished ubatch; roll back to
                # where this call started so the caller can retry cleanly.
                self._ctx.kv_cache_seq_rm(0, self.n_past, -1)
                if rc == 2:
                    raise Cancelled("cancelled during decoding")
                raise SpecQuantError(f"llama_decode failed with code {rc} ({route_llama_log().last()})")
            self.tokens.extend(int(t) for t in chunk)
            # Rows that asked for logits are stored contiguously, in batch order.
            rows_here = [row_of[start + i] for i in range(len(chunk)) if (start + i) in row_of]
            if rows_here:
                ptr = self._llama_cpp.llama_get_logits(self._ctx.ctx)
                out[rows_here] = np.ctypeslib.as_array(ptr, shape=(len(rows_here), self.n_vocab))
        return out

    def truncate(self, n: int) -> None:
        """Keep only the first `n` tokens in the KV cache (llama_memory_seq_rm)."""
        if n < self.n_past:
            if not self._ctx.kv_cache_seq_rm(0, n, -1):
                raise SpecQuantError(f"llama.cpp could not roll the KV cache back to {n} tokens")
            del self.tokens[n:]

    # --- prompt states (runtime.engine.prompt_cache keeps them) -------------------------------------
    def save_prefix_state(self) -> tuple[tuple[int, ...], bytes]:
        """The KV cache of sequence 0 as llama.cpp serialises it (llama_state_seq_get_data), with the tokens it
        holds: a copy that `restore_prefix_state` can put back into this tier's context later."""
        llama_cpp = self._llama_cpp
        size = llama_cpp.llama_state_seq_get_size(self._ctx.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx.ctx, buf, size, 0)
        if written == 0:
            raise SpecQuantError("llama.cpp could not copy the KV cache's state")
        return tuple(self.tokens), bytes(memoryview(buf)[:written])

    def restore_prefix_state(self, tokens: Sequence[int], state: bytes, keep: int) -> bool:
        """Replace the KV cache with a saved state holding `tokens`, then keep its first `keep` tokens. False
        (and an empty KV cache) when llama.cpp refuses the state: the caller reads the prompt instead."""
        llama_cpp = self._llama_cpp
        self.truncate(0)
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(self._ctx.ctx, buf, len(state), 0) == 0:
            self._ctx.kv_cache_seq_rm(0, 0, -1)  # whatever a failed read left behind
            return False
        self.tokens = [int(t) for t in tokens]
        self.truncate(min(keep, len(self.tokens)))
        return True

    # --- cancellation -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def abort_on(self, event: threading.Event | None) -> Iterator[None]:
        """Within the block, a set `event` makes llama.cpp abort a running decode between graph nodes (prefill
        can be stopped). The hook is cleared on leaving: an old job's event, set when its request ends, must
        never abort a decode that is not that job's."""
        previous, self._abort_event = self._abort_event, event
        try:
            yield
        finally:
            self._abort_event = previous

    def _should_abort(self, _data: ctypes.c_void_p) -> bool:
        ev = self._abort_event
        if ev is not None and ev.is_set():
            route_llama_log().aborting = True  # the error lines llama.cpp now logs are this abort's
            return True
        return False

    def close(self) -> None:
        for part in (self._batch, self._ctx, self._model):
            part.close()

    def __enter__(self) -> LlamaBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _piece(vocab: int, token: int, special: bool) -> bytes:
    """One token's bytes from a llama_vocab pointer (`special`: control tokens as their text)."""
    import llama_cpp

    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    if n < 0:  # a longer piece: llama.cpp says how long, as a negative length
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    return buf.raw[: max(n, 0)]


@dataclass(frozen=True)
class GrammarVocabulary:
    """A GGUF's vocabulary without its weights, for a grammar engine (runtime.decode.grammar)."""

    pieces: list[bytes]  # each token's bytes, control tokens as their text
    markup: list[bool]  # control tokens, and user-defined ones spelled like markup (Qwen's `<tool_call>`)
    eos_tokens: list[int]  # every end-of-generation token, the model's EOS first
    vocab_ptr: int  # the llama_vocab, valid for the process's life
    tokenize_fptr: int  # llama.cpp's llama_tokenize as a C function pointer (it takes vocab_ptr)


_vocabularies: dict[Path, GrammarVocabulary] = {}
_vocab_lock = threading.Lock()


def load_vocabulary(path: Path) -> GrammarVocabulary:
    """The vocabulary of the GGUF at `path`, from a vocab-only load (no weights), cached per file. The model
    is never freed: a grammar engine calls into its vocab for the life of the process."""
    import llama_cpp

    path = Path(path).resolve()
    with _vocab_lock:
        if path in _vocabularies:
            return _vocabularies[path]
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), _vocab_only_params(path))
        if not model:
            raise SpecQuantError(f"llama.cpp cannot read the vocabulary of {path}: {route_llama_log().last()}")
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_tokens = llama_cpp.llama_vocab_n_tokens(vocab)
        control, user_defined = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL, llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        pieces, markup = [], []
        for token in range(n_tokens):
            piece = _piece(vocab, token, True)
            attr = llama_cpp.llama_vocab_get_attr(vocab, token)
            pieces.append(piece)
            markup.append(bool(attr & control or (attr & user_defined and piece[:1] == b"<" and piece[-1:] == b">")))
        eos = llama_cpp.llama_vocab_eos(vocab)
        eog = [t for t in range(n_tokens) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        # The raw C function: llguidance calls it without the GIL (llama-cpp-python keeps it in `_lib`).
        tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
        found = GrammarVocabulary(pieces, markup, ([eos] if eos >= 0 else []) + [t for t in eog if t != eos], vocab,
                           tokenize or 0)
        _vocabularies[path] = found
        return found


def context_failure(path: Path, n_ctx: int, why: str) -> str:
    """One line for a context llama.cpp could not create: what it needs is memory (its KV cache and compute
    buffers grow with the context), so the line says how much there is and what to change."""
    import psutil

    free = psutil.virtual_memory().available / 1e9
    return (f"llama.cpp cannot create a context of {n_ctx:,} tokens for {path.name} ({free:.1f} GB of RAM "
            f"available): {why}; use a smaller context (--ctx) or free some memory")


def _vocab_only_params(path: Path) -> Any:
    """llama.cpp's load parameters for the vocabulary and metadata of the GGUF at `path` (no weights), once it
    is known to exist and llama.cpp is ready to load."""
    import llama_cpp

    if not path.is_file():
        raise UserError(f"model file {path} does not exist")
    route_llama_log()
    ensure_backends()  # llama.cpp refuses to load even a vocabulary while no backend is registered
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    return params


@contextlib.contextmanager
def _vocab_only(path: Path) -> Iterator[Any]:
    """llama.cpp's model of the GGUF at `path` with its vocabulary and metadata only (no weights), freed after;
    a file llama.cpp cannot read is a one-line error naming it."""
    import llama_cpp

    path = Path(path)
    params = _vocab_only_params(path)
    try:
        model = llama_cpp._internals.LlamaModel(path_model=str(path), params=params, verbose=False)
    except ValueError:
        raise ModelError(f"llama.cpp cannot read {path}: {route_llama_log().last()}") from None
    try:
        yield model
    finally:
        model.close()


def file_metadata(path: Path) -> dict[str, str]:
    """The GGUF's metadata as strings, as a loaded model reports it (`LlamaBackend.metadata`), from a
    vocab-only load: 0.2 s on the demo, where `gguf.GGUFReader` parses every array (its 49,152 tokens and
    merges) in 4 s."""
    with _vocab_only(path) as model:
        return model.metadata()


def file_tokens(path: Path) -> tuple[dict[str, str], list[bytes], list[int]]:
    """The GGUF's metadata, and each token's text as the file stores it and its llama.cpp attributes
    (`LLAMA_TOKEN_ATTR_*`, made from the file's token types), from one vocab-only load."""
    import llama_cpp

    with _vocab_only(path) as model:
        vocab, n = model.vocab, llama_cpp.llama_vocab_n_tokens(model.vocab)
        texts = [llama_cpp.llama_vocab_get_text(vocab, t) or b"" for t in range(n)]
        return model.metadata(), texts, [int(llama_cpp.llama_vocab_get_attr(vocab, t)) for t in range(n)]
