"""What one model's answers have measured on this machine: the probe's costs per parent (runtime.decode.machine_costs)
and the controller's running estimates per parent and sampling mode, kept in the model's folder under the
machine's key so that another machine, kernel build, thread count or tier file starts afresh."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runtime.decode.controller import Estimates
from runtime.decode.llama_backend import LlamaBackend
from runtime.decode.machine_costs import MachineCosts, load_or_measure_costs
from runtime.errors import readable
from runtime.models.cache import atomic_write_text

log = logging.getLogger("specquant.engine")
ESTIMATES_FILE = "controller.json"
REMEASURE_S = 600.0  # the least time between two measurements of a parent's costs that answers ask for


class Measurements:
    """The costs and estimates of one model on this machine. `loaded(tier)` gives the tier as placed for
    answers (loading it if need be): costs are measured on what answers run."""

    def __init__(self, folder: Path, key: Callable[[], dict[str, Any]], loaded: Callable[[str], LlamaBackend]) -> None:
        self.folder = folder
        self.key = key
        self.loaded = loaded
        self._estimates: dict[str, Estimates] | None = None
        self._costs: dict[str, MachineCosts] = {}
        self._stale: set[str] = set()  # parents whose costs an answer showed were measured under load
        self._measured_at: dict[str, float] = {}  # when this process last measured each parent's costs
        # Called just before the probe runs (a few seconds to a minute): the answer's wait says so (#63).
        self.on_measuring: Callable[[], None] | None = None

    def known_costs(self, parent: str) -> MachineCosts | None:
        """The parent's costs if this process has them (no measuring)."""
        return self._costs.get(parent)

    def mark_stale(self, parent: str) -> None:
        """An answer ran much faster than the parent's costs said: they were measured under load."""
        self._stale.add(parent)

    def estimates(self, parent: str, greedy: bool) -> Estimates:
        """The controller's running estimates for this parent and sampling mode: acceptance seeded from earlier
        answers on this machine (cached in the model's folder, keyed like the calibration), times from the
        machine's probe once it ran (`costs`) and from this process's own cycles."""
        if self._estimates is None:
            self._estimates = {}
            try:
                cached = json.loads((self.folder / ESTIMATES_FILE).read_text(encoding="utf-8"))
                if cached.get("key") == json.loads(json.dumps(self.key())):
                    self._estimates = {k: Estimates.from_dict(v) for k, v in cached.get("estimates", {}).items()}
            except (OSError, ValueError, AttributeError):
                pass  # none yet, or unreadable: priors, refined within a few cycles
        key = f"{parent}:{'greedy' if greedy else 'sampled'}"
        est = self._estimates.setdefault(key, Estimates())
        if est.shape is None and parent in self._costs:
            est.seed(self._costs[parent].shape())
        return est

    def costs(self, parent: str, drafts: Sequence[str] = (), refresh: bool = False) -> tuple[MachineCosts, bool]:
        """This machine's costs for `parent` and its `drafts`: cached in the model's folder, else measured now
        (a few seconds, once per machine, kernels and tiers); and whether they were cached. Every Estimates of
        this parent starts from them."""
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

        def backends() -> dict[str, LlamaBackend]:
            return {t: self.loaded(t) for t in tiers}

        key = self.key()
        tell = self.on_measuring
        costs, cached = load_or_measure_costs(
            self.folder, key, lambda: self.loaded(parent), backends, parent, refresh, tell
        )
        if not all(d in costs.c for d in drafts):  # cached for other drafts than these: measure all of them
            tiers = sorted(set(drafts) | set(costs.c))
            costs, cached = load_or_measure_costs(self.folder, key, lambda: self.loaded(parent), backends, parent, True,
                                            tell)
        self._costs[parent] = costs
        if not cached:
            self._measured_at[parent] = time.monotonic()
        for name, est in (self._estimates or {}).items():
            if name.startswith(f"{parent}:"):
                est.seed(costs.shape())
        return costs, cached

    def save(self) -> None:
        """Save what was learned of acceptance; never fails an answer (a read-only or full disk costs the next
        start its priors, nothing more). A unique temporary name per writer: two processes on one model may
        save at once, and the last whole file wins."""
        if not self._estimates:
            return
        try:
            data = {"key": self.key(), "estimates": {k: v.as_dict() for k, v in self._estimates.items()}}
            atomic_write_text(self.folder / ESTIMATES_FILE, json.dumps(data) + "\n")
        except Exception as e:  # bookkeeping after the answer: whatever goes wrong, the answer stands
            log.warning("could not save the controller's estimates: %s", readable(e))
