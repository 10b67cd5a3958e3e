"""A conversation: everything a turn needs, owned in one place (#62). Each front end makes one from its own
inputs and asks it for the next turn; none opens a documents library, a toolbox or a persona itself.

    CLI flags ─┐
    window's chat (its Store records, Settings, Tools tab) ─┼─→ Conversation ─ turn() → TurnSpec → run_turn
    API request (each dialect's parse) ─┘

It holds the messages said so far, its documents (`DocumentChoice`: which collection, and the one policy for
offering `search_documents`), its speed preset (runtime.plan.policy) and its persona (system prompt and sampling,
runtime.engine.personas), its thinking switch and budget, and its tools (`ToolSetup`: host, approvals,
the one switch store). `turn()` opens the turn's toolbox on the caller's thread (the documents index is used by
one thread at a time) and closes it when the turn is over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from runtime.chat.documents import DocumentChoice, SearchOffer, last_question
from runtime.chat.turn import TurnSpec, assemble
from runtime.engine.options import ChatOptions, Message, thinking_option
from runtime.engine.personas import Persona
from runtime.engine.tool_loop import DEFAULT_ROUNDS
from runtime.errors import UserError

if TYPE_CHECKING:  # the MCP SDK loads only when a conversation has tools
    from runtime.chat.toolbox import McpToolbox, ToolSetup
    from runtime.mcp import ApprovalAnswer, CallRequest


@dataclass
class Conversation:
    """One chat as its next turn sees it.

    `options`: the front end's own answer options (sampling, format, length, a pinned tier); what the fields
    below say wins over them. `speed`: the speed preset (None: the options'). `persona`: the name of a
    persona among `personas` (None: the shipped ones and presets.json). `own_sampling`: the sampling fields the
    user set in `options.sampling`, which win over a persona's. `thinking`: whether a thinking model thinks
    (None: as the options say); `thinking_budget`: its tokens (None: the options'). `tools`: None, no tools."""

    messages: list[Message] = field(default_factory=list)
    options: ChatOptions = field(default_factory=ChatOptions)
    documents: DocumentChoice = field(default_factory=DocumentChoice)
    speed: str | None = None
    persona: str | None = None
    personas: Sequence[Persona] | None = None
    own_sampling: tuple[str, ...] = ()
    thinking: bool | None = None
    thinking_budget: int | None = None
    tools: ToolSetup | None = None

    @classmethod
    def of_request(cls, messages: Sequence[Message], options: ChatOptions) -> Conversation:
        """An API request's conversation: its messages and the options its dialect parsed, whose documents
        (`specquant.documents`) become the conversation's; no persona, and no tools of the server's (a client
        runs its own, which stay in the options)."""
        return cls(list(messages), replace(options, documents=None), DocumentChoice.of(options.documents))

    # --- what the next turn is ---------------------------------------------------------------------------
    def question(self) -> str:
        return last_question(self.messages)

    def applied_persona(self) -> Persona | None:
        """The persona as this conversation applies it (the user's own sampling over its own); None without one,
        or when the one chosen is gone (`missing_persona` says so)."""
        found = self._find_persona()
        if found is None:
            return None
        if self.own_sampling:
            return replace(found, sampling=tuple(p for p in found.sampling if p[0] not in self.own_sampling))
        return found

    def missing_persona(self) -> str:
        """The name of a chosen persona that does not exist ("" when it does, or none was chosen)."""
        return self.persona if self.persona is not None and self._find_persona() is None else ""

    def check(self) -> None:
        """UserError for a choice that names nothing (a persona that does not exist), before any model loads."""
        if self.missing_persona():
            names = ", ".join(p.name for p in self._personas())
            raise UserError(f"no persona {self.persona!r}: choose from {names}")

    def turn_options(self) -> ChatOptions:
        """The options of the next turn: the front end's, with this conversation's documents, speed preset and
        thinking."""
        changes: dict[str, object] = {"documents": self.documents.grounding()}
        if self.speed is not None:
            changes["preset"] = self.speed
        if self.thinking is not None:
            changes["enable_thinking"] = thinking_option(self.thinking)
        if self.thinking_budget is not None:
            changes["thinking_budget"] = self.thinking_budget
        return replace(self.options, **changes)

    def search(self) -> SearchOffer | None:
        """Whether the next turn offers `search_documents`, and over what: the documents policy, in a
        conversation with tools only (runtime.chat.documents)."""
        return self.documents.search(self.question()) if self.tools is not None else None

    def next_turn(self, toolbox: McpToolbox | None = None) -> TurnSpec:
        """The next turn, with `toolbox` (opened by `open_toolbox`; None: no tools this turn)."""
        tools = self.tools
        return TurnSpec(
            list(self.messages), self.turn_options(), self.applied_persona(), toolbox,
            tools.max_rounds if tools is not None else DEFAULT_ROUNDS,
            tools.first_choice if tools is not None else "auto",
        )

    def open_toolbox(self, ask: Callable[[CallRequest], ApprovalAnswer] | None = None) -> McpToolbox | None:
        """The next turn's toolbox (None without tools), `search_documents` in it as the policy says; `ask`
        puts an approval to the user (None: the tools' own)."""
        if self.tools is None:
            return None
        from runtime.chat.toolbox import open_toolbox

        return open_toolbox(self.tools, self.search(), ask)

    @contextmanager
    def turn(self, ask: Callable[[CallRequest], ApprovalAnswer] | None = None) -> Iterator[TurnSpec]:
        """The next turn, its toolbox open while it runs and closed after."""
        box = self.open_toolbox(ask)
        try:
            yield self.next_turn(box)
        finally:
            if box is not None:
                box.close()

    # --- after a turn ------------------------------------------------------------------------------------
    def record(self, said: Sequence[Message]) -> None:
        """The conversation after a turn: `said` is LoopFinished.messages (what was said, calls and results in
        it; the persona's system prompt is not)."""
        self.messages[:] = [dict(m) for m in said]

    def close(self) -> None:
        """Stop the MCP servers when the conversation owns them (the CLI's; the window's outlive its chats)."""
        if self.tools is not None and self.tools.owns_host and self.tools.host is not None:
            self.tools.host.close()

    # --- helpers -----------------------------------------------------------------------------------------
    def _personas(self) -> Sequence[Persona]:
        if self.personas is None:
            from runtime.engine.personas import load_personas

            self.personas = load_personas()
        return self.personas

    def _find_persona(self) -> Persona | None:
        if self.persona is None:
            return None
        name = self.persona.strip().casefold()
        return next((p for p in self._personas() if p.name.casefold() == name), None)


def request_turn(messages: Sequence[Message], options: ChatOptions) -> tuple[list[Message], ChatOptions]:
    """An API request's one round as the engine reads it: the chat and options its conversation's turn assembles
    (runtime.chat.turn.assemble)."""
    return assemble(Conversation.of_request(messages, options).next_turn())
