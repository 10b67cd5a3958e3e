"""`Engine`: one model's state on this machine: its tiers as loaded and placed, what its answers measured
(costs and the controller's estimates), the auto preset's calibration, and the caches kept per model (chat
templates, tool grammars). An answer is `prepare`d from it (runtime.engine.answer_plan) and run
(runtime.engine.generate); `stream_chat` does both.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from runtime.decode.controller import Estimates
from runtime.decode.drafts.model import source_name
from runtime.decode.grammar import Grammar, markup_token
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.decode.machine_costs import MachineCosts
from runtime.decode.suffix_index import SuffixIndex
from runtime.documents.library import Library
from runtime.engine import tools
from runtime.engine.answer import Answer, Chunk, Stats
from runtime.engine.answer_plan import AnswerPlan, prepare
from runtime.engine.decision import Decision, decide
from runtime.engine.generate import run
from runtime.engine.interface import ChatEngine
from runtime.engine.measurements import Measurements
from runtime.engine.options import ChatOptions, EngineSettings, Message
from runtime.engine.prompt import ChatTemplates
from runtime.engine.prompt_cache import Identity, PromptCache
from runtime.engine.prompt_store import PromptStore
from runtime.engine.tools import ToolRequest
from runtime.errors import ModelError, UserError
from runtime.machine import rpc
from runtime.machine.hardware import Inventory, inventory
from runtime.models.cache import DEMO_NAME, ModelDir, cache_root, check_name, list_models
from runtime.plan import router
from runtime.plan.placement import Plan, TierSize, measured_placement, tier_size
from runtime.plan.policy import Choice
from runtime.plan.router import Route

__all__ = ["Answer", "ChatOptions", "Chunk", "Engine", "EngineSettings", "Message", "Stats", "resolve_model"]


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


READ_RATE_MIN = 128  # prompt tokens read before the first token that make a reading speed worth keeping


class Engine(ChatEngine):
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
        for tier in manifest.get("tiers", {}):  # a damaged tier is refused now, before a thread makes room for it
            self.model_file_check(tier)
        # A draft model (`--draft-model`): another converted model with this one's vocabulary, token for token
        self.sibling = self._draft_model(self.settings.draft_model, root)
        # Workers first: registered with ggml, their devices are part of the inventory.
        self.workers = rpc.connect(self.settings.rpc) if self.settings.rpc else []
        self.hardware = hardware or inventory()
        self._placement = self.settings.placement
        if self.workers:  # planned with the probe's round trip and speed (the settings stay as given)
            self._placement = measured_placement(self._placement, self.workers)
        self._backends: dict[str, LlamaBackend] = {}
        self._calibration: dict[str, Any] | None = None
        self._templates = ChatTemplates()
        self._grammars: dict[tuple[str, str], Grammar] = {}  # tool-call grammars, compiled once per model
        # Costs are measured on the tiers as placed for answers, if they are loaded already.
        self.measurements = Measurements(
            self.model.path, self.machine_key, lambda tier: self._backends.get(tier) or self.backend(tier)
        )
        self._cache_key = ""  # ChatOptions.cache_key of the answer whose prompt the KV caches hold
        # KV states of earlier prompts, in RAM across turns, chats and requests (runtime.engine.prompt_cache)
        self.prompt_cache = PromptCache(self.settings.prompt_cache_bytes)
        # Everything said before (prompts and answers, per party) for suffix lookup, within a token budget
        self.said = SuffixIndex(self.settings.said_tokens) if self.settings.said_tokens > 0 else None
        # ... and on disk, for long stable prefixes (documents, long system prompts), across restarts
        self.prompt_store = PromptStore(max_bytes=self.settings.prompt_store_bytes)
        self._stored: tuple[Identity, LlamaBackend, int] | None = None  # the answer's state to save after it
        # Prompt tokens this machine read per second before the first token, from the last answer that read
        # enough of them to tell (None before): the estimate of a long wait (`stream_chat`'s on_reading).
        self.read_rate: float | None = None
        self._libraries: dict[str | None, Library] = {}  # documents indexes grounded answers read, by path
        router.warm_up()

    # --- an answer: prepare, then run ----------------------------------------------------------------
    def prepare(
        self, messages: Sequence[Message], options: ChatOptions | None = None, cancel: threading.Event | None = None
    ) -> AnswerPlan:
        """How the answer to `messages` runs (runtime.engine.answer_plan), set up to run."""
        return prepare(self, messages, options or ChatOptions(), cancel)

    def stream_chat(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None = None,
        cancel: threading.Event | None = None,
        *,
        on_reading: Callable[[int, float | None], None] | None = None,
    ) -> Iterator[Chunk]:
        """Answer `messages` with the next assistant turn, streaming Chunks; the last has done=True. The chat
        may end with any role: after an assistant's or a system message the model writes a new turn.
        `on_reading(tokens, read_rate)`: once the prompt is built, how many of its tokens are still to read
        (the rest is cached) and this machine's last measured reading speed (a window's wait says so)."""
        plan = self.prepare(messages, options, cancel)
        if on_reading is not None:
            on_reading(len(plan.prompt) - plan.reused, self.read_rate)
        last: Chunk | None = None
        for last in run(plan, cancel):
            yield last
        if last is not None:
            self._learn_read_rate(last.stats)
        self.store_prompt()

    def _learn_read_rate(self, stats: Stats) -> None:
        """The reading speed of an answer that read at least READ_RATE_MIN tokens (fewer: overheads dominate)."""
        read = stats.prompt_tokens - stats.reused_tokens
        if read >= READ_RATE_MIN and stats.ttft_s > 0:
            self.read_rate = read / stats.ttft_s

    def store_prompt(self) -> None:
        """After an answer whose prompt has a long stable prefix: its state on disk, if none is there yet."""
        if self._stored is not None:
            identity, parent, stable = self._stored
            self._stored = None
            self.prompt_store.keep(identity, parent, stable)

    # --- decisions (runtime.engine.decision) ----------------------------------------------------------
    def route(self, text: str) -> Route:
        return router.route(text, self.settings.router)

    def tier_size(self, tier: str, model: ModelDir | None = None) -> TierSize:
        model = model or self.model
        manifest = self.manifest if model is self.model else model.read_manifest() or {}
        rec = manifest["tiers"][tier]
        hparams = rec.get("hparams")
        if hparams is None:
            raise ModelError(f"model {model.name!r} predates placement facts: run `specquant convert` again")
        return tier_size(tier, rec["bytes"], hparams, self.settings.n_ctx)

    def decide(self, text: str, options: ChatOptions) -> Decision:
        """How the answer to `text` runs here: level, parent and draft, placement (runtime.engine.decision)."""
        calibration = self.stored_calibration() if options.preset == "auto" else None
        tiers = {t: self.tier_size(t) for t in self.manifest["tiers"]}
        sibling = self.tier_size(self.sibling[1], self.sibling[0]) if self.sibling else None
        return decide(
            text, options, tiers, self.hardware, self._placement, self.settings.router, calibration, sibling
        )

    # --- what was measured here (runtime.engine.measurements) ------------------------------------------
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
        return self.measurements.estimates(parent, greedy)

    def costs(
        self, parent: str, drafts: Sequence[str] = (), refresh: bool = False
    ) -> tuple[MachineCosts, bool]:
        return self.measurements.costs(parent, drafts, refresh)

    @property
    def calibrated(self) -> bool:
        """Whether this machine's speeds are measured for the default preset (else it answers `fast`)."""
        return self.stored_calibration() is not None

    def stored_calibration(self) -> dict[str, Any] | None:
        """The calibration saved for this machine and these tiers, read once; None before it is measured (the
        default then answers `fast` rather than make an answer wait for the measurement)."""
        if self._calibration is None:
            from runtime.engine.calibrate import stored

            self._calibration = stored(self)
        return self._calibration

    def calibration(self, stop: Callable[[], bool] | None = None) -> dict[str, Any] | None:
        """This machine's calibration (runtime.engine.calibrate), measured now if none is saved; None when
        `stop()` said to stop between two of its runs (nothing is saved then)."""
        if self.stored_calibration() is None:
            from runtime.engine.calibrate import load_or_calibrate

            self._calibration = load_or_calibrate(self, stop)
        return self._calibration

    # --- models ------------------------------------------------------------------------------------
    def _draft_model(self, name: str | None, root: Path | None) -> tuple[ModelDir, str] | None:
        """The draft model and the tier it drafts with (its cheapest), once its vocabulary is checked to be
        this model's token for token (a one-line error naming the first differing token otherwise)."""
        if not name or name == self.model.name:
            return None
        from runtime.decode.vocab import check_draft_model, draft_tier

        sibling = resolve_model(name, root)
        manifest = sibling.read_manifest() or {}
        if not manifest.get("complete"):
            raise ModelError(f"draft model {name!r} is incomplete: run `specquant convert` again")
        check_draft_model(sibling, self.model)
        return sibling, draft_tier(sibling, manifest)

    def draft_model(self, placement: Plan) -> tuple[str, LlamaBackend] | None:
        """The draft model as a draft source (its source name and backend), if the plan kept it in memory."""
        if self.sibling is None or placement.sibling is None:
            return None
        name = source_name(self.sibling[0].name)
        return name, self.backend(name)

    def backend(self, tier: str, n_gpu_layers: int = 0, op_offload: bool | None = False) -> LlamaBackend:
        """The loaded tier (memory-mapped), reloaded only when its placement changes; the draft model's tier
        under its source name ("model:NAME")."""
        if self.sibling is not None and tier == source_name(self.sibling[0].name):
            return self._sibling_backend(tier)
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

    def _sibling_backend(self, name: str) -> LlamaBackend:
        assert self.sibling is not None
        b = self._backends.get(name)
        if b is None:
            model, tier = self.sibling
            opts = LoadOptions(n_ctx=self.settings.n_ctx, n_threads=self.settings.n_threads)
            b = self._backends[name] = LlamaBackend(model.tier_path(tier), opts)
        return b

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
        """Forget every KV cache, the prompts kept in RAM and everything said before (benchmarks: each run pays
        the same prefill, and a repeat cannot draft the answer it repeats); the disk's prompt states stay."""
        for b in self._backends.values():
            b.truncate(0)
        self.prompt_cache.clear()
        if self.said is not None:
            self.said.clear()

    def llama_seconds(self) -> float:
        """Time spent inside llama_decode across the loaded tiers."""
        return sum(b.llama_seconds for b in self._backends.values())

    def take_notice(self) -> str | None:
        """A line about where the last answer ran; only an EngineProcess has any (a worker that was down)."""
        return None

    def close(self) -> None:
        self.prompt_store.wait()
        for b in self._backends.values():
            b.close()
        self._backends.clear()
        for lib in self._libraries.values():
            with contextlib.suppress(Exception):  # SQLite refuses a close from another thread: it closes at exit
                lib.close()
            if lib.embedder is not None:
                lib.embedder.close()
        self._libraries.clear()

    def library(self, index: str | None) -> Library:
        """The documents index that grounded answers read (None: the user's), opened once per Engine: on the
        engine's thread, which every answer runs on. With the embedding model converted (`specquant docs add`
        and the window's Documents panel convert it), search is hybrid; else BM25 alone."""
        lib = self._libraries.get(index)
        if lib is None:
            from runtime.engine.embedder import open_embedder

            embedder = open_embedder(self.settings.n_threads or self.hardware.physical_cores)
            lib = self._libraries[index] = Library(index, embedder=embedder)
        return lib

    # --- per-model caches of an answer's prompt and grammar ---------------------------------------------
    def render(
        self, parent: LlamaBackend, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None,
        think: bool | None = None,
    ) -> list[int]:
        """The chat as prompt tokens through the model's own chat template (runtime.engine.prompt)."""
        return self._templates.render(parent, messages, tools, think)

    def claim_caches(self, cache_key: str) -> None:
        """The KV caches are about to hold the prompt of an answer for `cache_key`: another party's prefix must
        not speed this answer up (how fast it starts would tell one party what another asked). Saved prompts
        stay: each is kept for its own party (runtime.engine.prompt_cache.Identity)."""
        if cache_key != self._cache_key:
            for b in self._backends.values():
                b.truncate(0)
            self._cache_key = cache_key

    def reuse_prompt(
        self, tier: str, parent: LlamaBackend, prompt: Sequence[int], cache_key: str, stable: int = 0
    ) -> int:
        """Set `parent`'s KV cache up for `prompt`: claimed for `cache_key`, the live state kept in the prompt
        cache before the prompt overwrites it, the longest saved prefix restored where it beats the live one
        (from RAM, else from disk for a prompt whose first `stable` tokens stay put: runtime.engine.prompt_store).
        How many prompt tokens need not be read again."""
        # The parent's alone: a draft catches up on its own, and cheaply.
        if cache_key != self._cache_key:
            self.prompt_cache.keep_live(self._identity(tier, parent, self._cache_key), parent, ())
        self.claim_caches(cache_key)
        identity = self._identity(tier, parent, cache_key)
        self.prompt_cache.keep_live(identity, parent, prompt)
        reused = self.prompt_cache.restore(identity, parent, prompt)
        if self.prompt_store.on and stable:
            reused = self.prompt_store.restore(identity, parent, prompt, stable)
            self._stored = (identity, parent, stable)
        return min(reused, len(prompt) - 1)

    def _identity(self, tier: str, backend: LlamaBackend, party: str) -> Identity:
        sha = self.manifest["tiers"].get(tier, {}).get("sha256", "")
        return Identity.of(self.model.name, tier, backend.path, sha, backend.n_ctx, party)

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
