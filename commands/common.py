"""What several commands share: the engine and answer flags, reading a prompt, ChatOptions and EngineSettings
from flags, the engine itself, and the log set-up."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.decode.sampling import LLAMA_DEFAULTS
from runtime.engine.options import ChatOptions, thinking_option
from runtime.errors import UserError
from runtime.models.cache import TIERS, check_name
from runtime.plan.placement import PLACEMENT_MODES, PlacementSettings
from runtime.plan.policy import DRAFT_CHOICES, PRESET_NAMES
from runtime.plan.router import LEVELS

if TYPE_CHECKING:  # imported where used: `specquant --help` must not load llama.cpp
    from runtime.decode.grammar import Grammar
    from runtime.documents.embed import Embedder
    from runtime.engine.engine import EngineSettings
    from runtime.engine.interface import LoadedEngine

# The flags' defaults are the runtime's own (one source: the dataclasses).
CHAT, PLACEMENT = ChatOptions(), PlacementSettings()
MAX_MEMORY_HELP = "memory the model may use, in GB (default: what is available, less a margin)"


def gb(n: int) -> str:
    """A size for people: GB from 0.1 GB up, MB below."""
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


def add_engine_flags(p: argparse.ArgumentParser, ctx_planned: str | None = None) -> None:
    """The flags of a command that loads a model: which one, its context, threads and placement.
    `ctx_planned`: how the command plans the context when --ctx is not given (then None), in --help's words."""
    from runtime.engine.engine import EngineSettings

    engine = EngineSettings()
    p.add_argument("--model", help="model name in the cache (default: the only one, else the demo)")
    p.add_argument(
        "--draft-model", metavar="NAME", help="a smaller converted model with the same vocabulary that drafts for it"
    )
    ctx_default = f"default {engine.n_ctx}" if ctx_planned is None else f"default: {ctx_planned}"
    p.add_argument("--ctx", type=int, default=engine.n_ctx if ctx_planned is None else None,
                   help=f"context size in tokens ({ctx_default})")
    p.add_argument("--threads", type=int, default=engine.n_threads, help="threads (default: physical cores)")
    p.add_argument("--placement", default=PLACEMENT.mode, choices=PLACEMENT_MODES, help="where tiers run")
    p.add_argument("--max-memory", type=float, metavar="GB", help=MAX_MEMORY_HELP)
    p.add_argument(
        "--rpc", metavar="HOST:PORT[,...]", help="workers (`specquant worker`) that may run the parent's layers"
    )


def add_answer_flags(p: argparse.ArgumentParser, unsaid: str = "") -> None:
    """The flags of an answer: level, speed preset, tiers, draft, length and sampling (ChatOptions).
    `unsaid` qualifies the length's default (serve: " when a request does not say")."""
    p.add_argument("--level", default=CHAT.level, choices=("auto", *LEVELS))
    p.add_argument(
        "--preset", default=CHAT.preset, choices=PRESET_NAMES,
        help="the speed preset: exact: the full model's words; balanced: Q8_0's; fast: Q4_K_M's; paper: the paper's "
        "table; auto (default): the most precise of the three that this computer measured as fast as a plain "
        "Q4_K_M file",
    )
    p.add_argument(
        "--allow-lossy", action="store_true", help="no effect (the default weighs speed first); kept for scripts"
    )
    p.add_argument("--parent", choices=TIERS, help="answer with this tier")
    p.add_argument(
        "--draft",
        choices=DRAFT_CHOICES,
        help="draft with this tier alone, n-gram lookup alone (ngram), or none (default: both, where they pay)",
    )
    p.add_argument("--no-spec", action="store_true", help="no speculation (same as --draft none)")
    p.add_argument("--k", type=int, help="fixed draft length (default: the controller picks k each cycle)")
    p.add_argument(
        "--max-tokens", type=int, default=CHAT.max_tokens,
        help=f"answer length in tokens{unsaid} (default {CHAT.max_tokens})",
    )
    model_says = "default: the model's recommendation, else llama.cpp's"
    d = LLAMA_DEFAULTS
    p.add_argument("--temp", type=float, help=f"temperature; 0 is greedy ({model_says}: {d.temperature:g})")
    p.add_argument("--top-k", type=int, help=f"{model_says} ({d.top_k})")
    p.add_argument("--top-p", type=float, help=f"{model_says} ({d.top_p:g})")
    p.add_argument("--min-p", type=float, help=f"{model_says} ({d.min_p:g})")
    p.add_argument(
        "--seed", type=int, help="random seed of sampled decoding, 0 to 2^64 - 1 (default: a fresh one per answer)"
    )
    p.add_argument(
        "--thinking-budget", type=int, metavar="N",
        help="a thinking model closes its thought after N tokens and answers (default: 3/4 of the answer's room)",
    )
    p.add_argument(
        "--no-thinking", action="store_true",
        help="a thinking model answers without thinking (its template's switch, else its thought closed at once)",
    )


