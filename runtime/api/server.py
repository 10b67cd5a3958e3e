"""`specquant serve`: an OpenAI-compatible API over the Engine (Starlette, uvicorn, sse-starlette).

Every request becomes a `Job` for the one engine thread (`runtime.engine.thread`), which the window shares
when it serves: clients get the router, the speculative loop and the placement, and see them in each
response's `specquant` object. A client that goes away cancels its job within one verify cycle. Requests
are logged by method, raw path, status and time, never by content (runtime.api.request_log). A stream opens
as soon as its request is accepted and sends keep-alive events every `keepalive_s` while its prompt is read
(runtime.api.answers); count_tokens never waits for the engine (runtime.api.token_count).

What a web page or a broken client cannot do (docs/api.md, "Security"): web pages are kept out by
runtime.api.guard; a body must arrive within BODY_DEADLINE_S and hold at most MAX_BODY bytes (runtime.api.body,
and runtime.api.requests' message caps); a stream whose reader stops reading is cancelled after STALL_S, or
once it falls BACKLOG chunks behind; at most MAX_CONNECTIONS connections are served at once (uvicorn answers
503 beyond), and to make room for a new one the oldest idle connection is dropped; a request's head must
arrive within HEADER_TIMEOUT_S (runtime.api.connections); and a cancelled request leaves the engine's queue
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive

from runtime.api import DEFAULT_PORT, answers
from runtime.api.anthropic_messages import COUNT_TOKENS, MESSAGES
from runtime.api.auth import authorize
from runtime.api.body import read_json
from runtime.api.dialects import CHAT, TEXT, Dialect
from runtime.api.embeddings import Embeddings
from runtime.api.error_shapes import error_response
from runtime.api.guard import BrowserGuard
from runtime.api.models import ModelRoom, is_cached, model_entry, unknown_model
from runtime.api.offload import ParseThreads, TooSlow
from runtime.api.openai_responses import RESPONSES
from runtime.api.request_log import RequestLog
from runtime.api.responses import ApiError
from runtime.api.token_count import count_prompt
from runtime.chat.conversation import request_turn
from runtime.engine.options import ChatOptions, EngineSettings
from runtime.engine.reader import JobReader
from runtime.engine.thread import EngineThread, QueueFull
from runtime.errors import UserError, readable
from runtime.machine.rpc import is_loopback
from runtime.models.cache import complete_models

log = logging.getLogger("specquant.server")
SHUTDOWN_GRACE_S = 3.0  # below uvicorn's timeout_graceful_shutdown (5 s)
MAX_BODY = 1 << 20  # 1 MiB: a long chat is well under it; more is a mistake or an attack
BODY_DEADLINE_S = 30.0  # a body still arriving after this is a stalled or hostile client
STALL_S = 30.0  # a stream's reader that takes no data for this long has gone: its answer is cancelled
BACKLOG = 1024  # chunks a stream's reader may fall behind before its answer is cancelled
MAX_CONNECTIONS = 64
HEADER_TIMEOUT_S = 10.0  # a request's head (or the next one on a kept-alive connection) must come within this
PARSE_DEADLINE_S = 10.0  # a request whose schemas take longer to compile is refused (400), not waited for
# A stream's keep-alive (Anthropic's `ping` event, else an SSE comment) this often: coding agents time a silent
# stream out (and retry its whole prefill) long before a long prompt is read on a CPU.
KEEPALIVE_S = 5.0


@dataclass(frozen=True)
class Defaults:
    """What a request does not say: the model, the engine's settings and the base chat options."""

    model: str
    settings: EngineSettings
    options: ChatOptions


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body: int = MAX_BODY
    body_deadline_s: float = BODY_DEADLINE_S
    stall_s: float = STALL_S
    header_timeout_s: float = HEADER_TIMEOUT_S
    parse_deadline_s: float = PARSE_DEADLINE_S
    keepalive_s: float = KEEPALIVE_S
    # Called before the embedding model first loads: converts it on first use (converters.embedding, which
    # runtime may not import; commands/serve.py and the window pass it). None: /v1/embeddings needs it converted.
    prepare_embeddings: Callable[[], object] | None = field(default=None, compare=False)


def check_config(config: ServeConfig) -> None:
    """The refusals `serve` makes before it binds anything (one line each)."""
    if not is_loopback(config.host) and not config.api_key:
        raise UserError(
            f"--host {config.host} would let other computers use this one's model: give --api-key KEY too "
            "(or keep the default, 127.0.0.1)"
        )
    if not 0 <= config.port <= 65535:
        raise UserError(f"--port {config.port} must be 0 to 65535")


