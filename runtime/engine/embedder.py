"""The one way an Embedder is made: the model cache's embedding model (all-MiniLM-L6-v2 as a `bert` GGUF,
runtime.documents.embed), loaded on first use with ggml's backends ready.

Every front end calls `open_embedder`: the CLI's `docs` commands, the window's Documents panel, the engine's
grounded answers and `/v1/embeddings`. Converting the model from its package is the converters' work, which
runtime never imports, so a surface hands it in as `convert` (converters.embedding.ensure_embedding_model)
and `check` (converters.embedding.package_zip: raises UserError when the package is not installed).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runtime.documents.embed import Embedder, model_path
from runtime.errors import UserError
from runtime.machine.hardware import ensure_backends, physical_cores
from runtime.models.cache import cache_root

WORDS_ALONE = "searching by words alone"


def embedding_path() -> Path:
    """Where the converted embedding model lives in the model cache."""
    return model_path(cache_root())


def open_embedder(
    threads: int | None = None,
    convert: Callable[[Path], object] | None = None,
    check: Callable[[], object] | None = None,
    note: Callable[[str], None] | None = None,
) -> Embedder | None:
    """The embedder on `threads` (None: the physical cores). When the model is not converted yet: with
    `convert` it is converted when first needed (so a command that fails its own checks converts nothing),
    after `check` says its package is there; without `convert`, or when `check` raises UserError, None (the
    reason, and that search goes on by words alone, told to `note`): BM25 still indexes and searches."""
    path = embedding_path()
    if not path.is_file():
        if convert is None:
            return None
        if check is not None:
            try:
                check()
            except UserError as e:
                if note is not None:
                    note(f"{e}; {WORDS_ALONE}")
                return None

    def prepare() -> None:
        if convert is not None:
            convert(path)  # checks what is there, converts only what is missing
        ensure_backends()

    return Embedder(path, threads or physical_cores(), prepare=prepare)
