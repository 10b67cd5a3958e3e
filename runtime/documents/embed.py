"""Dense vectors for the documents (#42): a BERT-family GGUF (all-MiniLM-L6-v2, converters/embedding.py) run by
llama.cpp with mean pooling, each vector L2-normalised float32, so a dot product is the cosine.

A text longer than MAX_WORD_PIECES (256 for all-MiniLM-L6-v2, [CLS] and [SEP] included) is cut to the longest
prefix that fits: its vector then stands for that prefix, and BM25 still reads the whole chunk. 256 is where
sentence-transformers cuts this model's inputs (the model was trained on shorter texts still; its 512
positions go unused beyond that), and it halves the cost of indexing a 400-token chunk.

Only llama-cpp-python's public `Llama` class is used (`tokenize`, `embed`). Several chunks go into one
llama.cpp batch (BATCH_TOKENS, 8 cut chunks), each its own sequence, with flash attention: its CPU kernel skips
the masked pairs across two sequences, so packing costs no attention between chunks, and one llama_decode of
2,048 tokens replaces eight of 256 (fewer graph runs and thread barriers, larger matrix products). Without
flash attention packing cost more than it gave (3,300 tokens/s with 512-token batches, 2,400 with 1,024 on 2
cores). scripts/measure_embedding.py compares the settings side by side (#53).
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime.errors import Cancelled, SpecQuantError, UserError

# A model's name is its file's stem in MODEL_FOLDER: what the index records beside each vector (and
# collections.embedding_model) and the API answers as `model`. Vectors of one name are never compared with a
# query embedded by another: an index embedded by another model is embedded again, chunk by chunk, by the
# next add or sync, and searched by words alone where a chunk has no vector of this model yet.
F16_NAME = "all-minilm-l6-v2"  # the package's weights as F16 (converters.embedding): the quantizer's source
Q8_NAME = "all-minilm-l6-v2-q8_0"  # F16 quantized to Q8_0 by llama.cpp's quantizer, as the tiers are
# The default stays F16 (#53): Q8_0's recall@5 on tests/data/retrieval_questions.jsonl was 0.907 against F16's
# 0.930 (one question more missed), past the 0.02 it may lose; the speed comes from packing chunks instead.
MODEL_NAME = F16_NAME
MODEL_FOLDER = "_embeddings"  # no model name starts with "_": `specquant list` never takes it for a model
MAX_WORD_PIECES = 256  # sentence-transformers' max_seq_length for this model (its sentence_bert_config.json)
BATCH_TOKENS = 8 * MAX_WORD_PIECES  # a llama.cpp batch (and micro-batch): 8 cut chunks, or more shorter texts
GROUP = 32  # texts handed to llama.cpp at a time (4 batches of cut chunks): a cancel is seen between groups


def model_path(cache_root: Path, name: str = MODEL_NAME) -> Path:
    """Where an embedding model's GGUF lives in the model cache (runtime.models.cache.cache_root())."""
    return cache_root / MODEL_FOLDER / f"{name}.gguf"


