"""The embedding model of the window's documents (all-MiniLM-L6-v2): converted from its package into the
model cache on first use, on the documents worker's thread, so the window searches as the CLI does (hybrid,
words and meaning). Its own module because the converter and the documents index meet only in a surface: the
CLI has the same few lines in commands/common.py, and app/ never imports commands/.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from runtime.errors import UserError

if TYPE_CHECKING:
    from runtime.documents.embed import Embedder

log = logging.getLogger("specquant.app")


def embedding_model() -> Embedder | None:
    """The embedder, its model converted when first needed; None (logged) when the package is not installed:
    words alone (BM25) still index and search."""
    from converters.embedding import ensure_embedding_model, package_zip
    from runtime.documents.embed import Embedder, model_path
    from runtime.machine.hardware import ensure_backends, physical_cores
    from runtime.models.cache import cache_root

    path = model_path(cache_root())
    if not path.is_file():
        try:
            package_zip()
        except UserError as e:
            log.info("%s; searching by words alone", e)
            return None

    def prepare() -> None:
        ensure_embedding_model(path)
        ensure_backends()

    return Embedder(path, physical_cores(), prepare=prepare)
