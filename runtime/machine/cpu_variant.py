"""Choose a CPU kernel variant of ggml that really runs on this machine, and load only that one.

Portable builds (GGML_BACKEND_DL with GGML_CPU_ALL_VARIANTS: the installers and the `cpu-all-variants`
flavour) carry one `libggml-cpu-<variant>` library per x86 micro-architecture. ggml's own loader takes the
best-scoring one by CPUID alone, and CPUID can promise what the machine cannot run: on some KVM guests the
`sapphirerapids` variant's AMX kernels die with SIGILL although the kernel grants the tile permission.

So before the first model loads on a machine, each candidate, best score first, is proven in a spawned child
that loads it alone and decodes a batch of 8 tokens through a tiny generated model whose weights are F16,
Q8_0 and Q4_K (the tiers' types), which is what sends llama.cpp down its AMX and repacked kernels. A child
that dies on a signal, fails or hangs excludes its variant; the first one that answers is loaded with
`ggml_backend_load`. The verdict is cached per machine (CPU model and flags, llama.cpp version, the variant
libraries), so later starts cost only a file read.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from runtime import child
from runtime.atomic import write_text_atomic
from runtime.errors import UserError
from runtime.paths import cache_dir, private_dir

# libggml-cpu-haswell.so, libggml-cpu-zen4.dylib, ggml-cpu-x64.dll; ARM's have dots: libggml-cpu-armv8.2_1.so
_VARIANT = re.compile(r"^(?:lib)?ggml-cpu-(?P<name>[A-Za-z0-9_.]+)\.(?:so|dylib|dll)$")
# Other dynamically loaded backends beside them (CUDA, Vulkan, RPC, BLAS, ...): loaded as they are.
_OTHER_BACKEND = re.compile(r"^(?:lib)?ggml-(?P<name>[A-Za-z0-9_]+)\.(?:so|dylib|dll)$")
_NOT_BACKENDS = {"base"}
FORCE_ENV = "SPECQUANT_CPU_VARIANT"  # a variant name: use only that one (to compare variants, or to pin one)
PROBE_TIMEOUT_S = 60.0
VERDICT_VERSION = 1


@dataclass(frozen=True)
class Variant:
    name: str
    path: Path
    score: int  # ggml_backend_score(): 0 = this CPU lacks an instruction set the variant needs


@dataclass(frozen=True)
class CpuKernels:
    """Which CPU kernels this process runs, and which variants were excluded on this machine, with why."""

    variant: str  # the variant's name, or "built-in" for builds with a single CPU backend
    path: str | None = None
    excluded: dict[str, str] = field(default_factory=dict)
    probe_s: float = 0.0  # what choosing cost on the first start on this machine
    cached: bool = False  # this start read an earlier verdict

    def as_dict(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "path": self.path,
            "excluded": dict(self.excluded),
            "probe_s": round(self.probe_s, 3),
            "cached": self.cached,
        }

    def describe(self) -> str:
        text = f"{self.variant} CPU kernels"
        if self.variant != "built-in":
            text += " (verdict cached)" if self.cached else f" (proven in {self.probe_s:.2f} s)"
        if self.excluded:
            text += "; excluded: " + "; ".join(f"{name} ({why})" for name, why in self.excluded.items())
        return text


def variant_libraries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if _VARIANT.match(p.name)) if folder.is_dir() else []


def other_backends(folder: Path) -> list[Path]:
    """The non-CPU backend libraries in `folder`, which the variant choice must not leave unloaded."""
    out = []
    for p in sorted(folder.iterdir()):
        m = _OTHER_BACKEND.match(p.name)
        if m and not _VARIANT.match(p.name) and m["name"] not in _NOT_BACKENDS and m["name"] != "cpu":
            out.append(p)
    return out


def variant_name(path: Path) -> str:
    m = _VARIANT.match(path.name)
    return m["name"] if m else path.stem


def _unload(lib: ctypes.CDLL) -> None:
    import _ctypes

    with contextlib.suppress(AttributeError, OSError):
        if sys.platform == "win32":
            _ctypes.FreeLibrary(lib._handle)  # type: ignore[attr-defined]
        else:
            _ctypes.dlclose(lib._handle)  # type: ignore[attr-defined]


def variant_score(path: Path) -> int:
    """The variant's own score for this CPU, as ggml's loader asks it (CPUID checks only, no kernels run)."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return 0
    try:
        fn = lib.ggml_backend_score
    except AttributeError:
        _unload(lib)
        return 0
    fn.restype = ctypes.c_int
    value = int(fn())
    _unload(lib)
    return value


def ranked(paths: Sequence[Path], score_of: Callable[[Path], int] = variant_score) -> list[Variant]:
    """The variants this CPU claims to run, best first (ties by name, so the order is stable)."""
    scored = [Variant(variant_name(p), p, score_of(p)) for p in paths]
    return sorted((v for v in scored if v.score > 0), key=lambda v: (-v.score, v.name))


