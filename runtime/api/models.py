"""The models the API offers: the complete models in the cache, listed in OpenAI's shape (with their tiers and
whether each is loaded), the 404 for one that is not there, and the 400 for one too large for this machine
(`ModelRoom`, naming those that fit)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from runtime.api.responses import ApiError
from runtime.engine.options import EngineSettings
from runtime.errors import UserError
from runtime.machine.hardware import Inventory
from runtime.models.cache import CachedModel, ModelDir, cache_root, check_name, complete_models
from runtime.plan.placement import GB, TierSize
from runtime.plan.residency import Residency, manifest_tiers, models_that_fit, residency


def model_entry(m: Any, loaded: Collection[str] = (), n_ctx: int | None = None) -> dict[str, Any]:
    """A model as `GET /v1/models` lists it; `loaded`: the models in memory now; `n_ctx`: the context the server
    answers with (`context_length`, as OpenRouter and LM Studio name it: clients size their prompts by it)."""
    rows = ModelDir(m.path.parent, m.name).tier_rows(m.manifest or {})
    tiers = [{"tier": r["tier"], "bytes": r["bytes"]} for r in rows]
    created = int(m.path.stat().st_mtime)
    entry = {"id": m.name, "object": "model", "created": created, "owned_by": "specquant", "tiers": tiers,
             "loaded": m.name in loaded}
    return entry if n_ctx is None else entry | {"context_length": n_ctx}


NAME_SHOWN = 80  # characters of a model name an error repeats: a client's 900 KB name is not echoed whole


def quoted_name(name: str) -> str:
    """`name` as an error quotes it: repr'd, cut to NAME_SHOWN characters with an ellipsis."""
    return repr(name) if len(name) <= NAME_SHOWN else f"{name[:NAME_SHOWN]!r}… ({len(name):,} characters)"


def unknown_model(name: str) -> ApiError:
    known = ", ".join(m.name for m in complete_models()) or "none"
    return ApiError(404, f"model {quoted_name(name)} is not in the cache (cached: {known})", "model",
                    code="model_not_found")


def is_cached(name: str) -> bool:
    """Whether `name` is a complete model in the cache (one manifest read, not a listing of the cache)."""
    try:
        manifest = ModelDir(cache_root(), check_name(name)).read_manifest()
    except UserError:  # not a valid model name at all
        return False
    return bool(manifest and manifest.get("complete"))


class ModelRoom:
    """Which converted models fit this machine (runtime.plan.residency), judged against the RAM that was
    available when the server started (or --max-memory): a model loaded since has taken some of what is
    available now, and would be unloaded to make room. Each model is judged once per manifest."""

    def __init__(self, inv: Inventory, settings: EngineSettings) -> None:
        from runtime.engine.prompt_cache import default_ram_budget

        self.inv, self.settings = inv, settings
        self.budget = settings.placement.ram_budget(inv)
        cache = settings.prompt_cache_bytes
        self.cache_bytes = default_ram_budget() if cache is None else cache
        self._judged: dict[tuple[str, float], Residency] = {}
        self._lock = threading.Lock()  # asked from the event loop and from the parse threads

    def of(self, m: CachedModel) -> Residency:
        """Model `m`'s resident set and whether it fits."""
        key = (m.name, m.path.stat().st_mtime)
        with self._lock:
            if key not in self._judged:
                tiers = manifest_tiers(m.manifest or {}, self.settings.n_ctx)
                sibling = self._draft_model() if m.name != self.settings.draft_model else None
                self._judged[key] = residency(
                    m.name, tiers, self.inv, self.settings.placement, self.cache_bytes, sibling
                )
            return self._judged[key]

    def _draft_model(self) -> TierSize | None:
        """The draft model's tier (`--draft-model`), planned beside each model it drafts for."""
        name = self.settings.draft_model
        manifest = ModelDir(cache_root(), name).read_manifest() if name else None
        tiers = manifest_tiers(manifest, self.settings.n_ctx) if manifest else None
        return min(tiers.values(), key=lambda t: t.file_bytes) if tiers else None

    def models_max(self) -> int:
        """How many of the converted models fit in memory together (the default of --models-max); one where
        RPC workers hold parents (their memory is theirs: only the engine, connected to them, can plan it)."""
        if self.settings.rpc:
            return 1
        return models_that_fit([self.of(m) for m in complete_models()], self.budget)

    def check(self, name: str) -> None:
        """A 400 naming the models that fit, if model `name` (a complete model in the cache) does not. With RPC
        workers the engine judges, connected to them: a worker that is down is its 503, not a 400 here."""
        if self.settings.rpc:
            return
        md = ModelDir(cache_root(), name)
        r = self.of(CachedModel(name, md.path, md.read_manifest(), ()))
        if r.fits:
            return
        fitting = [m.name for m in complete_models() if self.of(m).fits]
        these = ", ".join(fitting) if fitting else "none of the converted models"
        raise ApiError(
            400, f"model {quoted_name(name)} does not fit this machine's memory ({r.why}); these fit: {these}", "model",
            code="model_too_large",
        )

    def describe(self) -> str:
        """A line for the server's start: the budget it judges by."""
        return f"{self.budget / GB:.1f} GB of RAM for models"
