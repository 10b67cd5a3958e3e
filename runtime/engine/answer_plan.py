"""One answer, decided and set up before its first decode (`prepare`): the decision (level, parent and draft,
placement), the loaded pair, the prompt, the grammar and tool-call parser, the speculation settings, the
sampling and the controller. `runtime.engine.generate.run` then runs it."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from runtime.decode.controller import Controller
from runtime.decode.grammar import Grammar, markup_token
from runtime.decode.llama_backend import LlamaBackend
from runtime.decode.sampling import SamplingParams, recommended
from runtime.decode.speculative import SpecConfig
from runtime.decode.suffix_index import SuffixIndex
from runtime.documents.grounding import WHOLE_CHARS_PER_TOKEN, Citation, grounded_messages, retrieve
from runtime.documents.library import Library
from runtime.engine import prompt as prompts
from runtime.engine import thinking, tools
from runtime.engine.call_check import call_problem, name_problem
from runtime.engine.decision import Decision
from runtime.engine.measurements import Measurements
from runtime.engine.options import ChatOptions, EngineSettings, Message
from runtime.engine.plain_estimate import PlainEstimate
from runtime.engine.prompt_store import stable_prefix
from runtime.errors import UserError
from runtime.plan.placement import Plan
from runtime.plan.policy import Choice
from runtime.plan.router import Route

# The router's level as a prior on the answer's length before the answer itself says more: a draft's
# catch-up must be repaid within the rest of the answer.
EXPECTED_ANSWER_TOKENS = {"low": 16, "medium": 48, "high": 96}
SHORT_ANSWER_TOKENS = 8  # "Answer with the letter": the letter, maybe a few words and the end token
# What a prompt asks for says more about its answer's length than its level does: code, stories and
# explanations run long whatever their level.
LONG_ANSWER_INTENTS = frozenset(
    ["to write", "to explain", "to describe", "to summarise", "to design", "to propose", "to compare", "to analyse",
     "to evaluate"]
)


def expected_answer_tokens(route: Route) -> int:
    """The horizon prior of the controller, before the answer itself says more."""
    if route.short_answer:
        return SHORT_ANSWER_TOKENS
    if route.intent in LONG_ANSWER_INTENTS:
        return EXPECTED_ANSWER_TOKENS["high"]
    return EXPECTED_ANSWER_TOKENS[route.level]


class ModelState(Protocol):
    """What an answer needs of its model's state (runtime.engine.engine.Engine)."""

    settings: EngineSettings
    manifest: dict[str, Any]
    measurements: Measurements
    said: SuffixIndex | None  # earlier prompts and answers, for suffix lookup (None: off)

    def decide(self, text: str, options: ChatOptions) -> Decision: ...

    def pair(self, choice: Choice, placement: Plan) -> tuple[LlamaBackend, LlamaBackend | None]: ...

    def draft_model(self, placement: Plan) -> tuple[str, LlamaBackend] | None: ...

    def render(
        self, parent: LlamaBackend, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None,
        think: bool | None = None,
    ) -> list[int]: ...

    def tool_grammar(
        self, parent: LlamaBackend, request: tools.ToolRequest, syntax: tools.CallSyntax
    ) -> Grammar | None: ...

    def reuse_prompt(
        self, tier: str, parent: LlamaBackend, prompt: Sequence[int], cache_key: str, stable: int = 0
    ) -> int: ...

    def library(self, index: str | None) -> Library: ...


@dataclass
class AnswerPlan:
    """Everything one answer runs with; made by `prepare`, run by `runtime.engine.generate.run`."""

    model: ModelState  # the model's state: its estimates learn from the answer, and are saved after it
    options: ChatOptions
    decision: Decision
    parent: LlamaBackend
    draft: LlamaBackend | None
    prompt: list[int]
    dropped: int  # oldest turns dropped to fit the context
    reused: int  # prompt tokens whose KV cache is kept from the previous answer
    grammar: Grammar | None
    calls: tools.CallParser | None  # with tools: the call text goes out as calls
    spec: SpecConfig
    sampling: SamplingParams
    controller: Controller
    plain: PlainEstimate  # what plain decoding would cost: the honest speed-up
    draft_bytes_ratio: float  # the draft tier's size over the parent's (for why nothing was drafted)
    citations: tuple[Citation, ...] = ()  # a grounded answer's sources, numbered as in its prompt
    said: SuffixIndex | None = None  # the pool suffix lookup reads and writes (None: off)
    thought: thinking.ThoughtPlan | None = None  # a thinking model's: its thought is split from the answer
    sibling: tuple[str, LlamaBackend] | None = None  # the draft model (`--draft-model`): source name, backend


