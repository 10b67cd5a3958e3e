"""The registry of draft sources: every kind the controller, the answer's counters, its summary, the cost model
and the benchmark know, and how an answer's settings (`SpecConfig`, what the engine lends it: a `Setup`) make
its sources. A new source is one module here (a `KIND`, a `DraftSource` and a `build`) and one line in
`_BUILT_IN`; nothing else names the kinds: every other module iterates `KINDS`, `offered()` or `lookups()`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from runtime.decode.draft_source import DraftSource, Kind, Setup
from runtime.decode.draft_source import SpecConfig as SpecConfig  # what the builds read, named where they are
from runtime.decode.drafts import budget_close, forced, model, ngram, suffix, tier

if TYPE_CHECKING:
    from runtime.decode.llama_backend import LlamaBackend
    from runtime.decode.suffix_index import SuffixIndex

Build = Callable[[Setup], "DraftSource | None"]

# Every kind, in the order the loop asks its sources each cycle: certain tokens first (a thought's budget
# before a grammar's), then the offers (on a tie the controller keeps the earlier offer).
KINDS: dict[str, Kind] = {}
_BUILDS: dict[str, Build] = {}


def register(kind: Kind, build: Build) -> Kind:
    """Add a kind, and how an answer's `Setup` makes its source (None: this answer has none), after the
    registered ones. A name is registered once."""
    if kind.name in KINDS:
        raise ValueError(f"draft source kind {kind.name!r} is already registered")
    KINDS[kind.name] = kind
    _BUILDS[kind.name] = build
    return kind


def unregister(name: str) -> None:
    """Forget a kind (a test's throwaway source)."""
    KINDS.pop(name, None)
    _BUILDS.pop(name, None)


def offered() -> tuple[Kind, ...]:
    """The kinds whose proposals are verified: offered to the controller, with counters in the answer's Stats."""
    return tuple(k for k in KINDS.values() if k.verified)


def lookups() -> tuple[Kind, ...]:
    """The offered kinds that decode nothing (a lookup: no model step to price, no memory to load)."""
    return tuple(k for k in offered() if not k.decodes)


def k_max() -> int:
    """The longest proposal any kind makes."""
    return max((k.k_max for k in offered()), default=0)


_BUILT_IN = (budget_close, forced, ngram, suffix, tier, model)
for _module in _BUILT_IN:
    register(_module.KIND, _module.build)


def build_sources(
    spec: SpecConfig,
    draft: LlamaBackend | None = None,
    draft_name: str = "draft",
    said: SuffixIndex | None = None,
    party: str = "",
    sibling: tuple[str, LlamaBackend] | None = None,
    thought: budget_close.ThoughtBudget | None = None,
) -> tuple[DraftSource, ...]:
    """One answer's sources (fresh state), in `KINDS` order: each registered kind's, where `spec` and what
    the answer was lent (`draft` as the tier draft under the name the controller keeps its estimates by,
    `said` for suffix lookup read and written for `party`, `sibling` as the draft model, a thinking model's
    budget) make one."""
    setup = Setup(spec, draft, draft_name, said, party, sibling, thought)
    made = (_BUILDS[name](setup) for name in KINDS)
    return tuple(s for s in made if s is not None)
