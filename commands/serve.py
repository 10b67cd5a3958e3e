"""`specquant serve`: the OpenAI-compatible API on this computer (runtime.api.server)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from commands.common import add_answer_flags, add_engine_flags, chat_options, engine_settings, model_name
from runtime.errors import UserError

NAME = "serve"
HELP = "serve an OpenAI-compatible API on this computer (127.0.0.1 by default)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from runtime.api import DEFAULT_PORT

    add_engine_flags(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this computer only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument(
        "--api-key", help="require 'Authorization: Bearer KEY' (or set SPECQUANT_API_KEY); needed beyond loopback"
    )
    p.add_argument("--max-queue", type=int, default=32, help="requests that may wait; more get 429 (default 32)")
    p.add_argument("--cors-origin", action="append", metavar="ORIGIN", help="allow browser pages from ORIGIN")
    add_answer_flags(p, unsaid=" when a request does not say")


def main(args: argparse.Namespace) -> int:
    from runtime.api import server
    from runtime.engine.thread import EngineThread

    key = args.api_key or os.environ.get("SPECQUANT_API_KEY") or None
    config = server.ServeConfig(
        args.host, args.port, key, tuple(args.cors_origin or ()), prepare_embeddings=_convert_embedding_model
    )
    server.check_config(config)
    if args.max_queue < 1:
        raise UserError(f"--max-queue {args.max_queue} must be at least 1")
    defaults = server.Defaults(model_name(args.model), engine_settings(args), chat_options(args))
    sock = server.bind(config)
    url = server.url_of(sock)
    auth = ' -H "Authorization: Bearer $SPECQUANT_API_KEY"' if key else ""
    print(f"SpecQuant API for {defaults.model} on {url}/v1 (OpenAI-compatible; Ctrl-C stops)")
    print(
        f"try: curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} "
        """-d '{"messages": [{"role": "user", "content": "Hello!"}]}'""",
        flush=True,
    )
    logging.getLogger("specquant.server").setLevel(logging.INFO)  # one line per request: never its content
    runner = EngineThread(max_queue=args.max_queue)
    try:
        server.serve(server.Service(runner, lambda: defaults, config), sock)
    finally:
        runner.close()
        sock.close()
    print("stopped", file=sys.stderr)
    return 0


def _convert_embedding_model() -> None:
    """/v1/embeddings' first request converts the embedding model from its package (once, about a second)."""
    from converters.embedding import ensure_embedding_model
    from runtime.documents.embed import model_path
    from runtime.models.cache import cache_root

    ensure_embedding_model(model_path(cache_root()))
