"""Whether a tool call may run: the user's mode and remembered choices, apart from any window or prompt.

Modes: `ask` puts each call to the front end's `ask` callback (the CLI's prompt, the window's dialog) unless
the user chose Always allow for that server's tool before; `all` runs every call; `none` runs none. The user
answers Allow once, Always allow (remembered per server and tool in `mcp-approvals.json` in the config folder,
written atomically, revocable) or Deny; a call that does not run is answered, to the model, with the text of
its Verdict (`DENIED`: "The user denied this call.").

A tool's result is untrusted text, and by construction it cannot change an approval or a setting: the policy
reads only its mode, the user's answers and its own file, and takes a call's request, never a result. The only
writes are `Approvals.allow`, reached through an answer of the user's, and `revoke`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from runtime.errors import UserError
from runtime.mcp.tool_table import ToolTable
from runtime.paths import config_dir

log = logging.getLogger(__name__)

Mode = Literal["ask", "all", "none"]
MODES: tuple[Mode, ...] = ("ask", "all", "none")
DENIED = "The user denied this call."
TURNED_OFF = "Tool calls are turned off in the settings, so this call did not run."
FILE_NAME = "mcp-approvals.json"


class ApprovalAnswer(str, Enum):
    """The user's answer to one call."""

    ALLOW_ONCE = "allow_once"
    ALWAYS = "always"
    DENY = "deny"


@dataclass(frozen=True)
class CallRequest:
    """A call to approve: the server, its tool, the arguments the model gave, the name the model used, and the
    tool's description as its server gave it (shown to the person asked, #63)."""

    server: str
    tool: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    name: str = ""
    description: str = ""

    def arguments_text(self) -> str:
        """The arguments for a dialog or a prompt, indented JSON where they parse."""
        value: Any = self.arguments
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return value
        return json.dumps(value, indent=2, ensure_ascii=False)


@dataclass(frozen=True)
class Verdict:
    """Whether the call runs; if not, `message` is the tool message the model reads instead."""

    allowed: bool
    message: str | None = None
    answer: ApprovalAnswer | None = None  # the user's answer; None where nobody was asked
    remembered: bool = False  # allowed by an earlier Always allow


Ask = Callable[[CallRequest], ApprovalAnswer]


class Approvals:
    """The Always allow choices, per server and tool, in one small JSON file (read afresh each time, so a
    choice revoked in the window holds for the CLI too)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config_dir() / FILE_NAME
        self._table = ToolTable(self.path, "always_allow", "tool approvals", "no tool is always allowed")

    def allowed(self) -> dict[str, frozenset[str]]:
        """Each server's always-allowed tools. A file that cannot be read allows nothing (and is logged)."""
        return self._table.read()

    def is_allowed(self, server: str, tool: str) -> bool:
        return tool in self.allowed().get(server, frozenset())

    def allow(self, server: str, tool: str) -> None:
        """Remember Always allow for one server's tool."""
        self._table.update(lambda table: table.setdefault(server, set()).add(tool))

    def revoke(self, server: str, tool: str | None = None) -> int:
        """Forget Always allow for one tool, or every tool of `server`; how many were forgotten."""

        def change(table: dict[str, set[str]]) -> int:
            had = table.get(server, set())
            gone = set(had) if tool is None else had & {tool}
            table[server] = had - gone
            return len(gone)

        return self._table.update(change)


class ApprovalPolicy:
    """Checks each call against the mode, the remembered choices and, in `ask` mode, the user."""

    def __init__(self, mode: Mode = "ask", ask: Ask | None = None, approvals: Approvals | None = None) -> None:
        if mode not in MODES:
            raise UserError(f"unknown tool approval mode {mode!r}: use one of {', '.join(MODES)}")
        self.mode = mode
        self.ask = ask
        self.approvals = approvals or Approvals()

    def check(self, request: CallRequest) -> Verdict:
        """May this call run? Asks the user where the mode says so; remembers an Always allow."""
        if self.mode == "all":
            return Verdict(True)
        if self.mode == "none":
            return Verdict(False, TURNED_OFF)
        if self.approvals.is_allowed(request.server, request.tool):
            return Verdict(True, remembered=True)
        if self.ask is None:  # no one to ask: a call nobody approved does not run
            return Verdict(False, DENIED)
        try:
            answer = ApprovalAnswer(self.ask(request))
        except Exception:  # a broken dialog must fail closed, not open
            log.exception("asking about %s/%s failed", request.server, request.tool)
            return Verdict(False, DENIED)
        if answer is ApprovalAnswer.DENY:
            return Verdict(False, DENIED, answer)
        if answer is ApprovalAnswer.ALWAYS:
            with contextlib.suppress(UserError):  # not remembered, but allowed this once as answered
                self.approvals.allow(request.server, request.tool)
        return Verdict(True, None, answer)
