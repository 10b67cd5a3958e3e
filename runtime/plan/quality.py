"""What precision buys, per model: each tier's next-word distribution against F16's on a fixed reference text.

The method is llama.cpp's `llama-perplexity --kl-divergence`: the text (assets/quality/reference.txt) is cut
into chunks of CHUNK tokens, the first of each replaced by BOS where the model adds one, and only the second
half of each chunk is scored, so every scored token has at least CHUNK/2 tokens of context. Per scored token:
the KL divergence of the tier's distribution from F16's, whether both pick the same most likely next token
(top-1 agreement), and each one's negative log-likelihood of the real next token (perplexity). F16 is also
scored against itself on the first chunk: agreement 1 and KL 0 check the method (F16's log-probabilities are
kept as 16-bit floats meanwhile, as in llama.cpp's base file, so its KL is a few millionths, not 0). Logits are
requested only for the scored rows.

At most MAX_CHUNKS chunks are scored (1,020 tokens): the time is bounded by that, not by the text, at 13 reads
of CHUNK tokens (4 per tier and F16's check). The figures are cached in the model's folder (FILE), keyed by the
tiers' identity (the manifest's sha256, each file's size and modification time) and the method, and measured
again when either changes.

API, for the other modules: `cached(model)` (valid figures or None, never measures), `measure(model)`,
`load_or_measure(model)`, `describe(figures, tier)` and `lines(figures)` (plain words).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from runtime.errors import Cancelled, ModelError
from runtime.models.cache import TIERS, ModelDir, atomic_write_text

log = logging.getLogger("specquant.quality")

FILE = "quality.json"
SCHEMA = 1
METHOD_VERSION = 1  # raise it when the way of measuring changes: saved figures are then measured again
CHUNK = 512  # tokens per chunk, as llama-perplexity's default context
MAX_CHUNKS = 4  # the bound: at most 4 x 255 = 1,020 scored tokens per tier
LOG_P_FLOOR = -16.0  # F16's log-probabilities below this add nothing to the KL sum (llama.cpp's cut-off)
_ROWS_AT_ONCE = 64  # rows per numpy step: 64 x 152k-word vocabulary x 4 bytes = 39 MB per array
ProgressFn = Callable[[int, int], None]  # chunk evaluations done, of total
TIER_NAMES = {"f16": "F16", "q8_0": "Q8_0", "q4_k_m": "Q4_K_M"}
REQUANT_NOTE = (
    "this model's F16 was rebuilt from a quantized file (--allow-requant): these figures compare each tier with "
    "that file, not with the original model, so they understate what quantizing costs"
)


def reference_path() -> Path:
    """assets/quality/reference.txt next to the packages, or inside a PyInstaller bundle (which carries assets/)."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[2]))
    return base / "assets" / "quality" / "reference.txt"


def _method(text: str, chunk: int, max_chunks: int) -> dict[str, Any]:
    return {
        "version": METHOD_VERSION,
        "reference": "assets/quality/reference.txt",
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "chunk": chunk,
        "max_chunks": max_chunks,
    }


