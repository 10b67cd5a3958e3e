"""Which configurations a run compares: names like `f16`, `PARENT<-DRAFT[:kN][:wN]`, presets, the stock
llama-cpp-python loop and llama.cpp's own speculative tool."""

from __future__ import annotations

from dataclasses import dataclass

from commands.bench.anchor import ANCHOR, ANCHOR_PAIR
from runtime.decode.controller import NGRAM
from runtime.decode.sampling import SamplingParams
from runtime.engine.engine import ChatOptions
from runtime.errors import UserError
from runtime.plan.policy import PRESET_NAMES

GREEDY = SamplingParams()  # the fidelity tables compare greedy texts
STOCK = "llama-cpp-python"
LOOKUP = "prompt-lookup"  # llama-cpp-python's LlamaPromptLookupDecoding, the only speculation it ships
PLAIN_Q4 = "q4_k_m"  # plain Q4_K_M, what people run instead: every configuration is also shown against it


@dataclass(frozen=True)
class BenchConfig:
    name: str
    parent: str | None = None
    draft: str | None = None
    k: int | None = None  # fixed draft length; None = the controller picks k
    preset: str | None = None  # routed preset instead of a pinned pair
    stock: bool = False  # llama-cpp-python's own greedy decoding of the parent file, as a peer
    lookup: bool = False  # ... with its prompt-lookup draft (it needs logits_all=True by design)
    anchor: bool = False  # llama.cpp's own llama-speculative-simple on parent <- draft, n-max k
    window: int | None = None  # the draft's catch-up window (SpecConfig.draft_window); None: the default

    def options(self, max_tokens: int, sampling: SamplingParams | None = GREEDY) -> ChatOptions:
        """The request; `sampling` None is the model's own recommendation (seeded), as a user gets it."""
        seeded = (("seed", 0),) if sampling is None else ()  # every configuration draws the same numbers
        if self.preset:
            return ChatOptions(preset=self.preset, max_tokens=max_tokens, sampling=sampling, sampling_overrides=seeded)
        pinned = {"parent": self.parent, "draft": self.draft or "none", "k": self.k}
        return ChatOptions(
            **pinned, max_tokens=max_tokens, sampling=sampling, draft_window=self.window, sampling_overrides=seeded
        )


def parse_config(name: str) -> BenchConfig:
    """`f16`, `f16<-q4_k_m`, `f16<-q4_k_m:k4`, `f16<-q4_k_m:w32` (the draft's catch-up window; `:w0`
    the whole context), `f16<-ngram`, a preset name, `llama-cpp-python`, or
    `llama.cpp[:kN]` (llama.cpp's own speculative decoding of f16 <- q4_k_m, n-max N, default 4)."""
    anchor, _, n_max = name.partition(":k")
    if anchor == ANCHOR:
        if n_max and not n_max.isdigit():
            raise UserError(f"unknown bench config {name!r}: use {ANCHOR} or {ANCHOR}:kN")
        parent, draft = ANCHOR_PAIR
        return BenchConfig(name, parent=parent, draft=draft, k=int(n_max or 4), stock=True, anchor=True)
    if name == STOCK:
        return BenchConfig(name, parent="f16", stock=True)
    if name == LOOKUP:
        return BenchConfig(name, parent="f16", stock=True, lookup=True)
    if name in PRESET_NAMES:
        return BenchConfig(name, preset=name)
    rest, _, window = name.partition(":w")
    pair, _, k = rest.partition(":k")
    parent, _, draft = pair.partition("<-")
    tiers = ("f16", "q8_0", "q4_k_m")
    bad_number = (k and not k.isdigit()) or (window and not window.isdigit())
    if parent not in tiers or (draft and draft not in (*tiers, NGRAM)) or bad_number:
        raise UserError(
            f"unknown bench config {name!r}: use a tier, PARENT<-DRAFT[:kN], a preset, "
            f"{STOCK}, {LOOKUP} or {ANCHOR}[:kN]"
        )
    return BenchConfig(
        name, parent=parent, draft=draft or None, k=int(k) if k else None, window=int(window) if window else None
    )


DEFAULT_CONFIGS = (
    "f16",
    "q8_0",
    "q4_k_m",
    "f16<-q4_k_m",
    "f16<-q4_k_m:k4",
    "f16<-ngram",
    "f16<-q8_0",
    "f16<-q8_0:k4",
    "q8_0<-q4_k_m",
    "q8_0<-q4_k_m:k4",
    "exact",
    "balanced",
    "fast",
    "auto",
    "paper",
    STOCK,
    LOOKUP,
)