# --- the verdict cache ----------------------------------------------------------------------------------


def _cpu_identity() -> str:
    """CPU model and flags: what decides which kernels can run."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        wanted = ("model name", "flags", "vendor_id", "cpu family", "model\t", "Features")
        picked = {ln.split(":", 1)[0].strip(): ln for ln in lines if ln.startswith(wanted)}
        if picked:
            return "\n".join(picked[k] for k in sorted(picked))
    except OSError:
        pass
    import platform

    return f"{platform.processor()} {platform.machine()} {platform.platform()}"


def verdict_key(paths: Sequence[Path], forced: str | None) -> str:
    import llama_cpp

    h = hashlib.sha256()
    h.update(f"v{VERDICT_VERSION}\n{_cpu_identity()}\n{llama_cpp.__version__}\n{forced or ''}\n".encode())
    for p in paths:
        h.update(f"{p.name}:{p.stat().st_size}\n".encode())
    return h.hexdigest()[:20]


def verdict_path(key: str) -> Path:
    return cache_dir() / "cpu-variant" / f"{key}.json"


def read_verdict(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("variant"), str):
        return None
    return data


def write_verdict(path: Path, data: dict) -> None:
    """Atomically: a verdict half-written by a killed process must not be read as valid."""
    try:
        private_dir(path.parent)
        write_text_atomic(path, json.dumps(data))
    except OSError:
        pass  # a read-only cache costs the next start a probe, nothing more


# --- the probe ------------------------------------------------------------------------------------------

PROBE_TOKENS = 8  # a batch bigger than one: the AMX and repacked GEMM paths run only for batches


def write_probe_model(path: Path) -> Path:
    """A one-layer llama GGUF with F16, Q8_0 and Q4_K weights and no tokenizer: milliseconds to write.

    The quantized blocks are built directly with small scales (no quantizer needed), so activations stay
    finite. Every output dimension is a multiple of 32 and every K-quant row a multiple of 256, as ggml's
    AMX and repack buffers require before they take a tensor.
    """
    import gguf
    import numpy as np

    rng = np.random.default_rng(7)
    n_embd, n_ff, n_vocab, n_head = 256, 512, 256, 2
    q = gguf.GGMLQuantizationType

    def f16(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float16)

    def q8_0(rows: int, cols: int) -> np.ndarray:
        blocks = rows * cols // 32  # each block: an f16 scale, then 32 int8 values
        raw = np.empty((blocks, 34), dtype=np.uint8)
        raw[:, :2] = np.full(blocks, 0.002, dtype=np.float16).view(np.uint8).reshape(blocks, 2)
        raw[:, 2:] = rng.integers(-127, 128, (blocks, 32), dtype=np.int8).view(np.uint8)
        return raw.reshape(rows, cols // 32 * 34)

    def q4_k(rows: int, cols: int) -> np.ndarray:
        blocks = rows * cols // 256  # each block: f16 d, f16 dmin, 12 bytes of 6-bit scales, 128 of nibbles
        raw = rng.integers(0, 256, (blocks, 144), dtype=np.uint8)
        raw[:, :2] = np.full(blocks, 0.0005, dtype=np.float16).view(np.uint8).reshape(blocks, 2)
        raw[:, 2:4] = np.full(blocks, 0.0002, dtype=np.float16).view(np.uint8).reshape(blocks, 2)
        return raw.reshape(rows, cols // 256 * 144)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("cpu-probe")
    w.add_context_length(64)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("none")
    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", f16(n_vocab, n_embd))
    w.add_tensor("blk.0.attn_norm.weight", ones)
    w.add_tensor("blk.0.attn_q.weight", f16(n_embd, n_embd))
    w.add_tensor("blk.0.attn_k.weight", q8_0(n_embd, n_embd), raw_dtype=q.Q8_0)
    w.add_tensor("blk.0.attn_v.weight", q4_k(n_embd, n_embd), raw_dtype=q.Q4_K)
    w.add_tensor("blk.0.attn_output.weight", q8_0(n_embd, n_embd), raw_dtype=q.Q8_0)
    w.add_tensor("blk.0.ffn_norm.weight", ones)
    w.add_tensor("blk.0.ffn_gate.weight", q4_k(n_ff, n_embd), raw_dtype=q.Q4_K)
    w.add_tensor("blk.0.ffn_up.weight", f16(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", q4_k(n_embd, n_ff), raw_dtype=q.Q4_K)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", q8_0(n_vocab, n_embd), raw_dtype=q.Q8_0)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _probe_child(
    library: str, model: str, n_threads: int, prepare: Callable[[], object] | None, conn: Connection
) -> None:
    """In the child: run `prepare` (module-level, so it pickles), load only `library` ("": the build's own CPU
    kernels), then decode one batch through `model`; report "" or why not."""
    import logging

    import llama_cpp

    from runtime.machine.ggml_lib import libggml
    from runtime.machine.llama_log import route_llama_log

    errors = route_llama_log()
    logging.getLogger("llama.cpp").setLevel(logging.CRITICAL + 1)
    try:
        if prepare is not None:
            prepare()
        lib = libggml() if library else None
        if library and (lib is None or not lib.ggml_backend_load(library.encode())):
            conn.send(f"ggml would not load it: {errors.last() or 'no reason given'}")
            return
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        conn.send(decode_probe(model, mparams, n_threads, errors.last))
    finally:
        conn.close()


def decode_probe(model: str, mparams: Any, n_threads: int, last_error: Callable[[], str | None]) -> str:
    """In a probe's child: load `model` with these llama_model_params and decode one batch; "" or why not.
    Shared with the GPU probe (runtime.machine.gpu_probe), whose parameters put every layer on one device."""
    import llama_cpp

    llm = llama_cpp.llama_model_load_from_file(model.encode(), mparams)
    if not llm:
        return f"the probe model did not load: {last_error() or 'no reason given'}"
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = 64
    cparams.n_batch = cparams.n_ubatch = 2 * PROBE_TOKENS
    cparams.n_threads = cparams.n_threads_batch = n_threads
    ctx = llama_cpp.llama_init_from_model(llm, cparams)
    tokens = (llama_cpp.llama_token * PROBE_TOKENS)(*range(1, PROBE_TOKENS + 1))
    if not ctx or llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(tokens, PROBE_TOKENS)) != 0:
        return f"decoding failed: {last_error() or 'no reason given'}"
    logits = llama_cpp.llama_get_logits_ith(ctx, -1)
    if not all(map(lambda i: abs(logits[i]) < 1e30, range(16))):
        return "its matrix multiplies gave non-finite results"
    return ""


def probe_variant(
    library: Path | None,
    model: Path,
    n_threads: int = 2,
    timeout: float = PROBE_TIMEOUT_S,
    prepare: Callable[[], object] | None = None,
) -> str | None:
    """None if `library` (None: the kernels `prepare` sets up in the child) runs the probe model in a spawned
    child; otherwise why not, in a few words."""
    name = "" if library is None else str(library)
    try:
        args = (name, str(model), n_threads, prepare)
        message = child.run_in_child(_probe_child, args, timeout=timeout, what="its probe")
    except child.ChildFailed as e:
        return f"killed by {e.signal}" if e.signal else str(e)
    return message or None


def choose_variant(
    candidates: Sequence[Variant], probe_one: Callable[[Variant], str | None]
) -> tuple[Variant | None, dict[str, str]]:
    """The first candidate (best first) whose probe passes, and why each one before it was excluded."""
    excluded: dict[str, str] = {}
    for variant in candidates:
        why = probe_one(variant)
        if why is None:
            return variant, excluded
        excluded[variant.name] = why
    return None, excluded


def select(folder: Path, n_threads: int = 2) -> tuple[Variant, dict[str, str], float, bool]:
    """The variant to load from `folder`: (variant, excluded, seconds the choice cost, from the cache)."""
    paths = variant_libraries(folder)
    forced = os.environ.get(FORCE_ENV) or None
    key_file = verdict_path(verdict_key(paths, forced))
    cached = read_verdict(key_file)
    by_name = {variant_name(p): p for p in paths}
    if cached is not None and cached["variant"] in by_name:
        name = cached["variant"]
        excluded = dict(cached.get("excluded") or {})
        return Variant(name, by_name[name], 1), excluded, float(cached.get("probe_s", 0)), True
    started = time.perf_counter()
    candidates = ranked(paths)
    if forced is not None:
        candidates = [v for v in candidates if v.name == forced]
        if not candidates:
            names = ", ".join(sorted(by_name)) or "none"
            raise UserError(f"{FORCE_ENV}={forced}: no such CPU variant runs on this CPU (variants here: {names})")
    with tempfile.TemporaryDirectory(prefix="specquant-cpu-probe-") as tmp:
        model = write_probe_model(Path(tmp) / "probe.gguf")
        chosen, excluded = choose_variant(candidates, lambda v: probe_variant(v.path, model, n_threads))
    seconds = time.perf_counter() - started
    if chosen is None:
        tried = "; ".join(f"{name}: {why}" for name, why in excluded.items()) or "no variant claims this CPU"
        raise UserError(
            f"this CPU is not supported by this build of SpecQuant: no llama.cpp CPU backend in {folder} runs "
            f"here ({tried}); reinstall the build made for this machine, or install from source"
        )
    write_verdict(key_file, {"variant": chosen.name, "excluded": excluded, "probe_s": seconds})
    return chosen, excluded, seconds, False
