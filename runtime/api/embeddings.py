"""`POST /v1/embeddings` in OpenAI's shape, answered by the documents' embedding model (all-MiniLM-L6-v2 run by
llama.cpp, runtime.documents.embed): 384 floats per text, L2-normalised, as JSON numbers or base64 of
little-endian float32 (`encoding_format`; the official client asks for base64 by default).

`input` is a string or a list of strings; token-id arrays are refused (400), as are an empty list, `true`
and `false`, and anything else. `model` is accepted whatever it names: there is one embedding model, and the
answer's `model` says which. Each text longer than the model's 256 word pieces (runtime.documents.embed) is
cut to fit, as documents' chunks are. Every argument is checked before any work is done.

What a client cannot do, beside the server's body limits (size, deadline, runtime.api.server): send more than
MAX_INPUTS texts, or more than MAX_TOKENS word pieces in all once cut (about ten seconds of work on 2 cores),
or queue more than MAX_WAITING requests behind the one being embedded (then: 429 with Retry-After). The work
runs on a thread of its own, never on the event loop, one request at a time and one group of texts at a time;
while the engine answers a chat, it waits up to CHAT_WAIT_S before each text, so that chats, which a person
reads as they come, keep their speed. A client that goes away stops its request between two groups of texts.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import logging
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from runtime.api.auth import authorize
from runtime.api.responses import ApiError
from runtime.documents.embed import GROUP, Embedder
from runtime.engine.embedder import embedding_path, open_embedder
from runtime.errors import Cancelled, UserError

log = logging.getLogger("specquant.server")

MAX_INPUTS = 2048  # OpenAI's own limit on one request's list
MAX_TOKENS = 32768  # word pieces per request, once cut: about 10 s on 2 cores (3,300 word pieces/s)
MAX_WAITING = 4  # requests that may wait behind the one being embedded; one more is a 429
CHAT_WAIT_S = 2.0  # how long a text waits for a running chat answer before it is embedded anyway
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
    elif _holds_bool(text):  # JSON's true is Python's True, an int: not a token id
        words = "`input` holds true or false: booleans are not text; send a string or a list of strings"
        raise ApiError(400, words, param="input")
    elif isinstance(text, list) and _token_ids(text):
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
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1):
        raise ApiError(400, "`dimensions` must be a positive integer", param="dimensions")
    return EmbeddingCall(texts, encoding, dimensions)


def _holds_bool(value: Any) -> bool:
    return isinstance(value, list) and any(
        isinstance(t, bool) or (isinstance(t, list) and any(isinstance(i, bool) for i in t)) for t in value
    )


def _token_ids(value: list[Any]) -> bool:
    """Whether `value` is OpenAI's token-id input: a list of ints, or a list of lists of ints."""
    if all(isinstance(t, int) for t in value):
        return True
    return all(isinstance(t, list) and all(isinstance(i, int) for i in t) for t in value)


class TooManyTokens(Exception):
    pass


class WrongDimensions(Exception):
    pass