def bind(config: ServeConfig) -> socket.socket:
    """The listening socket, bound here so a taken port is one clear line (and port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {config.host}:{config.port}: {e.strerror or e}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Service:
    """The API's state: the engine thread, the defaults, and the jobs it has in flight. `room`: which models
    fit this machine, so that a request for one that does not is refused before it loads (None: not judged)."""

    def __init__(
        self,
        runner: EngineThread,
        defaults: Callable[[], Defaults],
        config: ServeConfig,
        room: ModelRoom | None = None,
    ) -> None:
        self.runner = runner
        self.defaults = defaults
        self.config = config
        self.room = room
        self.readers: set[JobReader] = set()  # the answers in flight
        self.parser = ParseThreads()
        self.embeddings = Embeddings(  # its own bounded queue, yielding to the engine's chats
            self._read_json, config.api_key, lambda: self.defaults().settings.n_threads, lambda: self.runner.busy,
            config.prepare_embeddings,
        )

    def cancel_all(self) -> None:
        """Cancel this API's jobs (the window's own, on a shared engine thread, are left alone); each stream
        still sends its last event."""
        for reader in list(self.readers):
            reader.cancel()

    # --- endpoints ---------------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if not is_loopback(self.config.host):  # other computers learn nothing without the key
            authorize(request, self.config.api_key)
        d = self.defaults()
        queue = {"busy": self.runner.busy, "waiting": self.runner.waiting, "max_queue": self.runner.max_queue}
        loaded = {"loaded": self.runner.loaded, "models_max": self.runner.max_models}
        return JSONResponse({"status": "ok", "model": d.model} | queue | loaded)

    async def models(self, request: Request) -> Response:
        authorize(request, self.config.api_key)
        loaded = self.runner.loaded
        n_ctx = self.defaults().settings.n_ctx
        return JSONResponse({"object": "list", "data": [model_entry(m, loaded, n_ctx) for m in complete_models()]})

    async def model(self, request: Request) -> Response:
        authorize(request, self.config.api_key)
        name = request.path_params["name"]
        for m in complete_models():
            if m.name == name:
                return JSONResponse(model_entry(m, self.runner.loaded, self.defaults().settings.n_ctx))
        raise unknown_model(name)

    async def count_tokens(self, request: Request) -> Response:
        """`POST /v1/messages/count_tokens`: the prompt built as a message's would be and counted with the model's
        tokenizer alone (runtime.api.token_count), never queued behind the engine's answers."""
        authorize(request, self.config.api_key)
        body = await self._read_json(request)
        d = self.defaults()
        try:
            call = await self.parser.run(self.config.parse_deadline_s, COUNT_TOKENS.parse, body, d.options,
                                         d.settings.n_ctx)
        except TooSlow as e:
            raise ApiError(400, f"the request's schemas {e} to compile: make them smaller",
                           code="schema_too_large") from None
        model = call.model or d.model
        if not is_cached(model):
            raise unknown_model(model)
        messages, options = request_turn(call.messages, call.options)
        counted = await asyncio.to_thread(count_prompt, model, messages, options)
        if counted > d.settings.n_ctx - 1:  # as a message's: a prompt the context cannot hold is refused
            words = (f"the prompt is {counted} tokens; the context holds {d.settings.n_ctx} with 1 kept for the "
                     "answer: shorten it or raise the context size")
            raise ApiError(400, words, "messages", code="context_length_exceeded")
        return JSONResponse({"input_tokens": counted})

    async def chat_completions(self, request: Request) -> Response:
        return await self._answer(request, CHAT)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, TEXT)

    async def _answer(self, request: Request, dialect: Dialect) -> Response:
        """A chat completion or a text completion (`dialect`): one engine job, answered whole or streamed."""
        authorize(request, self.config.api_key)
        body = await self._read_json(request)
        d = self.defaults()
        try:  # off the event loop: compiling a request's schemas is native code that cannot yield
            call = await self.parser.run(self.config.parse_deadline_s, dialect.parse, body, d.options, d.settings.n_ctx)
        except TooSlow as e:
            words = f"the request's schemas {e} to compile: make them smaller"
            raise ApiError(400, words, code="schema_too_large") from None
        call = answers.prepared(call, body)
        model = call.model or d.model
        if not is_cached(model):
            raise unknown_model(model)
        if self.room is not None:
            self.room.check(model)

        # One round, the request's conversation's turn as every front end's (runtime.chat); the client runs
        # its own tools.
        messages, options = request_turn(call.messages, call.options)
        reader = JobReader(self.runner, loop=asyncio.get_running_loop(), backlog=BACKLOG, on_close=self.readers.discard)
        try:
            reader.post(model, d.settings, messages, options)
        except QueueFull as e:
            retry = {"Retry-After": str(e.retry_after_s)}
            raise ApiError(429, str(e), kind="rate_limit_error", code="queue_full", headers=retry) from None
        # Nothing between post and here can fail: the reader's close (the request over: answered, failed or
        # abandoned) owns the job from now on, stopping it if it still runs.
        self.readers.add(reader)
        reader.close_on(_disconnected(request.receive))
        streaming = False
        try:
            if call.stream:
                begun = await answers.opening(reader, dialect.prompt, self.config.keepalive_s)
                streaming = True  # the stream's own end closes the reader
                stream = answers.events(reader, begun, dialect, model, call)
                # On Ctrl-C our cancel ends the answer within one cycle; the grace period lets the stream
                # send its last event ("cancelled") and [DONE] before sse-starlette would cut it off.
                return EventSourceResponse(
                    stream, ping=self.config.keepalive_s, ping_message_factory=functools.partial(_ping, dialect),
                    shutdown_grace_period=SHUTDOWN_GRACE_S, send_timeout=self.config.stall_s,
                )
            first = await answers.next_chunk(reader, dialect.prompt)
            return JSONResponse(await answers.whole(reader, first, dialect, model, call))
        finally:
            if not streaming:
                reader.close()

    async def _read_json(self, request: Request) -> Any:
        return await read_json(request, self.config.max_body, self.config.body_deadline_s)


