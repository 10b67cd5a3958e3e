"""OpenAI's (legacy) text completions, `POST /v1/completions`: a prompt continued as it is (no chat
template), for clients that still use it (Continue's legacy mode, older scripts). Same engine, loop and
options as a chat; the prompt is one string; `echo`, `suffix`, `best_of` and `n` only at the values that mean
"not used". Its request is read here and its answers shaped here, with the pieces both endpoints share.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from runtime.api.fields import (
    build_options,
    check_fields,
    integer,
    sampling_changes,
    stream_flags,
    typed,
    valid_unicode,
)
from runtime.api.requests import NOT_USED, ChatCall
from runtime.api.responses import ApiError, api_facts, chat_usage, finish_reason
from runtime.engine.answer import Chunk, TokenChoice
from runtime.engine.options import ChatOptions

HONOURED = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "user",
    "logprobs", "top_k", "min_p", "specquant",
}  # fmt: skip
TEXT_NOT_USED: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "best_of": (1,),
    "echo": (False,),
    "suffix": ("",),
    **{k: NOT_USED[k] for k in ("presence_penalty", "frequency_penalty", "logit_bias")},
}
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this endpoint
MAX_LOGPROBS = 5  # OpenAI's limit for this endpoint


def parse_completion(body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
    """Check a completions request and build it as a one-message call whose content is the raw prompt."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    given = {k: v for k, v in body.items() if v is not None}
    check_fields(given, HONOURED, TEXT_NOT_USED)
    model = typed(given, "model", str)
    prompt = given.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(400, "prompt must be a non-empty string (one prompt per request)", "prompt")
    max_tokens = integer(given, "max_tokens", 1, n_ctx) or DEFAULT_MAX_TOKENS
    stream, include_usage = stream_flags(given)
    changes = sampling_changes(given, base, max_tokens) | {"raw_prompt": True}
    top = integer(given, "logprobs", 0, MAX_LOGPROBS)
    if top is not None:
        changes["logprobs"] = top
    messages = [{"role": "user", "content": valid_unicode(prompt, "prompt")}]
    return ChatCall(model, messages, build_options(base, changes), stream, include_usage)


def text_logprobs(choices: Sequence[TokenChoice], offset: int) -> dict[str, Any]:
    """This endpoint's shape: parallel lists of tokens, their logprobs, {token: logprob} alternatives and each
    token's character offset (counted from the prompt's start, as OpenAI does)."""
    offsets = []
    for c in choices:
        offsets.append(offset)
        offset += len(c.text)
    return {
        "tokens": [c.text for c in choices],
        "token_logprobs": [c.logprob for c in choices],
        "top_logprobs": [{t: x for t, _, x in c.top} for c in choices],
        "text_offset": offsets,
    }


def text_completion(
    call_id: str,
    model: str,
    created: int | None,
    text: str,
    last: Chunk | None = None,
    logprobs: dict[str, Any] | None = None,
    streamed: bool = False,
) -> dict[str, Any]:
    """A whole `text_completion`, or one streamed piece of it (the one with `last` ends the stream and carries
    our facts; a stream's usage comes only in the extra chunk `include_usage` asks for)."""
    out: dict[str, Any] = {
        "id": call_id,
        "object": "text_completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "text": text,
                "index": 0,
                "logprobs": logprobs,
                "finish_reason": None if last is None else finish_reason(last),
            }
        ],
    }
    if last is not None:
        if not streamed:
            out["usage"] = chat_usage(last)
        out["specquant"] = api_facts(last)
    return out
