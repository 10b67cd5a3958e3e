"""What Claude Code sends beyond the Messages API's basics, read for a local server (runtime.api.anthropic_request):
its attribution line, left out of the prompt, and `context_management`'s edits, done where they apply here.
"""

from __future__ import annotations

import re
from typing import Any

from runtime.api.responses import ApiError

# Claude Code's first system block: `x-anthropic-billing-header: cc_version=2.1.197.6c5; cc_entrypoint=cli;
# cch=...;`, its version and hash changing per version, session and request.
BILLING = re.compile(r"^x-anthropic-billing-header:.*(?:\n|$)", re.MULTILINE)
DEFAULT_THINKING_TURNS = 1  # clear_thinking's default: the last assistant turn's thoughts are kept


def strip_billing(text: str) -> str:
    """`text` without any `x-anthropic-billing-header:` line."""
    return BILLING.sub("", text) if "x-anthropic-billing-header:" in text else text


def clear_thinking(messages: list[dict[str, Any]], management: dict[str, Any] | None) -> list[dict[str, Any]]:
    """`context_management`'s `clear_thinking_*` edits: the thoughts of all but the last `keep` assistant turns
    that have one are dropped (`keep: "all"` keeps them all). Other edits act on Anthropic's own context
    (clearing old tool results past a trigger): ignored, the chat is read whole."""
    if not management:
        return messages
    edits = management.get("edits", [])
    if not isinstance(edits, list) or not all(isinstance(e, dict) for e in edits):
        raise ApiError(400, "context_management.edits: must be an array of edit objects", "context_management.edits")
    for i, edit in enumerate(edits):
        if not str(edit.get("type", "")).startswith("clear_thinking"):
            continue
        keep = edit.get("keep", {"type": "thinking_turns", "value": DEFAULT_THINKING_TURNS})
        if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
            continue
        value = keep.get("value") if isinstance(keep, dict) else None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            where = f"context_management.edits.{i}.keep"
            raise ApiError(400, f'{where}: must be "all" or {{"type": "thinking_turns", "value": N}}', where)
        thinking = [j for j, m in enumerate(messages) if m.get("reasoning_content")]
        for j in thinking[: max(0, len(thinking) - value)]:
            messages[j] = {k: v for k, v in messages[j].items() if k != "reasoning_content"}
    return messages
