"""`Engine`: route a chat, pick its parent and draft, place and load the tiers, stream `Chunk`s.

The speculative loop yields `Step`s; `stream_chat` turns them into Chunks, detokenizing incrementally so a
multi-byte character is never split, and stopping at EOS, max tokens or a stop string. The CLI and the app
only consume Chunks.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runtime.decode.cost_model import NGRAM, Controller, Estimates, Offer
from runtime.decode.costs import MachineCosts, load_or_measure
from runtime.decode.grammar import Grammar, markup_spellings, markup_token, tokenizer_for
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.decode.sampling import SamplingParams, recommended
from runtime.decode.speculative import SpecConfig, Step, TokenLogprob, generate_steps, take
from runtime.decode.text_stream import TextStream
from runtime.engine import tools
from runtime.engine.chat import Answer, ChatOptions, Chunk, Message, Stats, TokenChoice
from runtime.engine.decide import Decision, decide
from runtime.engine.interface import Answers
from runtime.engine.markup import chat_tokens
from runtime.engine.plain_estimate import PlainEstimate
from runtime.engine.tools import ToolRequest
from runtime.errors import Cancelled, ContextTooLong, ModelError, UserError, readable
from runtime.machine import rpc
from runtime.machine.hardware import Inventory, inventory
from runtime.models.cache import DEMO_NAME, ModelDir, atomic_write_text, cache_root, check_name, list_models
from runtime.plan import router
from runtime.plan.placement import PlacementSettings, Plan, TierFacts, measured_placement, tier_facts
from runtime.plan.policy import Choice
from runtime.plan.router import Route, RouterSettings

__all__ = ["Answer", "ChatOptions", "Chunk", "Engine", "EngineSettings", "Message", "Stats", "resolve_model"]
log = logging.getLogger("specquant.engine")
# The router's level as a prior on the answer's length before the answer itself says more: a draft's
# catch-up must be repaid within the rest of the answer.
EXPECTED_ANSWER_TOKENS = {"low": 16, "medium": 48, "high": 96}
SHORT_ANSWER_TOKENS = 8  # "Answer with the letter": the letter, maybe a few words and the end token
ESTIMATES_FILE = "controller.json"
REMEASURE_S = 600.0  # the least time between two measurements of a parent's costs that answers ask for
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


@dataclass(frozen=True)
class EngineSettings:
    n_ctx: int = 4096
    n_threads: int = 0  # 0: physical cores
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    router: RouterSettings = field(default_factory=RouterSettings)
    spec: SpecConfig = field(default_factory=SpecConfig)
    rpc: tuple[str, ...] = ()  # workers' HOST:PORT (runtime.machine.rpc): their devices may run the parent's layers


def resolve_model(name: str | None, root: Path | None = None) -> ModelDir:
    """`--model NAME`, else the only complete model in the cache, else the demo. Converting the demo on a
    fresh machine is for the surfaces to do (the CLI does it), not for the runtime."""
    root = cache_root() if root is None else root
    if name:
        model = ModelDir(root, check_name(name))
        if model.read_manifest() is None:
            known = ", ".join(m.name for m in list_models(root)) or "none"
            raise ModelError(f"no model {name!r} in {root} (cached: {known}); add it with `specquant convert`")
        return model
    complete = [m.name for m in list_models(root) if m.complete]
    if len(complete) == 1:
        return ModelDir(root, complete[0])
    if DEMO_NAME in complete:
        return ModelDir(root, DEMO_NAME)
    if not complete:
        raise ModelError(f"no model in {root}: add the demo with `specquant convert demo`, or yours with "
                        "`specquant convert SOURCE`")
    raise UserError(f"{len(complete)} models in {root} ({', '.join(complete)}): choose one with --model NAME")


class Engine(Answers):
    """Owns the loaded tiers of one model and answers chats with them."""

    def __init__(
        self,
        model: str | None = None,
        settings: EngineSettings | None = None,
        root: Path | None = None,
        hardware: Inventory | None = None,
    ) -> None:
        self.settings = settings or EngineSettings()
        self.model = resolve_model(model, root)
        manifest = self.model.read_manifest()
        if manifest is None or not manifest.get("complete"):
            raise ModelError(f"model {self.model.name!r} is incomplete: run `specquant convert` again")
        self.manifest = manifest
        # Workers first: registered with ggml, their devices are part of the inventory.
        self.workers = rpc.connect(self.settings.rpc) if self.settings.rpc else []
        self.hardware = hardware or inventory()
        self._placement = self.settings.placement
        if self.workers:  # planned with the probe's round trip and speed (the settings stay as given)
            self._placement = measured_placement(self._placement, self.workers)
        self._backends: dict[str, LlamaBackend] = {}
        self._tokenizer: LlamaBackend | None = None
        self._calibration: dict[str, Any] | None = None
        self._formatters: dict[str, Any] = {}
        self._grammars: dict[tuple[str, str], Grammar] = {}  # tool-call grammars, compiled once per model
        self._estimates: dict[str, Estimates] | None = None
        self._costs: dict[str, MachineCosts] = {}
        self._stale: set[str] = set()  # parents whose costs an answer showed were measured under load
        self._measured_at: dict[str, float] = {}  # when this process last measured each parent's costs
        self._cache_key = ""  # ChatOptions.cache_key of the answer whose prompt the KV caches hold
        router.warm_up()

    # --- decisions (runtime.engine.decide) ----------------------------------------------------------
    def route(self, text: str) -> Route:
        return router.route(text, self.settings.router)

    def facts(self, tier: str) -> TierFacts:
        rec = self.manifest["tiers"][tier]
        hparams = rec.get("hparams")
        if hparams is None:
            raise ModelError(f"model {self.model.name!r} predates placement facts: run `specquant convert` again")
        return tier_facts(tier, rec["bytes"], hparams, self.settings.n_ctx)

    def decide(self, text: str, options: ChatOptions) -> Decision:
        """How the answer to `text` runs here: level, parent and draft, placement (runtime.engine.decide)."""
        calibration = self.calibration() if options.preset == "auto" else None
        tiers = {t: self.facts(t) for t in self.manifest["tiers"]}
        return decide(text, options, tiers, self.hardware, self._placement, self.settings.router, calibration)

    def machine_key(self) -> dict[str, Any]:
        """What measured speeds depend on: the machine, its kernels, the threads and the tiers' bytes."""
        import llama_cpp

        from runtime import __version__
        from runtime.machine.hardware import ensure_backends

        hw = self.hardware
        return {
            "cpu": hw.cpu,
            "cores": hw.physical_cores,
            "gpus": [g.name for g in hw.gpus],
            "threads": self.settings.n_threads,
            "cpu_kernels": ensure_backends().variant,
            "llama_cpp_python": llama_cpp.__version__,
            "specquant": __version__,
            "tiers": {t: r["sha256"] for t, r in self.manifest["tiers"].items()},
        }

    def estimates(self, parent: str, greedy: bool) -> Estimates:
        """The controller's running estimates for this parent and sampling mode: acceptance seeded from earlier
        answers on this machine (cached in the model's folder, keyed like the calibration), times from the
        machine's probe once it ran (`costs`) and from this process's own cycles."""
        if self._estimates is None:
            self._estimates = {}
            try:
                cached = json.loads((self.model.path / ESTIMATES_FILE).read_text(encoding="utf-8"))
                if cached.get("key") == json.loads(json.dumps(self.machine_key())):
                    self._estimates = {k: Estimates.from_dict(v) for k, v in cached.get("estimates", {}).items()}
            except (OSError, ValueError, AttributeError):
                pass  # none yet, or unreadable: priors, refined within a few cycles
        key = f"{parent}:{'greedy' if greedy else 'sampled'}"
        est = self._estimates.setdefault(key, Estimates())
        if est.shape is None and parent in self._costs:
            est.seed(self._costs[parent].shape())
        return est

    def costs(self, parent: str, drafts: Sequence[str] = (), refresh: bool = False) -> tuple[MachineCosts, bool]:
        """This machine's costs for `parent` and its `drafts` (runtime.decode.costs): cached in the model's folder,
        else measured now (a few seconds, once per machine, kernels and tiers); and whether they were cached.
        Every Estimates of this parent starts from them."""
        # Costs an answer showed were measured under load are measured again, at most once per REMEASURE_S:
        # under a load that comes and goes (a busy server) every answer would otherwise pay seconds for it.
        last = self._measured_at.get(parent)
        if parent in self._stale and (last is None or time.monotonic() - last >= REMEASURE_S):
            refresh = True
        self._stale.discard(parent)
        known = self._costs.get(parent)
        if known is not None and not refresh and all(d in known.c for d in drafts):
            return known, True
        tiers = list(drafts)

        def loaded(tier: str) -> LlamaBackend:  # as placed for answers, if it is loaded already
            return self._backends.get(tier) or self.backend(tier)

        def backends() -> dict[str, LlamaBackend]:
            return {t: loaded(t) for t in tiers}

        key = self.machine_key()
        costs, cached = load_or_measure(self.model.path, key, lambda: loaded(parent), backends, parent, refresh)
        if not all(d in costs.c for d in drafts):  # cached for other drafts than these: measure all of them
            tiers = sorted(set(drafts) | set(costs.c))
            costs, cached = load_or_measure(self.model.path, key, lambda: loaded(parent), backends, parent, True)
        self._costs[parent] = costs
        if not cached:
            self._measured_at[parent] = time.monotonic()
        for name, est in (self._estimates or {}).items():
            if name.startswith(f"{parent}:"):
                est.seed(costs.shape())
        return costs, cached

    def save_estimates(self) -> None:
        """Save what was learned of acceptance; never fails an answer (a read-only or full disk costs the next
        start its priors, nothing more). A unique temporary name per writer: two processes on one model may
        save at once, and the last whole file wins."""
        if not self._estimates:
            return
        try:
            data = {"key": self.machine_key(), "estimates": {k: v.as_dict() for k, v in self._estimates.items()}}
            atomic_write_text(self.model.path / ESTIMATES_FILE, json.dumps(data) + "\n")
        except Exception as e:  # bookkeeping after the answer: whatever goes wrong, the answer stands
            log.warning("could not save the controller's estimates: %s", readable(e))

    @property
    def calibrated(self) -> bool:
        """Whether the auto preset's calibration is loaded (else the next auto request measures or reads it)."""
        return self._calibration is not None

    def calibration(self) -> dict[str, Any]:
        if self._calibration is None:
            from runtime.engine.calibrate import load_or_calibrate

            self._calibration = load_or_calibrate(self)
        return self._calibration

    def why_plain(self, choice: Choice, estimates: Estimates, stats: Stats, k_max: int) -> str:
        """Why an answer drafted nothing, in the words the window shows: no draft for the pair, a short answer
        (a caught-up draft would pay, but not its catch-up over this answer), or a draft that would not pay."""
        if choice.draft is None and not choice.ngram:
            return f"no draft for this pair ({choice.why})"
        if estimates.step_s() is None or stats.cycles <= 1:
            return "short answer"  # the first cycle is always the parent's alone
        if choice.draft is None:
            return "n-gram lookup found nothing worth proposing"
        tiers = self.manifest["tiers"]
        ratio = tiers[choice.draft]["bytes"] / max(1, tiers[choice.parent]["bytes"])
        # A copy: asking the controller a hypothetical must not touch the estimates it saves.
        probe = Controller(copy.deepcopy(estimates))
        decision = probe.decide([Offer(choice.draft, "tier", k_max, 0, ratio)], 1 << 20)
        pays = decision.source is not None and not decision.explore and decision.rate > decision.plain_rate
        return "short answer" if pays else "the draft would not pay on this machine"

    # --- models ------------------------------------------------------------------------------------
    def backend(self, tier: str, n_gpu_layers: int = 0, op_offload: bool | None = False) -> LlamaBackend:
        """The loaded tier (memory-mapped), reloaded only when its placement changes."""
        b = self._backends.get(tier)
        if b is not None and b.options.n_gpu_layers == n_gpu_layers:
            return b
        if b is not None:
            b.close()
        self.model_file_check(tier)
        opts = LoadOptions(
            n_ctx=self.settings.n_ctx,
            n_threads=self.settings.n_threads,
            n_gpu_layers=n_gpu_layers,
            op_offload=op_offload,
        )
        self._backends[tier] = LlamaBackend(self.model.tier_path(tier), opts)
        return self._backends[tier]

    def model_file_check(self, tier: str) -> None:
        """A cheap guard against a damaged tier: size must match the manifest (convert checks sha256)."""
        path = self.model.tier_path(tier)
        want = self.manifest["tiers"][tier]["bytes"]
        if not path.is_file() or path.stat().st_size != want:
            raise ModelError(f"{path} is missing or damaged: run `specquant convert` to repair {self.model.name}")

    def pair(self, choice: Choice, placement: Plan) -> tuple[LlamaBackend, LlamaBackend | None]:
        parent = self.backend(choice.parent, placement.parent.n_gpu_layers, placement.parent.op_offload)
        draft = None
        if choice.draft and placement.draft is not None:
            draft = self.backend(choice.draft, placement.draft.n_gpu_layers, placement.draft.op_offload)
        return parent, draft

    def reset_caches(self) -> None:
        """Forget every KV cache (benchmarks: each run pays the same prefill)."""
        for b in self._backends.values():
            b.truncate(0)

    def llama_seconds(self) -> float:
        """Time spent inside llama_decode across the loaded tiers."""
        return sum(b.llama_seconds for b in self._backends.values())

    def take_notice(self) -> str | None:
        """A line about where the last answer ran; only an EngineProcess has any (a worker that was down)."""
        return None

    def close(self) -> None:
        for b in self._backends.values():
            b.close()
        self._backends.clear()

    # --- chat --------------------------------------------------------------------------------------
    def render(
        self, parent: LlamaBackend, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """The chat as prompt tokens, through the GGUF's own chat template (llama-cpp-python's Jinja); `tools`
        for a template with a tools section (runtime.engine.tools.prepare)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = parent.metadata().get("tokenizer.chat_template")
        if not template:
            def render(chat: list[Message]) -> str:
                return "".join(f"{m['role']}: {m['content']}\n" for m in chat) + "assistant: "
        else:
            formatter = self._formatters.get(template)
            if formatter is None:  # compiling a template takes milliseconds: once per model
                bos = parent.detokenize([parent.bos], special=True) if parent.bos >= 0 else ""
                eos = parent.detokenize([parent.eos], special=True) if parent.eos >= 0 else ""
                formatter = self._formatters[template] = Jinja2ChatFormatter(template, eos, bos)

            def render(chat: list[Message]) -> str:
                try:
                    return formatter(messages=chat, tools=tools).prompt
                except Exception as e:  # a template's own raise_exception, or a Jinja error
                    raise UserError(f"the model's chat template rejected this chat: {e}") from None

        # Only the template's own markup is special: `<|im_end|>` in what a message says stays text.
        text = functools.partial(parent.tokenize, add_bos=False, special=False)
        return chat_tokens(messages, render, text, markup_spellings(parent.path))

    def raw_prompt(self, parent: LlamaBackend, text: str, reserve: int) -> list[int]:
        """A completion's prompt: the text as it is (special tokens read as text), with the model's BOS."""
        tokens = parent.tokenize(text, add_bos=True, special=False)
        if not tokens:
            raise UserError("the prompt is empty")
        if len(tokens) > parent.n_ctx - reserve:
            raise _too_long(len(tokens), parent, reserve)
        return tokens

    def tool_grammar(self, parent: LlamaBackend, request: ToolRequest, syntax: tools.CallSyntax) -> Grammar | None:
        """The grammar of an answer that may call `request`'s tools (the model's own `<tool_call>` token where
        its vocabulary has one), kept per model and grammar text: the same tools again are neither validated
        nor compiled again."""
        terms = []
        for word in (syntax.opener, syntax.closer):
            token = markup_token(parent.path, word) if word else None
            terms.append(json.dumps(word) if token is None else f"<[{token}]>")
        source = tools.call_lark(request, syntax, *terms)
        if source is None:
            return None
        key = (str(parent.path), source)
        cached = self._grammars.pop(key, None) or Grammar.from_lark(source)
        self._grammars[key] = cached  # the most recently used last
        while len(self._grammars) > 16:
            self._grammars.pop(next(iter(self._grammars)))
        return cached

    def sampling(self, parent: LlamaBackend, options: ChatOptions) -> SamplingParams:
        """The request's sampling: its own, or the model's recommendation, with its overrides on top."""
        base = options.sampling if options.sampling is not None else recommended(parent.metadata())
        return replace(base, **dict(options.sampling_overrides)) if options.sampling_overrides else base

    def fit_context(
        self, parent: LlamaBackend, messages: list[Message], reserve: int, cancel: threading.Event | None = None,
        tools: list[dict[str, Any]] | None = None, trim: bool = True,
    ) -> tuple[list[int], int]:
        """Drop the oldest turns (never the system prompt, never the last message) until the prompt fits;
        without `trim`, a chat that does not fit is refused (ContextTooLong) whole.

        Linear in the chat's length, so a flood of messages cannot hold the engine: each turn is tokenized
        once, the turns to drop are found by running totals, and the chat is rendered again only to confirm
        (the template's own tokens per turn are estimated from the first render). Stop is honoured between
        turns."""
        budget = parent.n_ctx - reserve
        render = functools.partial(self.render, tools=tools)
        tokens = render(parent, messages)
        if len(tokens) <= budget:
            return tokens, 0
        if not trim:
            fix = "shorten the chat, allow dropping its oldest turns (the API's specquant.trim)"
            raise _too_long(len(tokens), parent, reserve, fix)
        first = 1 if messages and messages[0]["role"] == "system" else 0
        sizes = []
        for m in messages:
            if cancel is not None and cancel.is_set():
                raise Cancelled("stopped while fitting the chat into the context")
            sizes.append(len(parent.tokenize(m["content"], add_bos=False, special=False)))
        per_turn = max(0.0, (len(tokens) - sum(sizes)) / len(messages))  # the template's tokens around a turn
        excess, dropped = len(tokens) - budget, 0
        while excess > 0 and len(messages) - first - dropped > 1:
            excess -= sizes[first + dropped] + per_turn
            dropped += 1
        fits = self._fitted(render, parent, messages, first, dropped, budget, cancel)
        while fits is not None and dropped > 0:  # the estimate dropped a turn too many: keep it after all
            fewer = self._fitted(render, parent, messages, first, dropped - 1, budget, cancel)
            if fewer is None:
                break
            fits, dropped = fewer, dropped - 1
        while fits is None:  # the template's turns were longer than estimated: one more, rarely needed
            if len(messages) - first - dropped <= 1:
                raise _too_long(len(render(parent, messages[:first] + messages[first + dropped :])), parent, reserve)
            dropped += 1
            fits = self._fitted(render, parent, messages, first, dropped, budget, cancel)
        return fits, dropped

    @staticmethod
    def _fitted(
        render: Callable[[LlamaBackend, list[Message]], list[int]], parent: LlamaBackend, messages: list[Message],
        first: int, dropped: int, budget: int, cancel: threading.Event | None,
    ) -> list[int] | None:
        """The prompt without the `dropped` oldest turns after the first `first`, if it fits the budget."""
        if cancel is not None and cancel.is_set():
            raise Cancelled("stopped while fitting the chat into the context")
        tokens = render(parent, messages[:first] + messages[first + dropped :])
        return tokens if len(tokens) <= budget else None

    def stream_chat(
        self, messages: Sequence[Message], options: ChatOptions | None = None, cancel: threading.Event | None = None
    ) -> Iterator[Chunk]:
        """Answer `messages` with the next assistant turn, streaming Chunks; the last has done=True. The chat
        may end with any role: after an assistant's or a system message the model writes a new turn."""
        options = options or ChatOptions()
        if not messages:
            raise UserError("the chat is empty: it needs at least one message")
        decision = self.decide(_routed_text(messages), options)
        route, choice, placement = decision.route, decision.choice, decision.placement
        parent, draft = self.pair(choice, placement)
        reserve = min(options.max_tokens, parent.n_ctx // 4)
        grammar, calls = options.grammar, None
        if options.raw_prompt:
            prompt, dropped = self.raw_prompt(parent, messages[-1]["content"], reserve), 0
        elif options.tools is not None:
            syntax = tools.syntax_for(parent.metadata().get("tokenizer.chat_template"))
            shown, template_tools = tools.prepare(messages, options.tools, syntax)
            prompt, dropped = self.fit_context(parent, shown, reserve, cancel, template_tools, options.trim)
            tool_grammar = self.tool_grammar(parent, options.tools, syntax)
            if tool_grammar is not None:  # else (tool_choice none) the answer is all text
                grammar, calls = tool_grammar, tools.CallParser(syntax, options.tools.choice != "auto")
        else:
            prompt, dropped = self.fit_context(parent, list(messages), reserve, cancel, trim=options.trim)
        if options.cache_key != self._cache_key:  # another party's prefix must not speed this answer up
            self.reset_caches()
            self._cache_key = options.cache_key
        reused = min(parent.common_prefix(prompt), len(prompt) - 1)
        spec = replace(self.settings.spec, ngram=self.settings.spec.ngram and choice.ngram)
        if choice.k is not None:  # a fixed draft length (pinned by the user or calibrated)
            spec = replace(spec, k=choice.k)
        if options.draft_window is not None:
            spec = replace(spec, draft_window=options.draft_window)
        if choice.draft is None and not choice.ngram:  # plain decoding: one token per step, even where a
            spec = replace(spec, forced=False)  # grammar leaves no choice (the baseline speed-ups are against)
        params = self.sampling(parent, options)
        if draft is not None or spec.ngram:  # the machine's costs decide from the first cycle on
            self.costs(choice.parent, [choice.draft] if draft is not None and choice.draft else [])
        controller = Controller(self.estimates(choice.parent, params.greedy), fixed_k=spec.k)
        honest = PlainEstimate.start(controller.estimates, self._costs.get(choice.parent), choice.draft)

        text = TextStream(parent.token_bytes, options.stop)
        stats = Stats(prompt_tokens=len(prompt), reused_tokens=reused, dropped_turns=dropped)
        t_start = time.perf_counter()
        t_first: float | None = None
        constraint = grammar.constraint(tokenizer_for(parent)) if grammar is not None else None
        steps = generate_steps(
            parent,
            draft,
            prompt,
            params,
            spec,
            cancel,
            controller=controller,
            draft_name=choice.draft or "draft",
            answer_tokens=expected_answer_tokens(route),
            max_tokens=options.max_tokens,
            constraint=constraint,
            logprobs=options.logprobs,
        )
        reason: str | None = "length"
        try:
            for step in steps:
                now = time.perf_counter()
                if t_first is None:
                    t_first = now
                step, reason = take(step, stats.tokens, options.max_tokens, parent.is_end_of_generation)
                emit, emit_flags, hit = text.add(step.tokens, step.from_draft)
                stats = _add_step(stats, step, len(step.tokens), now - t_start, now - t_first, reason == "eos")
                if constraint is not None:
                    stats = replace(stats, grammar_s=constraint.seconds)
                stats = honest.judge(stats, step)
                if hit:
                    reason = "stop"
                found: list[tools.CallDelta] = []
                if calls is not None:  # call text goes out as calls, not as text
                    emit, found = calls.feed(emit)
                    emit_flags = ()
                yield Chunk(
                    emit, step.tokens, step.from_draft, route, choice, placement, stats, draft_chars=emit_flags,
                    calls=tuple(found), logprobs=tuple(_token_choice(parent, lp) for lp in step.logprobs),
                )
                if reason is not None:
                    break
            else:
                reason = "cancelled" if cancel is not None and cancel.is_set() else "length"
        except Cancelled:  # the abort hook stopped a decode (a long prefill); the caches are consistent
            reason = "cancelled"
        finally:
            steps.close()
            if honest.stale:
                self._stale.add(choice.parent)
        tail, tail_flags = text.finish()
        found = []
        if calls is not None:
            tail, found = calls.feed(tail, final=True)
            tail_flags = ()
        stats = replace(stats, stop_reason=reason)
        if stats.drafted == 0:
            stats = replace(stats, spec_off=self.why_plain(choice, controller.estimates, stats, spec.k_max))
        try:
            yield Chunk(
                tail, (), (), route, choice, placement, stats, done=True, draft_chars=tail_flags, calls=tuple(found)
            )
        finally:  # bookkeeping after the answer is delivered: it can neither delay nor fail it
            self.save_estimates()


def _too_long(n_tokens: int, parent: LlamaBackend, reserve: int, fix: str = "shorten it") -> ContextTooLong:
    return ContextTooLong(
        f"the prompt is {n_tokens} tokens; the context holds {parent.n_ctx} with {reserve} kept for the answer: "
        f"{fix} or raise the context size"
    )


def _routed_text(messages: Sequence[Message]) -> str:
    """What the router judges: the last message when it is the user's or a tool's result (the answer follows
    it), else the last user message (a chat ending with an assistant's or a system message), else the last."""
    if messages[-1]["role"] in ("user", "tool"):
        return messages[-1]["content"]
    users = [m for m in messages if m["role"] == "user"]
    return (users[-1] if users else messages[-1])["content"]


def _token_choice(parent: LlamaBackend, lp: TokenLogprob) -> TokenChoice:
    def piece(token: int) -> tuple[str, bytes]:
        raw = parent.token_bytes(token)
        return raw.decode("utf-8", errors="replace"), raw

    return TokenChoice(*piece(lp.token), lp.logprob, tuple((*piece(t), x) for t, x in lp.top))


def _add_step(stats: Stats, step: Step, n_out: int, elapsed: float, decode_s: float, ended: bool) -> Stats:
    first = stats.cycles == 0
    return replace(
        stats,
        end_token=int(ended),
        tokens=stats.tokens + n_out,
        ttft_s=elapsed if first else stats.ttft_s,
        first_tokens=n_out if first else stats.first_tokens,
        decode_s=decode_s,
        drafted=stats.drafted + step.drafted,
        accepted=stats.accepted + step.accepted,
        ngram_accepted=stats.ngram_accepted + (step.accepted if step.source == NGRAM else 0),
        tier_accepted=stats.tier_accepted + (step.accepted if step.source not in (None, NGRAM) else 0),
        ngram_drafted=stats.ngram_drafted + (step.drafted if step.source == NGRAM else 0),
        tier_drafted=stats.tier_drafted + (step.drafted if step.source not in (None, NGRAM) else 0),
        draft_s=stats.draft_s + step.draft_s,
        verify_s=stats.verify_s + step.verify_s,
        cycles=stats.cycles + 1,
        forced=stats.forced + step.forced,
    )
