"""A conversation as a file: Markdown to read or share, JSON to keep or move to another machine and import
again. No Qt here: the window's menu calls these, and the tests call them directly.

The JSON keeps everything the window stores with a message (its answer facts: level, pair, speed, citations)
and names its own format, so a file from elsewhere is refused with one line rather than half imported:

    {"format": "specquant-conversation", "version": 1, "title": "...", "documents": null,
     "exported": "2026-12-05T18:00:00+00:00", "messages": [{"role": "user", "content": "...", "meta": {}}]}
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.plain_words import ENDINGS
from app.stored_messages import tool_rounds
from runtime.errors import UserError

FORMAT = "specquant-conversation"
VERSION = 1
ROLES = ("system", "user", "assistant", "tool")
MAX_IMPORT_BYTES = 64 * 2**20  # a conversation is text: a file this large is not one
MAX_TITLE = 200


@dataclass(frozen=True)
class ExportedMessage:
    role: str
    content: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportedConversation:
    title: str
    messages: tuple[ExportedMessage, ...]
    documents: str | None = None  # the collection the chat answered from, if any


def to_json(conv: ExportedConversation) -> str:
    data = {
        "format": FORMAT,
        "version": VERSION,
        "title": conv.title,
        "documents": conv.documents,
        "exported": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "messages": [{"role": m.role, "content": m.content, "meta": m.meta} for m in conv.messages],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def to_markdown(conv: ExportedConversation) -> str:
    """The chat as Markdown: a heading per turn, an answer's tool calls listed before its words, its model and
    speed in a quote, its sources listed."""
    out = [f"# {conv.title}", ""]
    if conv.documents is not None:
        out += [f"*Answers from documents: {conv.documents or 'all collections'}*", ""]
    for m in conv.messages:
        out += [f"## {m.role.capitalize()}", ""]
        for r in tool_rounds(m.meta) if m.role == "assistant" else []:
            out += [r["content"].rstrip(), ""] if r["content"].strip() else []
            out += [_call_line(c) for c in r["calls"]] + [""]
        out += [m.content.rstrip(), ""]
        facts = m.meta  # an answer's stored facts (runtime.engine.summary.answer_facts)
        pair, speed = facts.get("pair"), facts.get("tok_per_s")
        ending = ENDINGS.get(str(facts.get("stop_reason") or "")) if m.role == "assistant" else None
        if m.role == "assistant" and pair:
            line = f"> {pair}" + (f" · {speed:.1f} tok/s" if isinstance(speed, (int, float)) else "")
            out += [line + (f" · {ending}" if ending else ""), ""]  # a stopped answer says so (#63)
        elif ending:
            out += [f"> {ending}", ""]
        cited = facts.get("citations") if m.role == "assistant" else None
        if isinstance(cited, list) and cited:
            out += ["Sources:", ""]
            out += [f"{c.get('n', i)}. {c.get('path', '?')}" for i, c in enumerate(cited, 1) if isinstance(c, dict)]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _call_line(call: dict[str, Any]) -> str:
    """One tool call as a list item: where it ran, what it was asked, its outcome and its result's first line."""
    result = (call.get("result") or "").strip().splitlines()
    head = result[0][:200] if result else ""
    arguments = " ".join(str(call.get("arguments") or "").split())
    return f"- Tool call: {call.get('server')} › {call.get('tool')} `{arguments}` — {call.get('outcome')}: {head}"


def from_json(text: str, where: str) -> ExportedConversation:
    """Parse an exported conversation; UserError (one line naming `where`) for anything else."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UserError(f"{where}: not a JSON file ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{where}: not a SpecQuant conversation (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise UserError(f"{where}: conversation format version {data.get('version')!r}; this SpecQuant reads {VERSION}")
    title = data.get("title")
    if not isinstance(title, str) or not title.strip():
        raise UserError(f"{where}: the conversation has no title")
    documents = data.get("documents")
    if documents is not None and not isinstance(documents, str):
        raise UserError(f"{where}: \"documents\" must be a collection's name or null")
    raw = data.get("messages")
    if not isinstance(raw, list):
        raise UserError(f"{where}: \"messages\" must be a list")
    messages = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise UserError(f"{where}: messages[{i}] needs a role ({', '.join(ROLES)}) and text content")
        meta = m.get("meta") or {}
        if not isinstance(meta, dict):
            raise UserError(f"{where}: messages[{i}].meta must be an object")
        messages.append(ExportedMessage(m["role"], m["content"], meta))
    return ExportedConversation(title.strip()[:MAX_TITLE], tuple(messages), documents)


def read_file(path: Path) -> ExportedConversation:
    try:
        if path.stat().st_size > MAX_IMPORT_BYTES:
            raise UserError(f"{path}: {path.stat().st_size / 2**20:.0f} MB is too large for a conversation")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    return from_json(text, str(path))


def write_file(path: Path, conv: ExportedConversation) -> None:
    """Markdown for a .md path, else JSON; written whole or not at all (runtime.atomic)."""
    from runtime.atomic import write_text_atomic

    text = to_markdown(conv) if path.suffix.lower() in (".md", ".markdown") else to_json(conv)
    try:
        write_text_atomic(path, text)
    except OSError as e:
        raise UserError(f"{path}: cannot write it ({e.strerror or e})") from None


def exported(title: str, messages: Sequence[Any], documents: str | None = None) -> ExportedConversation:
    """From the store's messages (anything with role, content and meta)."""
    return ExportedConversation(
        title, tuple(ExportedMessage(m.role, m.content, dict(m.meta)) for m in messages), documents
    )