def prepare(
    model: ModelState, messages: Sequence[Message], options: ChatOptions, cancel: threading.Event | None = None
) -> AnswerPlan:
    """Decide how `messages` are answered under `options` and set it up: load the pair, build and fit the
    prompt, compile the tool grammar, and measure the machine's costs where a draft runs."""
    if not messages:
        raise UserError("the chat is empty: it needs at least one message")
    question = prompts.routed_text(messages)
    decision = model.decide(question, options)  # the question decides, not the sources it is given
    choice = decision.choice
    parent, draft = model.pair(choice, decision.placement)
    reserve = min(options.max_tokens, parent.n_ctx // 4)
    citations: tuple[Citation, ...] = ()
    if options.documents is not None:
        # Whole documents when the collection fits half of what the context leaves (as LM Studio does):
        # "summarise this report" needs all of it, not its best passages.
        budget = (parent.n_ctx - reserve) // 2 * WHOLE_CHARS_PER_TOKEN
        citations = retrieve(model.library(options.documents.index), question, options.documents, budget)
        # Whole documents in the system message: a prefix the KV cache keeps across turns and chats.
        in_system = not options.raw_prompt and has_system_role(model, parent)
        messages = grounded_messages(messages, citations, system=in_system)
    grammar, calls, stable = options.grammar, None, 0
    if options.raw_prompt:
        prompt, dropped = prompts.raw_prompt(parent, messages[-1]["content"], reserve), 0
    elif options.tools is not None:
        syntax = tools.syntax_for(parent.metadata().get("tokenizer.chat_template"))
        shown, template_tools = tools.prepare_tools(messages, options.tools, syntax)
        prompt, dropped = prompts.fit_context(
            model.render, parent, shown, reserve, cancel, template_tools, options.trim, options.enable_thinking
        )
        tool_grammar = model.tool_grammar(parent, options.tools, syntax)
        if tool_grammar is not None:  # else (tool_choice none) the answer is all text
            grammar, calls = tool_grammar, call_reader(parent, syntax, options.tools)
    else:
        prompt, dropped = prompts.fit_context(
            model.render, parent, list(messages), reserve, cancel, trim=options.trim, think=options.enable_thinking
        )
        stable = stable_prefix(lambda chat: model.render(parent, chat), messages, prompt)
    # The live or a saved prefix (in RAM; on disk for a long stable one: the documents, a long system prompt)
    reused = model.reuse_prompt(choice.parent, parent, prompt, options.cache_key, stable)
    spec = model.settings.spec
    spec = replace(spec, lookups=spec.lookups and choice.ngram)  # the pair's lookups: on, or pinned off
    if choice.k is not None:  # a fixed draft length (pinned by the user or calibrated)
        spec = replace(spec, k=choice.k)
    if options.draft_window is not None:
        spec = replace(spec, draft_window=options.draft_window)
    if choice.draft is None and not choice.ngram:  # plain decoding: one token per step, even where a
        spec = replace(spec, forced=False)  # grammar leaves no choice (the baseline speed-ups are against)
    params = sampling(parent, options)
    measured = model.measurements
    # The draft model drafts wherever the answer speculates: the placement keeps it only then (and if it fits).
    sibling = model.draft_model(decision.placement)
    if draft is not None or spec.lookups or sibling is not None:  # the machine's costs decide from the first cycle on
        drafts = [choice.draft] if draft is not None and choice.draft else []
        measured.costs(choice.parent, drafts + ([sibling[0]] if sibling is not None else []))
    controller = Controller(measured.estimates(choice.parent, params.greedy), fixed_k=spec.k)
    plain = PlainEstimate.start(controller.estimates, measured.known_costs(choice.parent), choice.draft)
    tiers = model.manifest["tiers"]
    ratio = tiers[choice.draft]["bytes"] / max(1, tiers[choice.parent]["bytes"]) if choice.draft in tiers else 0.0
    said = model.said if spec.lookups and spec.suffix else None
    return AnswerPlan(
        model, options, decision, parent, draft, prompt, dropped, reused, grammar, calls, spec, params, controller,
        plain, ratio, citations, said, thought=thought_plan(parent, prompt, options), sibling=sibling,
    )


def call_reader(parent: LlamaBackend, syntax: tools.CallSyntax, request: tools.ToolRequest) -> tools.CallParser:
    """The parser of an answer that may call `request`'s tools: calls open only at the opener's own token where
    the vocabulary has one (as the grammar names it: Engine.tool_grammar), and each is checked (in a streamed
    answer, its name before its arguments stream)."""
    check = functools.partial(call_problem, tools=request.callable) if request.refused_as_text else None
    named = functools.partial(name_problem, tools=request.callable) if request.streamed and check else None
    opener = markup_token(parent.path, syntax.opener) if syntax.opener else None
    return tools.CallParser(syntax, request.choice != "auto", opener, check, named)


def thought_plan(parent: LlamaBackend, prompt: Sequence[int], options: ChatOptions) -> thinking.ThoughtPlan | None:
    """How a thinking model's thought is split and bounded in this answer (None: the model does not think)."""
    syntax = None if options.raw_prompt else thinking.syntax_for(parent.metadata().get("tokenizer.chat_template"))
    if syntax is None:
        return None
    # A response_format's grammar holds the answer from its first token: what it writes is the answer, even
    # where the prompt opened a thought.
    opened = options.grammar is None and thinking.opens_thought(parent.detokenize(prompt[-8:], special=True), syntax)
    room = min(options.max_tokens, parent.n_ctx - len(prompt))
    budget = options.thinking_budget if options.thinking_budget is not None else thinking.default_thought_budget(room)
    if options.enable_thinking is False:  # a template that cannot switch thinking off: the thought closes at once
        budget = 0
    close = tuple(parent.tokenize(syntax.close + "\n\n", add_bos=False, special=True))
    return thinking.ThoughtPlan(syntax, opened, budget, close)


def has_system_role(model: ModelState, parent: LlamaBackend) -> bool:
    """Whether the parent's chat template renders a system message (some refuse one, some drop it)."""
    mark = "SpecQuant system role check"
    try:
        tokens = model.render(parent, [{"role": "system", "content": mark}, {"role": "user", "content": "?"}])
    except UserError:
        return False
    return mark in parent.detokenize(tokens)


def sampling(parent: LlamaBackend, options: ChatOptions) -> SamplingParams:
    """The request's sampling: its own, or the model's recommendation, with its overrides on top."""
    base = options.sampling if options.sampling is not None else recommended(parent.metadata())
    return replace(base, **dict(options.sampling_overrides)) if options.sampling_overrides else base