def read_prompt(args: argparse.Namespace) -> str | None:
    """`--prompt TEXT` or `--prompt-file FILE` (- for stdin); None when neither is given."""
    if getattr(args, "prompt", None) is not None:
        return args.prompt
    if getattr(args, "prompt_file", None):
        if args.prompt_file == "-":
            return sys.stdin.read()
        try:
            return Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(
                f"cannot read prompt file {args.prompt_file}: {getattr(e, 'strerror', None) or e}"
            ) from None
    return None


def chat_options(args: argparse.Namespace) -> ChatOptions:
    """The answer flags (add_answer_flags) as ChatOptions."""
    # Flags given override the model's recommended sampling one by one; none given: the model's own.
    given = {"temperature": args.temp, "top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p, "seed": args.seed}
    overrides = tuple((name, value) for name, value in given.items() if value is not None)
    return ChatOptions(
        level=args.level,
        preset=args.preset,
        allow_lossy=args.allow_lossy,
        parent=args.parent,
        draft=args.draft,
        no_spec=args.no_spec,
        k=args.k,
        max_tokens=args.max_tokens,
        sampling_overrides=overrides,
        grammar=_grammar(args),
        enable_thinking=thinking_option(not getattr(args, "no_thinking", False)),
        thinking_budget=getattr(args, "thinking_budget", None),
    )


def _grammar(args: argparse.Namespace) -> Grammar | None:
    """`--json-schema FILE` or `--json-object`: the grammar the answer follows (runtime.decode.grammar)."""
    from runtime.decode.grammar import Grammar, GrammarError

    if getattr(args, "json_object", False):
        return Grammar.json_object()
    path = getattr(args, "json_schema", None)
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read the JSON schema {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return Grammar.from_json_schema(text, strict=True)
    except GrammarError as e:
        raise UserError(f"{path}: {e}") from None


def memory_budget(args: argparse.Namespace) -> int | None:
    """`--max-memory GB` in bytes; None: what is available."""
    if args.max_memory is None:
        return None
    if not args.max_memory > 0:
        raise UserError(f"--max-memory {args.max_memory:g} must be more than 0 GB")
    return int(args.max_memory * 1e9)


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    """The engine flags (add_engine_flags) as EngineSettings; bad values fail here, before any model loads."""
    from runtime.engine.engine import EngineSettings
    from runtime.plan.placement import PlacementSettings

    if args.ctx < 256:
        raise UserError(f"--ctx {args.ctx} is too small (at least 256)")
    from runtime.machine.rpc import parse_endpoints

    placement = PlacementSettings(mode=args.placement, max_memory_bytes=memory_budget(args))
    workers = parse_endpoints(args.rpc)
    if args.placement == "remote" and not workers:
        raise UserError("--placement remote needs a worker: --rpc HOST:PORT (see `specquant worker`)")
    draft_model = check_name(args.draft_model) if getattr(args, "draft_model", None) else None
    return EngineSettings(
        n_ctx=args.ctx, n_threads=args.threads, placement=placement, rpc=workers, draft_model=draft_model
    )


def load_engine(args: argparse.Namespace, isolated: bool = True) -> LoadedEngine:
    """The Engine; with workers (--rpc) in a child process unless not `isolated` (runtime.engine.process)."""
    from runtime.engine.engine import Engine
    from runtime.engine.process import open_engine

    settings = engine_settings(args)
    name = model_name(args.model)
    return open_engine(name, settings) if isolated else Engine(name, settings)


def model_name(name: str | None) -> str:
    """`--model NAME`, else the one the runtime would pick; on a fresh machine the demo, converted first."""
    from converters.convert import ensure_demo
    from runtime.engine.engine import resolve_model

    if name is None:
        ensure_demo()
    return resolve_model(name).name


def setup_logging(verbose: bool) -> None:
    """Warnings and errors as `warning: ...` lines on stderr; -v: everything, llama.cpp's log included."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s" if not verbose else "%(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("llama.cpp").setLevel(logging.DEBUG if verbose else logging.ERROR)
    logging.addLevelName(logging.WARNING, "warning")
    logging.addLevelName(logging.ERROR, "error")


def embedding_model(note: Callable[[str], None] | None = None) -> Embedder | None:
    """The embedding model (all-MiniLM-L6-v2), converted from its package into the model cache when it is first
    needed; None, said in one line on stderr, when the package is not installed: words alone (BM25) still
    index and search (runtime.engine.embedder)."""
    from converters.embedding import ensure_embedding_model, package_zip
    from runtime.engine.embedder import open_embedder

    return open_embedder(None, ensure_embedding_model, package_zip, note or _note_on_stderr)


def _note_on_stderr(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)
