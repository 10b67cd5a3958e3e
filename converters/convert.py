"""`convert`: a source into verified f16 / q8_0 / q4_k_m tiers in the model cache.

Each tier is written to `<tier>.gguf.partial`, fsynced, checked (llama.cpp loads it and its tensor types are
the tier's), then renamed, and the manifest is rewritten after every tier. A rerun keeps tiers whose sha256
still matches and rebuilds the rest; a killed run leaves only partials, which the next run removes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from converters import sources
from converters.gguf_stream import F16Plan
from converters.gguf_to_f16 import plan_gguf
from converters.hf_to_gguf import plan_hf
from converters.quantize import QUANT_TYPES, check_loads, expected_bytes, quantize
from converters.verify import hparams_from_shapes, summarize_tier
from runtime import __version__
from runtime.atomic import fsync_dir
from runtime.errors import SpecQuantError, UserError
from runtime.models.cache import (
    MANIFEST_SCHEMA,
    TIERS,
    ModelDir,
    cache_root,
    check_name,
    disk_error,
    ensure_dir,
    fsync_file,
    list_models,
    remove_contents,
    sha256_file,
    tier_is_intact,
)

log = logging.getLogger("specquant.convert")
DISK_MARGIN = 64 * 1024 * 1024


@dataclass(frozen=True)
class ConvertProgress:
    """One progress report: `stage` is a tier name, "hash" or "done"; `done`/`total` are bytes."""

    stage: str
    done: int
    total: int
    message: str = ""


ProgressFn = Callable[[ConvertProgress], None]
SizesFn = Callable[[dict[str, int], "dict[str, int] | None"], None]  # tier -> expected bytes; shape facts


def _versions() -> dict[str, str]:
    out = {"specquant": __version__}
    for dist in ("llama-cpp-python", "gguf"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out


def plan_f16(source: sources.Source, name: str, allow_requant: bool) -> tuple[F16Plan, bool]:
    """Validate the source and plan its F16 tier; returns (plan, reconstructed)."""
    if source.kind in ("hf_dir", "hf_repo"):
        return plan_hf(source.path, name), False
    plan = plan_gguf(source.path, name)
    quantized = plan.quantized
    if quantized and not (allow_requant or source.kind == "demo"):
        raise UserError(
            f"{source.path} is quantized ({', '.join(quantized)}): pass --allow-requant to dequantize it to F16 "
            "(F16's disk space without F16's quality)"
        )
    if quantized and source.kind != "demo":
        log.warning(
            "%s is quantized (%s): its f16 tier is reconstructed, taking F16's disk space without F16's quality",
            source.path,
            ", ".join(quantized),
        )
    return plan, bool(quantized)


def _check_space(path: Path, need: int, name: str) -> None:
    free = shutil.disk_usage(path).free
    if free < need + DISK_MARGIN:
        raise UserError(
            f"not enough disk space in {path}: {name} needs {(need + DISK_MARGIN) / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free"
        )


def convert(
    source_text: str,
    name: str | None = None,
    allow_requant: bool = False,
    root: Path | None = None,
    on_progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    on_sizes: SizesFn | None = None,
) -> dict[str, Any]:
    """Convert `source_text` into the cache and return the model's manifest. `on_sizes` hears the tiers'
    expected sizes and shape facts before any tier is written (to say which will fit in memory)."""
    report = on_progress or (lambda p: None)
    cancelled = cancel.is_set if cancel is not None else None
    source = sources.resolve(source_text)
    name = check_name(name or source.default_name)
    model = ModelDir(cache_root() if root is None else root, name)
    planned = None
    if model.read_manifest() is None:
        # A new model: bad input must fail before anything is created in the cache.
        planned = plan_f16(source, name, allow_requant)
    ensure_dir(model.root)
    created = not model.path.exists()
    failed = False
    try:
        with model.lock():
            try:
                return _convert_locked(
                    model, source, lambda: planned or plan_f16(source, name, allow_requant), report, cancelled, on_sizes
                )
            except BaseException:  # an error, a Cancel or Ctrl-C
                failed = True
                if created:
                    # Nothing of value was there before us: remove what we wrote while the lock still keeps
                    # another converter of this name out, so it cannot start on our leftovers.
                    with contextlib.suppress(OSError):
                        remove_contents(model.path)
                raise
    finally:
        if failed and created:
            # Only the lock file and the folder remain; rmdir refuses a folder someone has since written to.
            with contextlib.suppress(OSError):
                (model.path / ".lock").unlink()
            with contextlib.suppress(OSError):
                model.path.rmdir()


def _convert_locked(
    model: ModelDir,
    source: sources.Source,
    get_plan: Callable[[], tuple[F16Plan, bool]],
    report: ProgressFn,
    cancelled: Callable[[], bool] | None,
    on_sizes: SizesFn | None = None,
) -> dict[str, Any]:
    model.remove_partials()
    old = model.read_manifest()
    report(ConvertProgress("hash", 0, 1, f"checking {source.path}"))
    src_info = sources.fingerprint(source, old.get("source") if old else None)
    if old and old.get("source", {}).get("sha256") != src_info["sha256"]:
        log.warning("the source of %s changed since its last conversion: rebuilding every tier", model.name)
        old = None
    old_tiers = (old or {}).get("tiers", {})
    intact = {t: old_tiers[t] for t in TIERS if tier_is_intact(model, t, old_tiers.get(t))}
    if old and old.get("complete") and len(intact) == len(TIERS):
        if any("hparams" not in rec for rec in intact.values()):
            # A manifest from before placement facts were recorded: add them (headers only, no rewrite).
            for tier, rec in intact.items():
                rec["hparams"] = summarize_tier(model.tier_path(tier), tier).hparams
            model.write_manifest(old)
        for tier in TIERS:
            report(ConvertProgress(tier, intact[tier]["bytes"], intact[tier]["bytes"], "verified, kept"))
        report(ConvertProgress("done", 1, 1))
        return old  # nothing changed: the files are not touched

    plan, reconstructed = get_plan()
    manifest: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA,
        "name": model.name,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "tool": _versions(),
        "source": src_info,
        "reconstructed": reconstructed,
        "f16_conversion": (old or {}).get("f16_conversion", {}),
        "tiers": {},
        "complete": False,
    }
    f16_bytes = intact["f16"]["bytes"] if "f16" in intact else plan.nbytes
    sizes = {"f16": plan.nbytes} | {t: expected_bytes(f16_bytes, QUANT_TYPES[t]) for t in TIERS[1:]}
    _check_space(model.path, sum(sizes[t] for t in TIERS if t not in intact), model.name)  # refusals first
    if on_sizes is not None:
        on_sizes(sizes, hparams_from_shapes({t.name: t.shape for t in plan.tensors}))

    for tier in TIERS:
        if tier in intact:
            manifest["tiers"][tier] = intact[tier]
            report(ConvertProgress(tier, sizes[tier], sizes[tier], "verified, kept"))
            continue
        if tier == "f16":
            manifest["tiers"][tier] = _build_f16(model, plan, report, cancelled)
            manifest["f16_conversion"] = plan.stats.as_dict()
        else:
            manifest["tiers"][tier] = _build_quant(model, tier, sizes[tier], report, cancelled)
        model.write_manifest(manifest)
    manifest["complete"] = True
    model.write_manifest(manifest)
    report(ConvertProgress("done", 1, 1))
    return manifest


def _finish_tier(model: ModelDir, tier: str, cancelled: Callable[[], bool] | None) -> dict[str, Any]:
    """Check the partial file, hash it, and rename it into place."""
    partial = model.partial_path(tier)
    try:
        summary = summarize_tier(partial, tier)
    except SpecQuantError as e:
        raise SpecQuantError(f"the {tier} tier failed its check: {e}") from None
    record = {
        "hparams": summary.hparams,
        "file": model.tier_path(tier).name,
        "sha256": sha256_file(partial, cancelled),
        "bytes": partial.stat().st_size,
        "tensor_types": summary.tensor_types,
        "fallbacks": summary.fallbacks,
    }
    fsync_file(partial)  # whoever wrote it (llama.cpp's quantizer does not): the data first, then the rename
    try:
        os.replace(partial, model.tier_path(tier))
    except OSError as e:
        raise disk_error(model.tier_path(tier), e) from None
    fsync_dir(model.path)
    return record


@contextlib.contextmanager
def _partial(model: ModelDir, tier: str):
    """Any failure, cancel or interrupt while a tier is written removes its partial file."""
    try:
        yield model.partial_path(tier)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            model.partial_path(tier).unlink()
        raise


def _build_f16(
    model: ModelDir, plan: F16Plan, report: ProgressFn, cancelled: Callable[[], bool] | None
) -> dict[str, Any]:
    total = plan.nbytes
    with _partial(model, "f16") as partial:
        report(ConvertProgress("f16", 0, total, "writing"))
        plan.write(partial, lambda done: report(ConvertProgress("f16", done, total)), cancelled)
        check_loads(partial, cancelled)
        return _finish_tier(model, "f16", cancelled)


def _build_quant(
    model: ModelDir, tier: str, expected: int, report: ProgressFn, cancelled: Callable[[], bool] | None
) -> dict[str, Any]:
    with _partial(model, tier) as partial:
        report(ConvertProgress(tier, 0, expected, "quantizing"))
        quantize(
            model.tier_path("f16"),
            partial,
            tier,
            lambda done, total: report(ConvertProgress(tier, done, total)),
            cancelled,
        )
        return _finish_tier(model, tier, cancelled)


def ensure_demo(root: Path | None = None) -> None:
    """On a fresh machine (no complete model in the cache), convert the demo: what the CLI does before its
    first chat, so a new user's first command answers. Anything already cached: nothing happens."""
    root = cache_root() if root is None else root
    if not any(m.complete for m in list_models(root)):
        log.warning("setting up the demo model (one time)")
        convert("demo", root=root)