class Embedder:
    """One embedding model, loaded on first use. `threads`: llama.cpp's threads (explicit: its own default is
    half the logical CPUs). `name`: the model's identity in the index (default: the file's stem). `prepare`:
    called before the model loads (again after a failure), to convert it on first use and make ggml's CPU
    backend ready (converters.embedding, runtime.machine.hardware.ensure_backends: layers this one may not
    import). Safe to share between threads: one embedding runs at a time."""

    def __init__(
        self,
        path: Path,
        threads: int,
        name: str | None = None,
        prepare: Callable[[], object] | None = None,
        batch_tokens: int = BATCH_TOKENS,
        flash_attn: bool = True,
    ) -> None:
        self.path = Path(path)
        self.name = name or self.path.stem  # the model's identity in the index: its file's name
        self.threads = max(1, threads)
        self.batch_tokens = batch_tokens
        self.flash_attn = flash_attn
        self._prepare = prepare
        self._llama: Any = None
        self._limit = 0  # max_tokens, known once loaded
        self._lock = threading.RLock()

    @property
    def llama(self) -> Any:
        """llama_cpp.Llama, loaded on first use."""
        with self._lock:
            if self._llama is None:
                self._llama = self._load()
            return self._llama

    def load(self) -> Embedder:
        """Load the model now (its errors now, not at the first text); returns self."""
        _ = self.llama
        return self

    def _load(self) -> Any:
        if self._prepare is not None:
            self._prepare()
        if not self.path.is_file():
            raise UserError(f"the embedding model {self.path} does not exist")
        import llama_cpp

        # verbose=True: llama-cpp-python's verbose=False points the process's file descriptors 1 and 2 at
        # /dev/null while it loads (every thread's output, C's included). Its own prints to sys.stderr (the
        # metadata, a chat format) are dropped here instead: Python-level, for the tens of milliseconds a load takes.
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                llama = llama_cpp.Llama(
                    model_path=str(self.path),
                    embedding=True,
                    pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                    n_ctx=self.batch_tokens,
                    n_batch=self.batch_tokens,
                    n_ubatch=self.batch_tokens,  # non-causal: a whole batch must fit one micro-batch
                    n_threads=self.threads,
                    n_threads_batch=self.threads,
                    n_gpu_layers=0,
                    flash_attn=self.flash_attn,  # skips the pairs across packed chunks (see the docstring)
                    verbose=True,
                )
        except ValueError as e:
            # A damaged file the user can remove: one line, not a traceback.
            raise UserError(f"llama.cpp cannot load the embedding model {self.path} ({e}): delete it, and it is "
                            "converted again on next use") from None
        llama.verbose = False  # embed() would print llama.cpp's timings after every call
        if llama.pooling_type() != llama_cpp.LLAMA_POOLING_TYPE_MEAN:
            raise SpecQuantError(f"{self.path}: llama.cpp does not pool its embeddings by mean")
        meta = llama.metadata  # the model's positions: `{arch}.context_length`
        positions = int(meta.get(f"{meta.get('general.architecture', 'bert')}.context_length", self.batch_tokens))
        self._limit = min(MAX_WORD_PIECES, positions, int(llama.n_ctx()))
        return llama

    @property
    def dim(self) -> int:
        return int(self.llama.n_embd())

    @property
    def max_tokens(self) -> int:
        """The longest text in word pieces, [CLS] and [SEP] included (MAX_WORD_PIECES, or fewer positions)."""
        return self.load()._limit

    def tokenize(self, text: str) -> list[int]:
        """The word-piece ids llama.cpp embeds for `text`: [CLS] ... [SEP]."""
        with self._lock:
            return list(self.llama.tokenize(text.encode("utf-8", "replace"), add_bos=True, special=False))

    def fit_all(self, texts: Sequence[str]) -> tuple[list[str], int]:
        """Each text cut to fit (`fit`), and their word pieces in all."""
        fitted = [self.fit(t) for t in texts]
        return [t for t, _ in fitted], sum(n for _, n in fitted)

    def fit(self, text: str) -> tuple[str, int]:
        """`text`, cut to the longest prefix of at most `max_tokens` word pieces, and its count. Characters
        UTF-8 cannot carry (a lone surrogate from JSON) become U+FFFD."""
        text = text.encode("utf-8", "replace").decode("utf-8")
        limit = self.max_tokens
        n = len(self.tokenize(text))
        if n <= limit:
            return text, n
        # A binary search on character prefixes: Llama.embed takes text, not ids, and tokenizing is quick.
        lo, hi = 0, len(text)  # the prefix of length lo fits; hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if len(self.tokenize(text[:mid])) <= limit:
                lo = mid
            else:
                hi = mid
        cut = text[:lo]
        return cut, len(self.tokenize(cut))

    def embed(self, texts: Sequence[str], cancel: threading.Event | None = None) -> np.ndarray:
        """(len(texts), dim) float32 rows, each of length 1; Cancelled when `cancel` is set between groups."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            fitted = self.fit_all(texts)[0]
            rows: list[list[float]] = []
            for start in range(0, len(fitted), GROUP):
                if cancel is not None and cancel.is_set():
                    raise Cancelled("cancelled")
                rows += self.llama.embed(fitted[start : start + GROUP], normalize=False, truncate=True)
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, np.float32(1e-12))

    def close(self) -> None:
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None