class Embeddings:
    """The endpoint: parses a request, embeds it on its own thread, answers in OpenAI's shape. The model is
    loaded at the first request.

    Given what it needs of the server (runtime.api.server, which imports this module): `read_json` reads a
    request's body within the server's limits, `api_key` guards it, `threads` gives llama.cpp's thread count
    (None: the physical cores), `chat_busy` says whether the engine is answering a chat, `prepare` converts
    the model on first use. `load`: makes the Embedder (tests; default: the cache's converted model)."""

    def __init__(
        self,
        read_json: Callable[[Request], Awaitable[Any]],
        api_key: str | None = None,
        threads: Callable[[], int | None] = lambda: None,
        chat_busy: Callable[[], bool] = lambda: False,
        prepare: Callable[[], object] | None = None,
        load: Callable[[], Embedder] | None = None,
    ) -> None:
        self._read_json, self._api_key, self._threads = read_json, api_key, threads
        self._chat_busy, self._prepare = chat_busy, prepare
        self._load = load or self._cached_model
        self._embedder: Embedder | None = None
        self._dim: int | None = None  # the model's, once loaded
        # One thread: llama.cpp runs one embedding at a time anyway, and other work's threads stay free.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specquant-embed")
        self.in_flight = 0  # requests being embedded or waiting (changed on the event loop only)
        self._durations: collections.deque[float] = collections.deque(maxlen=16)

    @property
    def waiting(self) -> int:
        """Requests waiting behind the one being embedded."""
        return max(0, self.in_flight - 1)

    def _cached_model(self) -> Embedder:
        prepare = self._prepare
        if prepare is not None and not embedding_path().is_file():
            try:
                prepare()
            except UserError as e:  # the package is missing or damaged: the 503 below says what to do
                log.info("no embedding model: %s", e)
        embedder = open_embedder(self._threads())
        if embedder is None:
            words = ("the embedding model is not set up on this computer yet: run `specquant docs add PATH` once "
                     "(it converts all-MiniLM-L6-v2), then ask again")
            raise ApiError(503, words, kind="server_error", code="embedding_model_missing")
        return embedder

    async def create(self, request: Request) -> Response:
        authorize(request, self._api_key)
        call = parse(await self._read_json(request))
        if call.dimensions is not None and self._dim is not None:  # the model's, known once it is loaded
            problem = _dimensions_problem(call.dimensions, self._dim)
            if problem:
                raise ApiError(400, problem, param="dimensions")
        if self.in_flight > MAX_WAITING:
            retry = self._retry_after()
            words = f"{self.waiting} embedding requests are waiting already; try again in {retry} s"
            raise ApiError(429, words, kind="rate_limit_error", code="queue_full", headers={"Retry-After": str(retry)})
        self.in_flight += 1
        cancel = threading.Event()
        gone = asyncio.ensure_future(_disconnected(request))
        gone.add_done_callback(lambda _: cancel.set())
        try:
            future = self._thread.submit(self._embed, call, cancel)
            name, vectors, tokens = await asyncio.wrap_future(future)
        except TooManyTokens as e:
            raise ApiError(400, str(e), param="input", code="too_many_tokens") from None
        except WrongDimensions as e:
            raise ApiError(400, str(e), param="dimensions") from None
        except Cancelled:  # nobody reads this answer; it only keeps the log from calling it a failure
            raise ApiError(499, "the client went away", code="client_gone") from None
        finally:
            self.in_flight -= 1
            gone.cancel()
        data = [{"object": "embedding", "index": i, "embedding": _encoded(v, call.encoding)} for i, v in
                enumerate(vectors)]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": name, "usage": usage})

    def _embed(self, call: EmbeddingCall, cancel: threading.Event) -> tuple[str, np.ndarray, int]:
        """On the endpoint's thread: (model name, vectors, word pieces once cut)."""
        if cancel.is_set():  # gone while it waited for the thread
            raise Cancelled("the client went away")
        began = time.monotonic()
        if self._embedder is None:
            self._embedder = self._load()
            self._dim = self._embedder.dim
        embedder = self._embedder
        if call.dimensions is not None and (problem := _dimensions_problem(call.dimensions, embedder.dim)):
            raise WrongDimensions(problem)  # before any text is read
        fitted, tokens = embedder.fit_all(call.texts)
        if tokens > MAX_TOKENS:
            raise TooManyTokens(f"`input` holds {tokens} word pieces (each text cut at {embedder.max_tokens}); "
                                f"at most {MAX_TOKENS} per request: send fewer or shorter texts")
        parts: list[np.ndarray] = []
        start = 0
        while start < len(fitted):
            # A chat answer running: wait for its end (a while), then embed one text only, so the chat keeps
            # most of the cores; otherwise a whole group.
            size = GROUP if self._wait_for_chat(cancel) else 1
            parts.append(embedder.embed(fitted[start : start + size], cancel))
            start += size
        self._durations.append(time.monotonic() - began)
        return embedder.name, np.concatenate(parts), tokens

    def _wait_for_chat(self, cancel: threading.Event) -> bool:
        """Wait up to CHAT_WAIT_S while the engine answers a chat; whether it is idle now."""
        deadline = time.monotonic() + CHAT_WAIT_S
        while self._chat_busy():
            if cancel.is_set() or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def _retry_after(self) -> int:
        """Seconds until a place is likely free: about one typical request (median of the recent ones; 5 s
        before any has finished)."""
        return max(1, round(statistics.median(self._durations) if self._durations else 5.0))

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
        if self._embedder is not None:
            self._embedder.close()


def _dimensions_problem(asked: int, dim: int) -> str | None:
    return None if asked == dim else f"`dimensions` {asked}: this model's vectors have {dim}, always"


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (its body has been read: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
