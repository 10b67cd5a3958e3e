"""`specquant serve`: the OpenAI-compatible API on this computer (runtime.api.server)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from commands.common import add_answer_flags, add_engine_flags, chat_options, engine_settings, model_name
from runtime.errors import UserError

if TYPE_CHECKING:
    from runtime.engine.options import EngineSettings
    from runtime.machine.hardware import Inventory
    from runtime.plan.context import ContextPlan

NAME = "serve"
HELP = "serve an OpenAI-compatible API on this computer (127.0.0.1 by default)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from runtime.api import DEFAULT_PORT
    from runtime.plan.context import AGENT_CTX

    add_engine_flags(p, ctx_planned=f"planned from memory and the model, up to {AGENT_CTX} for coding agents")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this computer only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument(
        "--api-key", help="require 'Authorization: Bearer KEY' (or set SPECQUANT_API_KEY); needed beyond loopback"
    )
    p.add_argument("--max-queue", type=int, default=32, help="requests that may wait; more get 429 (default 32)")
    p.add_argument("--cors-origin", action="append", metavar="ORIGIN", help="allow browser pages from ORIGIN")
    p.add_argument(
        "--models-max", type=int, metavar="N",
        help="models kept loaded at once; a request for another unloads the least recently used (default: as "
        "many of the converted models as fit in memory together)",
    )
    p.add_argument(
        "--idle-unload", type=float, metavar="MINUTES",
        help="unload a model that has answered nothing for this long (default: never)",
    )
    p.add_argument(
        "--keep-alive", type=float, default=None, metavar="SECONDS",
        help="while a streamed answer's prompt is read, send a keep-alive event this often (default 5)",
    )
    add_answer_flags(p, unsaid=" when a request does not say")


def main(args: argparse.Namespace) -> int:
    from runtime.api import server
    from runtime.api.models import ModelRoom
    from runtime.engine.thread import EngineThread
    from runtime.machine.hardware import inventory
    from runtime.models.cache import complete_models

    key = args.api_key or os.environ.get("SPECQUANT_API_KEY") or None
    keepalive = server.KEEPALIVE_S if args.keep_alive is None else args.keep_alive
    if not keepalive > 0:
        raise UserError(f"--keep-alive {args.keep_alive:g} must be more than 0 seconds")
    config = server.ServeConfig(
        args.host, args.port, key, tuple(args.cors_origin or ()), keepalive_s=keepalive,
        prepare_embeddings=_convert_embedding_model,
    )
    server.check_config(config)
    if args.max_queue < 1:
        raise UserError(f"--max-queue {args.max_queue} must be at least 1")
    if args.models_max is not None and args.models_max < 1:
        raise UserError(f"--models-max {args.models_max} must be at least 1")
    if args.idle_unload is not None and not args.idle_unload > 0:
        raise UserError(f"--idle-unload {args.idle_unload:g} must be more than 0 minutes")
    model, inv = _default_model(args.model), inventory()
    settings, context = serve_settings(args, model, inv)
    defaults = server.Defaults(model, settings, chat_options(args))
    room = ModelRoom(inv, defaults.settings)
    models_max = args.models_max or room.models_max()
    sock = server.bind(config)
    url = server.url_of(sock)
    auth = ' -H "Authorization: Bearer $SPECQUANT_API_KEY"' if key else ""
    print(f"SpecQuant API for {defaults.model} on {url}/v1 (OpenAI-compatible; Ctrl-C stops)")
    print(
        f"try: curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} "
        """-d '{"messages": [{"role": "user", "content": "Hello!"}]}'""",
        flush=True,
    )
    idle = None if args.idle_unload is None else args.idle_unload * 60
    print(
        f"models by name: {', '.join(m.name for m in complete_models())}; at most {models_max} loaded at once "
        f"({room.describe()})" + (f", each unloaded after {args.idle_unload:g} min idle" if idle else ""),
        file=sys.stderr,
    )
    print(context_line(context), file=sys.stderr)
    logging.getLogger("specquant.server").setLevel(logging.INFO)  # one line per request: never its content
    logging.getLogger("specquant.worker").setLevel(logging.INFO)  # and each model unloaded, with why
    runner = EngineThread(max_queue=args.max_queue, max_models=models_max, idle_unload_s=idle, calibrate_when_idle=True)
    try:
        server.serve(server.Service(runner, lambda: defaults, config, room), sock)
    finally:
        runner.close()
        sock.close()
    print("stopped", file=sys.stderr)
    return 0


def serve_settings(args: argparse.Namespace, model: str, inv: Inventory) -> tuple[EngineSettings, ContextPlan]:
    """The engine's settings, and the context: `--ctx`, else planned for the default `model` from the memory
    of `inv` (runtime.plan.context); every model served by name answers with the same context."""
    import dataclasses

    from runtime.engine.prompt_cache import default_ram_budget
    from runtime.models.cache import ModelDir, cache_root
    from runtime.plan.context import FLOOR_CTX, ContextPlan, plan_context

    asked = args.ctx
    settings = engine_settings(argparse.Namespace(**vars(args) | {"ctx": FLOOR_CTX if asked is None else asked}))
    if asked is not None:
        return settings, ContextPlan(asked, "--ctx")
    if settings.rpc:  # the parent's layers and their KV cache live on the workers: only the engine sees them
        return settings, ContextPlan(FLOOR_CTX, "the default: with --rpc the workers' memory decides")
    root = cache_root()
    manifest = ModelDir(root, model).read_manifest() or {}
    sibling = ModelDir(root, settings.draft_model).read_manifest() if settings.draft_model else None
    cache = default_ram_budget() if settings.prompt_cache_bytes is None else settings.prompt_cache_bytes
    plan = plan_context(model, manifest, inv, settings.placement, cache, sibling)
    return dataclasses.replace(settings, n_ctx=plan.n_ctx), plan


def context_line(plan: ContextPlan) -> str:
    """One line at start: the context every answer has, and why (coding agents need a large one)."""
    from runtime.plan.context import AGENT_PROMPT

    why = plan.why if plan.why == "--ctx" else f"{plan.why}; --ctx sets it"
    line = f"context: {plan.n_ctx:,} tokens per request, prompt and answer ({why})"
    if not plan.holds_agents:
        line += (f"; coding agents (Claude Code, Codex, OpenCode) send prompts up to about {AGENT_PROMPT:,} "
                 "tokens, more than it holds with room to answer")
    return line


def _default_model(name: str | None) -> str:
    """The model for requests that name none: `--model`, else the one the runtime would pick (the only one, or
    the demo), else the first converted by name: every other is still served by name."""
    from runtime.models.cache import complete_models

    try:
        return model_name(name)
    except UserError:
        if name is not None or not complete_models():
            raise
        return complete_models()[0].name


def _convert_embedding_model() -> None:
    """/v1/embeddings' first request converts the embedding model from its package (once, about a second)."""
    from converters.embedding import ensure_embedding_model
    from runtime.documents.embed import model_path
    from runtime.models.cache import cache_root

    ensure_embedding_model(model_path(cache_root()))
