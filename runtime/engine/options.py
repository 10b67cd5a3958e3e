"""What a request asks for: `ChatOptions` per answer and `EngineSettings` per loaded model. Plain data: the
CLI flags, the window's settings, the API's requests and the benchmark all build these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from runtime.decode.sampling import LLAMA_DEFAULTS, SamplingParams
from runtime.decode.speculative import SpecConfig
from runtime.errors import UserError
from runtime.plan import router
from runtime.plan.placement import PlacementSettings
from runtime.plan.policy import DEFAULT_PRESET, PRESET_NAMES
from runtime.plan.router import RouterSettings

if TYPE_CHECKING:
    from runtime.decode.grammar import Grammar
    from runtime.documents.grounding import Grounding
    from runtime.engine.tools import ToolRequest

# {"role", "content"}; with tools also an assistant's "tool_calls" and a tool result's "tool_call_id".
Message = dict[str, Any]


@dataclass(frozen=True)
class ChatOptions:
    """One request's choices; the CLI flags, the app's settings and the benchmark all build this."""

    level: str = "auto"  # auto | low | medium | high
    # The default: the most precise preset as fast as plain Q4_K_M here (runtime.plan.policy.frontier_pick)
    preset: str = DEFAULT_PRESET
    allow_lossy: bool = False  # the old auto preset's floors; no effect since the default weighs speed first
    parent: str | None = None
    draft: str | None = None  # a tier, "none", or None for the preset's
    no_spec: bool = False
    k: int | None = None  # fixed draft length; None: the controller picks k each cycle
    max_tokens: int = 512
    # None: the model's own recommendation (its GGUF's general.sampling.* keys, else llama.cpp's defaults),
    # with `sampling_overrides` (field name, value) applied on top; SamplingParams() is greedy.
    sampling: SamplingParams | None = None
    sampling_overrides: tuple[tuple[str, float], ...] = ()
    stop: tuple[str, ...] = ()
    draft_window: int | None = None  # the draft's catch-up window (SpecConfig.draft_window); None: the setting
    # The answer follows this grammar (a JSON schema, any JSON object): runtime.decode.grammar.
    grammar: Grammar | None = None
    tools: ToolRequest | None = None  # tools the model may call (runtime.engine.tools); the grammar is theirs
    logprobs: int | None = None  # each token's log-probability and this many alternatives (None: not asked)
    raw_prompt: bool = False  # the last message's content is the prompt as it is, without the chat template
    # A chat too long for the context loses its oldest turns (the window and the CLI keep their own chats
    # going); False: it is refused (ContextTooLong), as the API does unless a request asks (OpenAI's 400).
    trim: bool = True
    # Whose KV cache this answer may reuse: a prompt prefix is kept only from an answer with the same key, so
    # how fast an answer starts never tells one party (the window, an API client) what another one asked.
    cache_key: str = ""
    # Answer from the user's documents (runtime.documents.grounding): the best passages go into the prompt,
    # numbered, and the last Chunk carries them as citations.
    documents: Grounding | None = None
    # A thinking model's thought (runtime.engine.thinking): the template's `enable_thinking`, as named there
    # (None: not sent, the template's default; False: off, and a template that cannot switch it gets its
    # thought closed at once), and the budget in tokens after which the thought is closed (None: 3/4 of what
    # the answer may use). A front end's thinking *switch* (the window's, a chat's, --no-thinking) becomes
    # this field through `thinking_option` only; True is an API client's explicit enable_thinking.
    enable_thinking: bool | None = None
    thinking_budget: int | None = None

    def __post_init__(self) -> None:
        if self.level not in ("auto", *router.LEVELS):
            raise UserError(f"unknown level {self.level!r}: choose auto, low, medium or high")
        if self.preset not in PRESET_NAMES:
            raise UserError(f"unknown preset {self.preset!r}: choose from {', '.join(PRESET_NAMES)}")
        if self.max_tokens < 1:
            raise UserError(f"max tokens {self.max_tokens} must be at least 1")
        if self.thinking_budget is not None and self.thinking_budget < 0:
            raise UserError(f"thinking budget {self.thinking_budget} must be 0 (no thinking) or more tokens")
        if self.draft_window is not None and self.draft_window < 0:
            raise UserError(f"draft window {self.draft_window} must be 0 (off) or more tokens")
        replace(self.sampling or LLAMA_DEFAULTS, **dict(self.sampling_overrides))  # bad values fail here


def thinking_option(on: bool) -> bool | None:
    """A front end's thinking switch as `ChatOptions.enable_thinking`: on leaves the template's default, which thinks
    (None, so the prompt is rendered as the template renders it unasked); off is False."""
    return None if on else False


@dataclass(frozen=True)
class EngineSettings:
    """One loaded model's settings: fixed while it stays loaded (a change loads it again)."""

    n_ctx: int = 4096
    n_threads: int = 0  # 0: physical cores
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    router: RouterSettings = field(default_factory=RouterSettings)
    spec: SpecConfig = field(default_factory=SpecConfig)
    rpc: tuple[str, ...] = ()  # workers' HOST:PORT (runtime.machine.rpc): their devices may run the parent's layers
    # RAM for earlier prompts' KV states (runtime.engine.prompt_cache); None: min(1 GiB, 10% of available), 0: off
    prompt_cache_bytes: int | None = None
    # Tokens of earlier prompts and answers that suffix lookup drafts from (runtime.decode.suffix_index); 0: off
    said_tokens: int = 200_000
    # Disk for long stable prefixes' KV states (runtime.engine.prompt_store); None: min(4 GiB, 10% free), 0: off
    prompt_store_bytes: int | None = None
    # Another converted model with the same vocabulary that drafts for this one (`--draft-model`, its cheapest
    # tier: runtime/decode/drafts/model.py); None: none. Checked token for token when the model loads.
    draft_model: str | None = None
