"""`specquant chat --mcp`: MCP servers' tools (and the built-in documents search) for the chat, each call
approved on the terminal (`--approve ask`), always (`all`) or never (`none`); docs/tools.md."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.errors import UserError

if TYPE_CHECKING:
    from runtime.chat.toolbox import McpToolbox, ToolSetup
    from runtime.mcp import ApprovalAnswer, CallRequest, SkippedTool

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


def tool_setup(args: argparse.Namespace) -> ToolSetup | None:
    """The conversation's tools (None without --mcp): the MCP servers of the config (a bad file is one line; bad
    entries are warnings and the rest start, now, so a tool that cannot be offered is a warning before the
    chat), approvals asked on the terminal. Which tools a turn offers, the documents search among them, is the
    conversation's to say (runtime.chat.conversation)."""
    if args.mcp is None:
        return None
    from runtime.chat.toolbox import CALL_TIMEOUT_S, ToolSetup
    from runtime.engine.tool_loop import DEFAULT_ROUNDS
    from runtime.mcp import McpHost, load_config
    from runtime.mcp.switches import ToolSwitches

    config = load_config(Path(args.mcp).expanduser() if args.mcp else None)
    for problem in config.problems:
        print(f"specquant: warning: {problem}", file=sys.stderr)
    terminal = sys.stdin.isatty()
    host = McpHost(config) if config.enabled else None
    if host is not None:
        host.start()
        print_skipped(host.skipped())
    return ToolSetup(
        host, args.approve or ("ask" if terminal else "none"), ask_on_terminal if terminal else None,
        ToolSwitches(), args.tool_choice or "auto", args.max_rounds or DEFAULT_ROUNDS,
        args.tool_timeout or CALL_TIMEOUT_S, owns_host=True,
    )


def ask_on_terminal(request: CallRequest) -> ApprovalAnswer:
    """Allow once, always, or deny: asked on the terminal. Anything but y or a denies. The names and arguments
    come from a server and the model: their control characters are shown as escapes, so an escape sequence
    cannot redraw the prompt or disguise which tool asks."""
    from runtime.mcp import ApprovalAnswer
    from runtime.terminal_text import visible, visible_lines

    print(f"\nspecquant: {visible(request.server)} wants to run {visible(request.tool)} with", file=sys.stderr)
    print(visible_lines(request.arguments_text()), file=sys.stderr)
    try:
        answer = input("Allow? [y] once, [a] always for this tool, [n] deny: ").strip().lower()
    except EOFError:
        return ApprovalAnswer.DENY
    once, always = ApprovalAnswer.ALLOW_ONCE, ApprovalAnswer.ALWAYS
    return {"y": once, "yes": once, "a": always}.get(answer, ApprovalAnswer.DENY)


def event_line(event: Any) -> str | None:
    """What the terminal shows of a tool event (on stderr), or None: one line, its control characters (from a
    tool's result, a server's name, the model's arguments) shown as escapes."""
    from runtime.engine.tool_loop import CallDecided, CallFinished, CallProposed
    from runtime.terminal_text import visible

    line = None
    if isinstance(event, CallProposed):
        line = f"[tool] {event.source} › {event.call.name} {event.call.arguments}"
    elif isinstance(event, CallDecided) and not event.allowed:
        line = f"[tool] {event.call.name}: not run"
    elif isinstance(event, CallFinished):
        r = event.result
        head = r.text.strip().splitlines()[0][:100] if r.text.strip() else ""
        state = "error" if r.is_error else "done"
        line = f"[tool] {event.call.name}: {state} in {r.elapsed_s:.2f} s: {head}"
    return None if line is None else visible(line)


def print_skipped(skipped: Iterable[SkippedTool]) -> None:
    """One warning line on stderr per server whose tools are not all offered to the model: how many, the
    first few with why (runtime.mcp.listing.skipped_lines)."""
    from runtime.mcp.listing import skipped_lines
    from runtime.terminal_text import visible

    for line in skipped_lines(skipped):
        print(f"specquant: warning: {visible(line)}", file=sys.stderr)


def calls_json(calls: list[Any], toolbox: McpToolbox) -> list[dict[str, Any]]:
    """`--json`'s calls: server, tool, arguments, approval and result of each."""
    out = []
    for call, allowed, result in calls:
        site = toolbox.where(call.name)
        out.append({
            "server": site.server, "tool": site.tool, "arguments": call.arguments,
            "approval": "allowed" if allowed else "refused",
            "result": result.text, "is_error": result.is_error, "elapsed_s": round(result.elapsed_s, 3),
        })
    return out
