"""The models the API offers: the complete models in the cache, listed in OpenAI's shape (with their tiers),
and the 404 for one that is not there."""

from __future__ import annotations

from typing import Any

from runtime.api.responses import ApiError
from runtime.errors import UserError
from runtime.models.cache import ModelDir, cache_root, check_name, list_models


def complete_models() -> list[Any]:
    """The cache's complete models."""
    return [m for m in list_models(cache_root()) if m.complete]


def model_entry(m: Any) -> dict[str, Any]:
    """A model as `GET /v1/models` lists it."""
    rows = ModelDir(m.path.parent, m.name).tier_rows(m.manifest or {})
    tiers = [{"tier": r["tier"], "bytes": r["bytes"]} for r in rows]
    created = int(m.path.stat().st_mtime)
    return {"id": m.name, "object": "model", "created": created, "owned_by": "specquant", "tiers": tiers}


def unknown_model(name: str) -> ApiError:
    known = ", ".join(m.name for m in complete_models()) or "none"
    return ApiError(404, f"model {name!r} is not in the cache (cached: {known})", "model", code="model_not_found")


def is_cached(name: str) -> bool:
    """Whether `name` is a complete model in the cache (one manifest read, not a listing of the cache)."""
    try:
        manifest = ModelDir(cache_root(), check_name(name)).read_manifest()
    except UserError:  # not a valid model name at all
        return False
    return bool(manifest and manifest.get("complete"))