def _identity(model: ModelDir, manifest: dict[str, Any]) -> dict[str, Any]:
    """Each present tier as the manifest records it and as the file stands (a rename onto it changes its time)."""
    out = {}
    for tier, rec in manifest.get("tiers", {}).items():
        path = model.tier_path(tier)
        if tier in TIERS and path.is_file():
            st = path.stat()
            out[tier] = {"sha256": rec.get("sha256"), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


def _manifest(model: ModelDir) -> dict[str, Any]:
    manifest = model.read_manifest()
    if manifest is None:
        raise ModelError(f"model {model.name!r} has no readable manifest in {model.path}: convert it again")
    if not model.tier_path("f16").is_file() or "f16" not in manifest.get("tiers", {}):
        raise ModelError(f"model {model.name!r} has no f16 tier to compare with: convert it again")
    return manifest


def _key(model: ModelDir, manifest: dict[str, Any], chunk: int = CHUNK, max_chunks: int = MAX_CHUNKS) -> dict:
    text = reference_path().read_text(encoding="utf-8")
    return {"method": _method(text, chunk, max_chunks), "tiers": _identity(model, manifest)}


def cached(model: ModelDir) -> dict[str, Any] | None:
    """The figures saved for the tiers as they are now, or None (never measured, or a tier or the method changed).
    Cheap: reads the JSON and stats the tier files; never measures."""
    try:
        figures = json.loads((model.path / FILE).read_text(encoding="utf-8"))
        manifest = _manifest(model)
    except (OSError, ValueError, ModelError):
        return None
    if not isinstance(figures, dict) or figures.get("schema") != SCHEMA:
        return None
    return figures if figures.get("key") == _key(model, manifest) else None


def load_or_measure(
    model: ModelDir,
    refresh: bool = False,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    threads: int = 0,
) -> dict[str, Any]:
    """The cached figures, or new ones measured and saved (`refresh`: always measured)."""
    figures = None if refresh else cached(model)
    if figures is None:
        figures = measure(model, progress=progress, cancel=cancel, threads=threads)
        atomic_write_text(model.path / FILE, json.dumps(figures, indent=2) + "\n")
    return figures


def measure(
    model: ModelDir,
    *,
    threads: int = 0,
    chunk: int = CHUNK,
    max_chunks: int = MAX_CHUNKS,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Score every tier of `model` against its F16 on the reference text; returns the figures (not saved).

    One tier is loaded at a time (F16's log-probabilities of the scored rows are kept meanwhile, as 16-bit floats
    like llama.cpp's base file), so the memory needed is the biggest tier's, not all three together."""
    from runtime.decode.llama_backend import LlamaBackend, LoadOptions

    started, cpu_started = time.perf_counter(), time.process_time()
    manifest = _manifest(model)
    text = reference_path().read_text(encoding="utf-8")
    key = {"method": _method(text, chunk, max_chunks), "tiers": _identity(model, manifest)}
    n_ctx_train = manifest["tiers"]["f16"].get("hparams", {}).get("n_ctx_train") or chunk
    chunk = max(16, min(chunk, int(n_ctx_train)))  # a model trained on a shorter context: shorter chunks
    tiers = [t for t in TIERS if t in manifest.get("tiers", {}) and model.tier_path(t).is_file()]
    options = LoadOptions(n_ctx=chunk, n_batch=chunk, n_ubatch=chunk, n_threads=threads)
    first = chunk // 2
    rows = list(range(first, chunk - 1))  # row j predicts token j + 1
    chunks: list[list[int]] = []
    total = 0
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled while measuring what precision buys")

    base_logp: list[np.ndarray] = []  # per chunk: F16's log-probabilities of the scored rows (float16)
    base_top: list[np.ndarray] = []  # per chunk: F16's most likely token per row, from the float32 logits
    base_nll: list[np.ndarray] = []
    results: dict[str, dict[str, Any]] = {}
    used_threads = 0
    for tier in tiers:
        with LlamaBackend(model.tier_path(tier), options) as backend, backend.abort_on(cancel):
            used_threads = backend.threads
            if not chunks:  # the tokens, once, with F16's tokenizer (every tier has the same vocabulary)
                tokens = backend.tokenize(text, add_bos=False, special=False)
                bos = backend.tokenize("", add_bos=True, special=False)[:1]  # [BOS] where the model adds one
                n = min(max_chunks, len(tokens) // chunk)
                if n < 1:
                    raise ModelError(f"the reference text {reference_path()} is shorter than {chunk} tokens")
                chunks = [bos + tokens[i * chunk + len(bos) : (i + 1) * chunk] for i in range(n)]
                total = n * len(tiers) + 1  # and F16 against itself on the first chunk
            if tier == "f16":
                for toks in chunks:
                    logits = _rows(backend, toks, rows)
                    logp = _log_softmax(logits)
                    targets = np.asarray(toks[first + 1 :])
                    base_logp.append(logp.astype(np.float16))
                    base_top.append(logits.argmax(axis=1))
                    base_nll.append(-logp[np.arange(len(rows)), targets].astype(np.float64))
                    step()
            sums = _Sums()
            for i, toks in enumerate(chunks[:1] if tier == "f16" else chunks):  # the check: one chunk is enough
                logits = _rows(backend, toks, rows)
                sums.add(logits, np.asarray(toks[first + 1 :]), base_logp[i], base_top[i], base_nll[i])
                step()
            results[tier] = sums.figures()
    f16_ppl = float(np.exp(np.mean(np.concatenate(base_nll))))
    import llama_cpp

    return {
        "schema": SCHEMA,
        "key": key,
        "model": model.name,
        "reconstructed": bool(manifest.get("reconstructed")),
        "chunks": len(chunks),
        "chunk": chunk,
        "tokens_scored": len(chunks) * len(rows),
        "f16_perplexity": round(f16_ppl, 4),
        "tiers": results,
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu_started, 1),  # all threads: what a busy machine hides
        "threads": used_threads,
        "llama_cpp_python": llama_cpp.__version__,
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _rows(backend: Any, tokens: list[int], rows: list[int]) -> np.ndarray:
    """The logits of `rows` after reading `tokens` into an empty KV cache (only those rows are computed)."""
    backend.truncate(0)
    return backend.decode(tokens, logit_rows=rows)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    out = np.empty_like(logits)
    for s in range(0, len(logits), _ROWS_AT_ONCE):
        part = logits[s : s + _ROWS_AT_ONCE]
        shifted = part - part.max(axis=1, keepdims=True)
        out[s : s + _ROWS_AT_ONCE] = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return out


class _Sums:
    """Running per-token figures of one tier against F16 (llama.cpp's kl_divergence_result, kept as lists)."""

    def __init__(self) -> None:
        self.kl: list[np.ndarray] = []
        self.same: list[np.ndarray] = []
        self.nll: list[np.ndarray] = []
        self.base_nll: list[np.ndarray] = []

    def add(self, logits: np.ndarray, targets: np.ndarray, base_logp: np.ndarray, base_top: np.ndarray,
            base_nll: np.ndarray) -> None:
        logq = _log_softmax(logits)
        kl = np.empty(len(logits), dtype=np.float64)
        for s in range(0, len(logits), _ROWS_AT_ONCE):
            logp = base_logp[s : s + _ROWS_AT_ONCE].astype(np.float32)
            keep = logp > LOG_P_FLOOR
            terms = np.where(keep, np.exp(logp) * (logp - logq[s : s + _ROWS_AT_ONCE]), 0.0)
            kl[s : s + _ROWS_AT_ONCE] = terms.sum(axis=1, dtype=np.float64)
        self.kl.append(kl)
        self.same.append(logits.argmax(axis=1) == base_top)
        self.nll.append(-logq[np.arange(len(logits)), targets].astype(np.float64))
        self.base_nll.append(base_nll)

    def figures(self) -> dict[str, Any]:
        kl, same, nll = np.concatenate(self.kl), np.concatenate(self.same), np.concatenate(self.nll)
        base_nll = np.concatenate(self.base_nll)  # F16's on the same tokens: the ratio's denominator
        n = len(kl)
        top1 = float(same.mean())
        return {
            "top1": round(top1, 5),
            "top1_stderr": round(float(np.sqrt(top1 * (1 - top1) / max(n - 1, 1))), 5),
            "kl_mean": round(float(kl.mean()), 6),
            "kl_stderr": round(float(kl.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0, 6),
            "kl_p99": round(float(np.percentile(kl, 99)), 6),
            "kl_max": round(float(kl.max()), 6),
            "perplexity": round(float(np.exp(nll.mean())), 4),
            "ppl_ratio": round(float(np.exp(nll.mean() - base_nll.mean())), 5),
            "tokens": n,
        }


# --- plain words -----------------------------------------------------------------------------------------------
def agreement_words(top1: float) -> str:
    """'93 times in 100'; never rounds a disagreement away ('more than 99 times in 100')."""
    pct = 100 * top1
    if pct >= 100:
        return "every time"
    if pct >= 99.5:
        return "more than 99 times in 100"
    return f"{round(pct)} times in 100"


def words(figures: dict[str, Any], tier: str) -> str:
    """A tier's figure without its name: 'the same next word as full precision 93 times in 100'; where F16 was
    rebuilt from a quantized file (--allow-requant) the words say so, next to the figure."""
    t = figures.get("tiers", {}).get(tier)
    if t is None:
        return "not measured"
    rebuilt = bool(figures.get("reconstructed"))
    if tier == "f16":
        return "rebuilt from a quantized file: the reference here" if rebuilt else "full precision, the reference"
    reference = "its F16 (rebuilt from a quantized file)" if rebuilt else "full precision"
    return f"the same next word as {reference} {agreement_words(t['top1'])}"


def describe(figures: dict[str, Any], tier: str) -> str:
    """One tier in plain words: 'Q4_K_M: the same next word as full precision 93 times in 100'."""
    return f"{TIER_NAMES.get(tier, tier.upper())}: {words(figures, tier)}"


def detail(figures: dict[str, Any], tier: str) -> str:
    """The figures behind `describe`, for a tooltip or a second column."""
    t = figures["tiers"][tier]
    return (
        f"top-1 agreement {t['top1']:.3f} ± {t['top1_stderr']:.3f}, mean KL divergence {t['kl_mean']:.4f}, "
        f"perplexity {t['ppl_ratio']:.3f}x F16's, on {t['tokens']} tokens of a reference text"
    )


def lines(figures: dict[str, Any]) -> list[str]:
    """What `specquant info` prints: one line per quantized tier, the F16 check, and the requant note."""
    out = [f"{describe(figures, t)}  ({detail(figures, t)})" for t in TIERS if t != "f16" and t in figures["tiers"]]
    if "f16" in figures["tiers"]:
        f = figures["tiers"]["f16"]
        out.append(f"F16 against itself, as a check: agreement {f['top1']:.3f}, KL {f['kl_mean']:.2g} "
                   f"({f['tokens']} tokens)")
    if figures.get("reconstructed"):
        out.append("note: " + REQUANT_NOTE)
    return out
