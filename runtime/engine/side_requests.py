"""Short side requests go first: where a job waits in the engine thread's queue (runtime.engine.thread).

Coding agents send small requests beside their main ones: OpenCode asks for a conversation's title before its
answer to the user's question, Claude Code for a topic or a one-token check. Queued behind a long answer such
a request waits minutes for a few tokens' work (issue #60). A *side* job (at most SIDE_MAX_TOKENS to write,
a prompt of at most SIDE_PROMPT_CHARS characters, no tools nor documents, whose schemas and passages make a
prompt long) is therefore queued ahead of the waiting long jobs: the running answer is never interrupted, and
side jobs keep their order among themselves. Fairness: a long job lets at most MAX_JUMPS side jobs pass it,
so a stream of them cannot starve it; queued control items (an unload) are never passed.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

from runtime.engine.reader import Job

SIDE_MAX_TOKENS = 64  # a title (OpenCode wants one line of at most 50 characters), a topic, a yes or no
SIDE_PROMPT_CHARS = 8_000  # about 2,000 tokens: read in seconds where a long answer takes minutes
MAX_JUMPS = 4  # side jobs that may pass one long job: its wait grows by at most this many short answers


def is_side(job: Job) -> bool:
    """Whether `job` is a short side request: little to write from a short prompt."""
    options = job.options
    offered = options.tools is not None and bool(options.tools.tools)  # earlier calls alone add no schemas
    if options.max_tokens > SIDE_MAX_TOKENS or offered or options.documents is not None:
        return False
    return _chars(job.messages) <= SIDE_PROMPT_CHARS


def _chars(messages: list[dict[str, Any]]) -> int:
    """The characters of a chat's contents (text parts as well as plain strings), a bound on its tokens' work."""
    total = 0
    for m in messages:
        content = m.get("content")
        total += len(content) if isinstance(content, str) else len(str(content or ""))
        total += len(str(m.get("tool_calls") or "")) + len(str(m.get("reasoning_content") or ""))
    return total


class JumpCounts:
    """How many side jobs have passed each waiting job (forgotten with the job)."""

    def __init__(self) -> None:
        self._passed: weakref.WeakKeyDictionary[Job, int] = weakref.WeakKeyDictionary()

    def enqueue(self, pending: collections.deque[Any], job: Job) -> int:
        """Put `job` in `pending` (the engine thread's queue, its lock held): a side job before the long jobs
        at the queue's end that may still be passed, any other at the end. Returns the jobs it passed."""
        at = len(pending)
        if is_side(job):
            while at > 0:
                ahead = pending[at - 1]
                if not isinstance(ahead, Job) or is_side(ahead) or self._passed.get(ahead, 0) >= MAX_JUMPS:
                    break
                at -= 1
        for passed in list(pending)[at:]:
            self._passed[passed] = self._passed.get(passed, 0) + 1
        pending.insert(at, job)
        return len(pending) - 1 - at
