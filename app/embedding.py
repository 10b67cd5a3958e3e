"""The embedding model of the window's documents (all-MiniLM-L6-v2): converted from its package into the
model cache on first use, on the documents worker's thread, so the window searches as the CLI does (hybrid,
words and meaning): both hand the converter to runtime.engine.embedder.open_embedder, the one factory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.documents.embed import Embedder

log = logging.getLogger("specquant.app")


def embedding_model() -> Embedder | None:
    """The embedder, its model converted when first needed; None (logged) when the package is not installed:
    words alone (BM25) still index and search (runtime.engine.embedder)."""
    from converters.embedding import ensure_embedding_model, package_zip
    from runtime.engine.embedder import open_embedder

    return open_embedder(None, ensure_embedding_model, package_zip, log.info)
