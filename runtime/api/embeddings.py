"""`POST /v1/embeddings` in OpenAI's shape, answered by the documents' embedding model (all-MiniLM-L6-v2 run by
llama.cpp, runtime.documents.embed): 384 floats per text, L2-normalised, as JSON numbers or base64 of
little-endian float32 (`encoding_format`; the official client asks for base64 by default).

`input` is a string or a list of strings; token-id arrays are refused (400), as are an empty list and
anything else. `model` is accepted whatever it names: there is one embedding model, and the answer's `model`
says which. Each text longer than the model's 512 word pieces is cut to fit, as documents' chunks are.

What a client cannot do, beside the server's body limits (size, deadline, runtime.api.server): send more than
MAX_INPUTS texts, or more than MAX_TOKENS word pieces in all once cut (about ten seconds of work on 2 cores).
The work runs on a thread of its own, never on the event loop, one request at a time; a client that goes
away stops its request between two groups of texts.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from runtime.api.auth import authorize
from runtime.api.responses import ApiError
from runtime.documents.embed import Embedder, model_path
from runtime.errors import Cancelled, UserError
from runtime.machine.hardware import ensure_backends, physical_cores
from runtime.models.cache import cache_root

if TYPE_CHECKING:
    from runtime.api.server import Service

log = logging.getLogger("specquant.server")

MAX_INPUTS = 2048  # OpenAI's own limit on one request's list
MAX_TOKENS = 32768  # word pieces per request, once cut: about 10 s on 2 cores (3,300 word pieces/s)
ENCODINGS = ("float", "base64")


@dataclass(frozen=True)
class EmbeddingCall:
    """A request's texts and how the vectors go back."""

    texts: list[str]
    encoding: str  # float | base64
    dimensions: int | None


def parse(body: Any) -> EmbeddingCall:
    """The request body as an EmbeddingCall; ApiError 400 with one clear message for anything else."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    text = body.get("input")
    if isinstance(text, str):
        texts = [text]
    elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
        texts = text
    elif isinstance(text, list) and not text:
        raise ApiError(400, "`input` is an empty list: give a string or a list of strings", param="input")
    elif isinstance(text, list) and all(isinstance(t, int | list) for t in text):
        words = "`input` holds token ids: this server embeds text only; send a string or a list of strings"
        raise ApiError(400, words, param="input")
    elif text is None:
        raise ApiError(400, "`input` is missing: give a string or a list of strings", param="input")
    else:
        raise ApiError(400, "`input` must be a string or a list of strings", param="input")
    if len(texts) > MAX_INPUTS:
        raise ApiError(400, f"`input` holds {len(texts)} texts; at most {MAX_INPUTS} per request", param="input")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise ApiError(400, f"`encoding_format` must be 'float' or 'base64', not {encoding!r}"[:200],
                       param="encoding_format")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "`model` must be a string", param="model")
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool)):
        raise ApiError(400, "`dimensions` must be an integer", param="dimensions")
    return EmbeddingCall(texts, encoding, dimensions)


class TooManyTokens(Exception):
    pass


class Embeddings:
    """The endpoint: parses a request, embeds it on its own thread, answers in OpenAI's shape. The model is
    loaded at the first request. `load`: makes the Embedder (tests; default: the cache's converted model)."""

    def __init__(self, service: Service, load: Callable[[], Embedder] | None = None) -> None:
        self.service = service
        self._load = load or self._cached_model
        self._embedder: Embedder | None = None
        # One thread: llama.cpp runs one embedding at a time anyway, and other work's threads stay free.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specquant-embed")

    def _cached_model(self) -> Embedder:
        path = model_path(cache_root())
        prepare = self.service.config.prepare_embeddings
        if prepare is not None and not path.is_file():
            try:
                prepare()
            except UserError as e:  # the package is missing or damaged: the 503 below says what to do
                log.info("no embedding model: %s", e)
        if not path.is_file():
            words = ("the embedding model is not set up on this computer yet: run `specquant docs add PATH` once "
                     "(it converts all-MiniLM-L6-v2), then ask again")
            raise ApiError(503, words, kind="server_error", code="embedding_model_missing")
        threads = self.service.defaults().settings.n_threads or physical_cores()
        return Embedder(path, threads, prepare=ensure_backends)

    async def create(self, request: Request) -> Response:
        authorize(request, self.service.config.api_key)
        call = parse(await self.service._read_json(request))
        cancel = threading.Event()
        gone = asyncio.ensure_future(_disconnected(request))
        gone.add_done_callback(lambda _: cancel.set())
        try:
            future = self._thread.submit(self._embed, call.texts, cancel)
            name, vectors, tokens = await asyncio.wrap_future(future)
        except TooManyTokens as e:
            raise ApiError(400, str(e), param="input", code="too_many_tokens") from None
        except Cancelled:  # nobody reads this answer; it only keeps the log from calling it a failure
            raise ApiError(499, "the client went away", code="client_gone") from None
        finally:
            gone.cancel()
        if call.dimensions is not None and call.dimensions != vectors.shape[1]:
            words = f"`dimensions` {call.dimensions}: this model's vectors have {vectors.shape[1]}, always"
            raise ApiError(400, words, param="dimensions")
        data = [{"object": "embedding", "index": i, "embedding": _encoded(v, call.encoding)} for i, v in
                enumerate(vectors)]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": name, "usage": usage})

    def _embed(self, texts: list[str], cancel: threading.Event) -> tuple[str, np.ndarray, int]:
        """On the endpoint's thread: (model name, vectors, word pieces once cut)."""
        if cancel.is_set():  # gone while it waited for the thread
            raise Cancelled("the client went away")
        if self._embedder is None:
            self._embedder = self._load()
        embedder = self._embedder
        fitted, tokens = embedder.fit_all(texts)
        if tokens > MAX_TOKENS:
            raise TooManyTokens(f"`input` holds {tokens} word pieces (each text cut at {embedder.max_tokens}); "
                                f"at most {MAX_TOKENS} per request: send fewer or shorter texts")
        return embedder.name, embedder.embed(fitted, cancel), tokens

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
        if self._embedder is not None:
            self._embedder.close()


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (its body has been read: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