def _ping(dialect: Dialect) -> ServerSentEvent:
    """A stream's keep-alive: its dialect's ping event, else an SSE comment (every client skips those)."""
    if dialect.ping is None:
        return ServerSentEvent(comment="keep-alive")
    return ServerSentEvent(dialect.ping["data"], event=dialect.ping.get("event"))


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has gone away (the body has been read, so the next message is the end)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """An unexpected error becomes a one-line 500 in OpenAI's shape (its traceback only with --verbose)."""

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (ApiError, HTTPException):
            raise
        except UserError as e:  # the server's own settings or the cache said no: the client can read why
            raise ApiError(400, str(e)) from None
        except Exception as e:
            log.debug("request failed", exc_info=True)
            log.error("%s %s failed: %s", request.method, request.url.path, readable(e))
            raise ApiError(500, readable(e), kind="server_error") from None

    return guarded


def create_app(service: Service) -> Starlette:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(request.url.path, exc)  # Anthropic's shape under /v1/messages

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        error = ApiError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")
        return error_response(request.url.path, error)

    config = service.config
    middleware = [
        Middleware(RequestLog),
        Middleware(BrowserGuard, loopback=is_loopback(config.host), origins=config.cors_origins),  # type: ignore[arg-type]
    ]
    if service.config.cors_origins:
        cors = {"allow_origins": list(service.config.cors_origins), "allow_methods": ["GET", "POST"]}
        middleware.append(Middleware(CORSMiddleware, allow_headers=["Authorization", "Content-Type"], **cors))
    routes = [
        Route("/health", _guarded(service.health)),
        Route("/v1/models", _guarded(service.models)),
        Route("/v1/models/{name}", _guarded(service.model)),
        Route("/v1/chat/completions", _guarded(service.chat_completions), methods=["POST"]),
        Route("/v1/completions", _guarded(service.completions), methods=["POST"]),
        Route("/v1/embeddings", _guarded(service.embeddings.create), methods=["POST"]),
        *(Route(path, _guarded(functools.partial(service._answer, dialect=dialect)), methods=["POST"])
          for path, dialect in (("/v1/messages", MESSAGES), ("/v1/responses", RESPONSES))),
        Route("/v1/messages/count_tokens", _guarded(service.count_tokens), methods=["POST"]),
    ]
    handlers = {ApiError: api_error, HTTPException: http_error}
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)  # type: ignore[arg-type]


def uvicorn_server(service: Service) -> Any:
    """A uvicorn Server for the app, our logging kept (no access log: RequestLog says what is needed), on h11
    with the connection limits of runtime.api.connections."""
    import uvicorn

    from runtime.api.connections import protocol

    http = protocol(service.config.header_timeout_s, service.config.stall_s)
    config = uvicorn.Config(
        create_app(service), log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=5,
        limit_concurrency=MAX_CONNECTIONS, http=http,
    )
    return uvicorn.Server(config)


def serve(service: Service, sock: socket.socket) -> None:
    """Serve on `sock` until Ctrl-C or SIGTERM; answers in flight are cancelled first, then it returns."""
    server = uvicorn_server(service)
    original = server.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        service.cancel_all()  # the streams end within one cycle, so the graceful shutdown is quick
        original(sig, frame)

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises a captured Ctrl-C again once it has shut down
        server.run(sockets=[sock])


class BackgroundServer:
    """The window's API server: uvicorn on a thread of its own, sharing the window's engine thread."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.sock = bind(service.config)
        self.url = url_of(self.sock)
        self.server = uvicorn_server(service)
        self.thread = threading.Thread(target=self._run, name="specquant-api", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except Exception:  # must not take the window down; the status bar says the server stopped
            log.warning("the API server stopped", exc_info=True)

    def stop(self, timeout: float = 10.0) -> None:
        self.service.cancel_all()
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()
