"""The dense half of a documents search (runtime.documents.library.Library.search): what a search keeps of one
generation of the index (`Snapshot`: the chunks' collections and one model's vectors as a matrix), and the chunk
ids nearest the query by cosine, from that matrix or, for an index too large to hold, read block by block."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from runtime.errors import UserError

if TYPE_CHECKING:
    from runtime.documents.embed import Embedder
    from runtime.documents.index import Index


# The most vector bytes a Library holds in memory (one float32 matrix of its model, loaded at the first search and
# again after the index changes): 512 MiB, 349,525 chunks of all-MiniLM-L6-v2's 384 dimensions (1.5 KB a
# chunk). An index of more chunks is searched by reading its vectors from SQLite in blocks at every search:
# bounded memory, about 1.3 ms per 1,000 chunks instead of 0.03 (measured at 100,000).
MAX_VECTOR_BYTES = 512 * 2**20
VECTOR_BLOCK = 4096  # vectors read at a time, to load the matrix or to search without it


@dataclass
class Snapshot:
    """What a search keeps of one generation of the index (Index.generation): every chunk id with its
    collection, each collection's chunk ids, and the vectors of one model as a matrix. Made again when the
    generation changes, whoever wrote (this Library, another one, another process)."""

    generation: int
    ids: np.ndarray  # every chunk id, ascending
    collections: np.ndarray  # the collection of each
    scopes: dict[int, np.ndarray] = field(default_factory=dict)  # collection id -> its chunk ids, ascending
    model: str | None = None  # whose vectors are loaded
    vector_ids: np.ndarray | None = None  # chunk ids with a vector of `model`, ascending
    matrix: np.ndarray | None = None  # their vectors, a row each; None: over MAX_VECTOR_BYTES, read per search
    vector_scopes: dict[int, np.ndarray] = field(default_factory=dict)  # collection id -> its rows in `matrix`

    def among(self, cid: int | None) -> np.ndarray | None:
        """The chunk ids of collection `cid`, ascending; None for every chunk (no collection, or the only one)."""
        if cid is None:
            return None
        if cid not in self.scopes:
            self.scopes[cid] = self.ids[self.collections == cid]
        return None if len(self.scopes[cid]) == len(self.ids) else self.scopes[cid]


def _best(scores: np.ndarray, depth: int) -> np.ndarray:
    """The positions of the `depth` highest scores, highest first (ties: the lower position first)."""
    if len(scores) > depth:
        part = np.argpartition(-scores, depth - 1)[:depth]
        return part[np.lexsort((part, -scores[part]))]
    return np.argsort(-scores, kind="stable")


def _check_dimensions(dim: int, query_vector: np.ndarray, model: str) -> None:
    if dim != query_vector.shape[0]:
        raise UserError(
            f"the index holds {dim}-dimensional vectors named {model!r}, the model gives {query_vector.shape[0]}: "
            "remove the collection and add it again"
        )


def nearest(
    index: Index, embedder: Embedder | None, query: str, snapshot: Snapshot, cid: int | None, depth: int
) -> list[int] | None:
    """Chunk ids by cosine to the query, best first; None without an embedder or vectors of its model."""
    if embedder is None:
        return None
    model = embedder.name
    if snapshot.model != model:
        load_vectors(index, snapshot, model)
    if snapshot.vector_ids is None or not len(snapshot.vector_ids):
        return None
    query_vector = embedder.embed([query])[0]
    if snapshot.matrix is None:
        return nearest_read(index, model, query_vector, snapshot.among(cid), depth)
    _check_dimensions(snapshot.matrix.shape[1], query_vector, model)
    cosines = snapshot.matrix @ query_vector  # both sides have length 1
    if snapshot.among(cid) is None:
        return snapshot.vector_ids[_best(cosines, depth)].tolist()
    if cid not in snapshot.vector_scopes:
        scope = snapshot.among(cid)
        snapshot.vector_scopes[cid] = np.flatnonzero(np.isin(snapshot.vector_ids, scope, assume_unique=True))
    rows = snapshot.vector_scopes[cid]
    return snapshot.vector_ids[rows[_best(cosines[rows], depth)]].tolist()


def load_vectors(index: Index, snapshot: Snapshot, model: str) -> None:
    """The vectors of `model` as one float32 matrix (at most MAX_VECTOR_BYTES; beyond that only their ids)."""
    snapshot.model, snapshot.matrix, snapshot.vector_scopes = model, None, {}
    ids: list[np.ndarray] = []
    matrix: np.ndarray | None = None
    filled = 0
    for batch_ids, blob in index.vectors(model, VECTOR_BLOCK):
        ids.append(batch_ids)
        block = np.frombuffer(blob, dtype="<f4").reshape(len(batch_ids), -1)
        if not filled and len(snapshot.ids) * block.shape[1] * 4 <= MAX_VECTOR_BYTES:
            matrix = np.empty((len(snapshot.ids), block.shape[1]), np.float32)  # room for every chunk's
        if matrix is not None and filled + len(block) <= len(matrix) and block.shape[1] == matrix.shape[1]:
            matrix[filled : filled + len(block)] = block
        else:  # vectors of two sizes, or more than the chunks counted (written since): read them per search
            matrix = None
        filled += len(block)
    snapshot.vector_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    snapshot.matrix = matrix[:filled] if matrix is not None else None


def nearest_read(index: Index, model: str, query_vector: np.ndarray, among: np.ndarray | None, depth: int) -> list[int]:
    """`nearest` without the matrix: the vectors read from the index block by block, the best kept."""
    best_ids, best_scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
    for ids, blob in index.vectors(model, VECTOR_BLOCK):
        block = np.frombuffer(blob, dtype="<f4").reshape(len(ids), -1)
        _check_dimensions(block.shape[1], query_vector, model)
        scores = block @ query_vector
        if among is not None:
            keep = np.isin(ids, among, assume_unique=True)
            ids, scores = ids[keep], scores[keep]
        ids, scores = np.concatenate([best_ids, ids]), np.concatenate([best_scores, scores])
        top = _best(scores, depth)
        best_ids, best_scores = ids[top], scores[top]
    return best_ids.tolist()
