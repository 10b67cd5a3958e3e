"""`specquant chat --mcp`: MCP servers' tools (and the built-in documents search) for the chat, each call
approved on the terminal (`--approve ask`), always (`all`) or never (`none`); docs/tools.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.errors import UserError

if TYPE_CHECKING:
    from runtime.engine.mcp_toolbox import McpToolbox
    from runtime.mcp import CallRequest, Decision

APPROVE_MODES = ("ask", "all", "none")


def add_tool_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mcp",
        nargs="?",
        const="",
        metavar="CONFIG",
        help="let the model call the tools of the MCP servers in CONFIG (default: mcp.json in the config folder)",
    )
    p.add_argument(
        "--approve",
        choices=APPROVE_MODES,
        help="tool calls: ask on the terminal (the default on one), run all, or none (the default without one)",
    )
    p.add_argument("--max-rounds", type=int, default=None, metavar="N", help="answers per turn with tools (default 8)")
    p.add_argument(
        "--tool-choice", choices=("auto", "required"), help="the first answer may call a tool (auto) or must (required)"
    )
    p.add_argument("--tool-timeout", type=float, default=None, metavar="S", help="seconds per tool call (default 60)")


def check_tool_flags(args: argparse.Namespace) -> None:
    """Flags that need --mcp, and their ranges, before anything starts."""
    if args.mcp is None:
        for flag in ("approve", "max_rounds", "tool_timeout", "tool_choice"):
            if getattr(args, flag) is not None:
                raise UserError(f"--{flag.replace('_', '-')} needs --mcp")
        return
    if args.max_rounds is not None and not 1 <= args.max_rounds <= 64:
        raise UserError(f"--max-rounds {args.max_rounds} is out of range: 1 to 64")
    if args.tool_timeout is not None and not 0 < args.tool_timeout <= 3600:
        raise UserError(f"--tool-timeout {args.tool_timeout:g} is out of range: more than 0, at most 3600 s")


def open_toolbox(args: argparse.Namespace) -> McpToolbox | None:
    """The MCP servers of the config (a bad file is one line; bad entries are warnings and the rest start),
    plus the documents search when a collection exists; None without --mcp."""
    if args.mcp is None:
        return None
    from runtime.documents.library import Library
    from runtime.engine.document_tool import DocumentSearch
    from runtime.engine.mcp_toolbox import CALL_TIMEOUT_S, McpToolbox
    from runtime.mcp import ApprovalPolicy, McpHost, load_config

    config = load_config(Path(args.mcp).expanduser() if args.mcp else None)
    for problem in config.problems:
        print(f"specquant: warning: {problem}", file=sys.stderr)
    terminal = sys.stdin.isatty()
    mode = args.approve or ("ask" if terminal else "none")
    policy = ApprovalPolicy(mode, ask_on_terminal if terminal else None)
    builtin = []
    library = Library()
    if library.index.collections():
        builtin.append(DocumentSearch(library))
    host = McpHost(config) if config.enabled else None
    return McpToolbox(host, policy, builtin, args.tool_timeout or CALL_TIMEOUT_S)


def ask_on_terminal(request: CallRequest) -> Decision:
    """Allow once, always, or deny: asked on the terminal. Anything but y or a denies."""
    from runtime.mcp import Decision

    print(f"\nspecquant: {request.server} wants to run {request.tool} with", file=sys.stderr)
    print(request.arguments_text(), file=sys.stderr)
    try:
        answer = input("Allow? [y] once, [a] always for this tool, [n] deny: ").strip().lower()
    except EOFError:
        return Decision.DENY
    return {"y": Decision.ALLOW_ONCE, "yes": Decision.ALLOW_ONCE, "a": Decision.ALWAYS}.get(answer, Decision.DENY)


def event_line(event: Any) -> str | None:
    """What the terminal shows of a tool event (on stderr), or None."""
    from runtime.engine.tool_loop import CallDecided, CallFinished, CallProposed

    if isinstance(event, CallProposed):
        return f"[tool] {event.source} › {event.call.name} {event.call.arguments}"
    if isinstance(event, CallDecided) and not event.allowed:
        return f"[tool] {event.call.name}: not run"
    if isinstance(event, CallFinished):
        r = event.result
        head = r.text.strip().splitlines()[0][:100] if r.text.strip() else ""
        state = "error" if r.is_error else "done"
        return f"[tool] {event.call.name}: {state} in {r.elapsed_s:.2f} s: {head}"
    return None


def calls_json(calls: list[Any], toolbox: McpToolbox) -> list[dict[str, Any]]:
    """`--json`'s calls: server, tool, arguments, approval and result of each."""
    out = []
    for call, allowed, result in calls:
        route = toolbox.host.route(call.name) if toolbox.host is not None else None
        server, tool = route if route else (result.source or "built-in", call.name)
        out.append({
            "server": server, "tool": tool, "arguments": call.arguments,
            "approval": "allowed" if allowed else "refused",
            "result": result.text, "is_error": result.is_error, "elapsed_s": round(result.elapsed_s, 3),
        })
    return out
