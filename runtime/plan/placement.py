"""Where each loaded tier runs: `n_gpu_layers` per tier, as a pure function of hardware, models and settings.

Candidates: all on the GPU; the draft on the GPU with as many parent layers as fit; the parent on the GPU
with the draft on the CPU (the paper's split); CPU only. Each is scored with the cost model of docs/architecture.md §5:
a draft runs k times per cycle, so a small draft on the GPU often beats the paper's split. Decode is
memory-bound, so a tier's step time is the bytes it reads per token over the bandwidth where they live.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from runtime.decode.controller import speedup
from runtime.errors import UserError
from runtime.machine.hardware import Gpu, Inventory
from runtime.machine.rpc import WorkerProbe, local_clear_speed

GB = 1e9


@dataclass(frozen=True)
class TierSize:
    """What placement needs to know of one tier (from the manifest and the GGUF header)."""

    tier: str
    file_bytes: int
    n_layer: int
    kv_bytes: int  # KV cache at the planned n_ctx
    compute_bytes: int  # llama.cpp's compute buffer, about n_ubatch x (n_vocab + 4 n_embd) x 4 bytes

    @property
    def anonymous_on_cpu(self) -> bool:
        """q4_k_m is repacked for AVX2 into anonymous memory on load: not shared, its full size in RAM."""
        return self.tier == "q4_k_m"

    def layer_bytes(self) -> float:
        return self.file_bytes / max(self.n_layer, 1)


def tier_size(tier: str, file_bytes: int, hparams: dict[str, Any], n_ctx: int, n_ubatch: int = 512) -> TierSize:
    n_layer = int(hparams["n_layer"])
    kv_dim = int(hparams["n_head_kv"]) * int(hparams["head_dim"])
    kv = 2 * n_layer * kv_dim * n_ctx * 2  # K and V, F16
    compute = n_ubatch * (int(hparams["n_vocab"]) + 4 * int(hparams["n_embd"])) * 4
    return TierSize(tier, file_bytes, n_layer, kv, compute)


# remote: the parent's layers on a worker (--rpc, runtime.machine.rpc), the draft here.
PLACEMENT_MODES = ("auto", "cpu", "gpu", "remote")


@dataclass(frozen=True)
class PlacementSettings:
    mode: str = "auto"  # one of PLACEMENT_MODES
    cpu_bandwidth: float = 30 * GB  # bytes/s; measured on the 2-core machine (docs/architecture.md §5)
    gpu_bandwidth: float = 300 * GB
    k: int = 4
    acceptance: float = 0.8  # assumed when ranking candidates before anything is measured
    batch_cost: float = 1.3  # v(k+1): a (k+1)-token verify costs about 1.3 single steps on a CPU
    margin_bytes: int = 512 * 1024 * 1024
    max_memory_bytes: int | None = None  # the user's budget (--max-memory): taken as it is, no margin off it
    # A worker's device (runtime.machine.rpc): its speed is assumed a CPU's like this one's until the controller has
    # measured it; each graph it computes costs one network round trip (the probe's median).
    rpc_bandwidth: float = 30 * GB
    rpc_rtt_s: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in PLACEMENT_MODES:
            raise UserError(f"unknown placement {self.mode!r}: choose {', '.join(PLACEMENT_MODES)}")
        if self.max_memory_bytes is not None and self.max_memory_bytes <= 0:
            raise UserError(f"memory budget {self.max_memory_bytes / GB:g} GB must be more than 0")

    def ram_budget(self, inv: Inventory) -> float:
        """What planning may use: available RAM less a margin, or the user's budget if that is smaller."""
        free = inv.ram_available_bytes - self.margin_bytes
        return free if self.max_memory_bytes is None else min(free, self.max_memory_bytes)


@dataclass(frozen=True)
class TierPlacement:
    tier: str
    n_gpu_layers: int
    op_offload: bool

    def as_dict(self) -> dict[str, object]:
        return {"tier": self.tier, "n_gpu_layers": self.n_gpu_layers, "op_offload": self.op_offload}


@dataclass(frozen=True)
class Plan:
    mode: str  # cpu | gpu | hybrid
    candidate: str
    parent: TierPlacement
    draft: TierPlacement | None
    threads: int
    ram_bytes: int
    vram_bytes: int
    predicted_token_s: float
    reason: str
    precision_note: str = ""  # why the parent is less precise than asked for ("" when it is not)
    # A draft model (another model's cheapest tier, `--draft-model`), on the CPU beside the pair; None: none
    # was asked for, or it was dropped for memory (the reason says so).
    sibling: TierPlacement | None = None

    @property
    def label(self) -> str:
        return f"{self.mode.upper()} · {self.threads} threads"

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "candidate": self.candidate,
            "parent": self.parent.as_dict(),
            "draft": self.draft.as_dict() if self.draft else None,
            "threads": self.threads,
            "ram_gb": round(self.ram_bytes / GB, 2),
            "vram_gb": round(self.vram_bytes / GB, 2),
            "predicted_ms_per_token": round(self.predicted_token_s * 1000, 2),
            "reason": self.reason,
            "precision_note": self.precision_note or None,
            "draft_model": self.sibling.as_dict() if self.sibling else None,
        }


def _split(t: TierSize, gpu_layers: int) -> tuple[float, float]:
    """(bytes on GPU, bytes on CPU) of a tier with `gpu_layers` of its layers offloaded."""
    frac = min(gpu_layers, t.n_layer) / t.n_layer
    on_gpu = t.file_bytes * frac + (t.kv_bytes * frac) + (t.compute_bytes if gpu_layers else 0)
    on_cpu = t.file_bytes * (1 - frac) + t.kv_bytes * (1 - frac) + t.compute_bytes
    return on_gpu, on_cpu


def _step_s(t: TierSize, gpu_layers: int, s: PlacementSettings, remote: bool = False) -> tuple[float, float]:
    """(compute, network) seconds of one step; a step with layers on a worker pays one round trip (the
    activations at a layer split are a few kB: their transfer time is in the round trip's noise)."""
    frac = min(gpu_layers, t.n_layer) / t.n_layer
    device_bw = s.rpc_bandwidth if remote else s.gpu_bandwidth
    compute = t.file_bytes * frac / device_bw + t.file_bytes * (1 - frac) / s.cpu_bandwidth
    return compute, (s.rpc_rtt_s if remote and gpu_layers else 0.0)


def _per_token_s(
    parent: TierSize, draft: TierSize | None, layers: tuple[int, int], s: PlacementSettings, remote: bool = False
) -> float:
    """Predicted seconds per answer token. Over a network a verify of k+1 tokens pays the round trip once,
    so the batch cost relative to a single step falls toward 1 as the round trip grows: speculation pays more."""
    compute_p, net_p = _step_s(parent, layers[0], s, remote)
    tp = compute_p + net_p
    if draft is None:
        return tp
    td = sum(_step_s(draft, layers[1], s, remote))
    batch = (s.batch_cost * compute_p + net_p) / tp
    return tp / speedup(s.acceptance, s.k, td / tp, batch)


# A worker answers only when it is predicted clearly faster than this machine alone (or the model does not
# fit here): the speed probe is noisy, and an answer that needs no network cannot lose its worker.
REMOTE_MARGIN = 1.15


def _rank_s(
    parent: TierSize, draft: TierSize | None, c: tuple[str, int, int], s: PlacementSettings, remote: bool
) -> float:
    per_token = _per_token_s(parent, draft, (c[1], c[2]), s, remote)
    return per_token * (REMOTE_MARGIN if remote and (c[1] or c[2]) else 1.0)


class NotEnoughMemory(UserError):
    """A tier that does not fit; `advise` turns it into the one-line error with what to do instead."""

    def __init__(self, tier: str, need: float, have: float, budget: str) -> None:
        self.tier, self.need, self.have, self.budget = tier, need, have, budget
        super().__init__(f"not enough memory for the {tier} tier: it needs {need / GB:.1f} GB, {budget}")


def _refusal(refused: list[Gpu]) -> str:
    """`Apple Paravirtual device failed its probe (killed by SIGABRT)`, for each GPU left out."""
    return "; ".join(f"{g.name} failed its probe ({g.probe_error})" for g in refused)


def _more(missing: float) -> str:
    """How much memory is missing, never rounded down to "0.0 GB"."""
    gb = missing / GB
    return f"{gb:.1f} GB" if gb >= 0.95 else f"{max(gb, 0.01):.2f} GB"


def _layers_fitting(t: TierSize, budget: float) -> int:
    fixed = t.compute_bytes
    if budget <= fixed:
        return 0
    per_layer = (t.file_bytes + t.kv_bytes) / t.n_layer
    return max(0, min(t.n_layer + 1, int((budget - fixed) // per_layer)))


def _ram_need(t: TierSize | None, gpu_layers: int) -> float:
    if t is None:
        return 0.0
    _, on_cpu = _split(t, gpu_layers)
    return on_cpu


def plan(
    inv: Inventory,
    parent: TierSize,
    draft: TierSize | None,
    settings: PlacementSettings | None = None,
    sibling: TierSize | None = None,
) -> Plan:
    """Pick the fastest candidate that fits; drop the draft first when memory is short, then the draft model
    (`sibling`, the user's choice: its weights, KV cache and compute buffer count in RAM, all on the CPU);
    explain why."""
    s = settings or PlacementSettings()
    if sibling is not None:
        try:  # the pair planned in what the draft model leaves
            with_sibling = replace(s, max_memory_bytes=int(s.ram_budget(inv) - _ram_need(sibling, 0)))
            if with_sibling.max_memory_bytes > 0:
                chosen = plan(inv, parent, draft, with_sibling)
                sib = TierPlacement(sibling.tier, 0, op_offload=False)
                return replace(chosen, ram_bytes=chosen.ram_bytes + int(_ram_need(sibling, 0)), sibling=sib)
        except NotEnoughMemory:
            pass
        chosen = plan(inv, parent, draft, s)
        need = _ram_need(sibling, 0) + chosen.ram_bytes
        note = f"the draft model was dropped: it and {chosen.parent.tier} need {need / GB:.1f} GB of RAM"
        return replace(chosen, reason=f"{chosen.reason}; {note}")
    notes: list[str] = []
    ram = s.ram_budget(inv)
    capped = ram == s.max_memory_bytes
    # Said as a user reads it: what is available (the margin counted in the need), or their own budget.
    extra = 0 if capped else s.margin_bytes
    budget = f"{ram / GB:.1f} GB (your budget)" if capped else f"{inv.ram_available_bytes / GB:.1f} GB available"
    # Workers (--rpc) are the device to plan for when there are any: the user named them.
    workers = [g for g in inv.gpus if g.kind == "rpc"]
    remote = bool(workers) and s.mode != "gpu"
    # A GPU whose probe failed (runtime.machine.gpu_probe: a virtual GPU that lacks ops, a broken driver) is
    # never chosen, whatever the settings: a tier placed there aborts the process rather than answering.
    refused = [g for g in inv.gpus if g.kind == "gpu" and g.probe_error]
    pool = workers if remote else [g for g in inv.gpus if g.kind == "gpu" and not g.probe_error]
    gpu = max(pool, key=lambda g: g.free_bytes, default=None)
    if s.mode == "gpu" and gpu is None:
        if refused:
            raise UserError(f"placement 'gpu' asked for, but {_refusal(refused)}")
        raise UserError("placement 'gpu' asked for, but llama.cpp sees no GPU (a CPU-only build, or no device)")
    if s.mode == "remote" and not remote:
        raise UserError("placement 'remote' asked for, but no worker is connected (--rpc HOST:PORT)")
    vram = (gpu.free_bytes - s.margin_bytes) if gpu is not None and s.mode != "cpu" else 0

    def candidates(d: TierSize | None) -> list[tuple[str, int, int]]:
        full_p, full_d = parent.n_layer + 1, (d.n_layer + 1 if d else 0)
        out = [("cpu-only", 0, 0)]
        if vram > 0:
            p_gpu, _ = _split(parent, full_p)
            d_gpu = _split(d, full_d)[0] if d else 0.0
            where = "remote" if remote else "gpu"
            if p_gpu + d_gpu <= vram:
                out.append((f"all-{where}", full_p, full_d))
            if d is not None and d_gpu <= vram and not remote:  # a remote draft pays k round trips a cycle
                out.append(("draft-on-gpu", _layers_fitting(parent, vram - d_gpu), full_d))
            out.append((f"parent-{'remote' if remote else 'on-gpu'}", _layers_fitting(parent, vram), 0))
        if s.mode == "cpu":
            out = out[:1]
        elif s.mode in ("gpu", "remote"):
            out = [c for c in out if c[0] != "cpu-only"] or out
        if s.mode == "remote":
            out = [c for c in out if c[0] == "parent-remote"] or out
        return out

    chosen = None
    for d in [draft, None] if draft is not None else [None]:
        fitting = [c for c in candidates(d) if _ram_need(parent, c[1]) + _ram_need(d, c[2]) <= ram]
        if fitting:
            chosen = (d, min(fitting, key=lambda c: _rank_s(parent, d, c, s, remote)))
            break
        if d is not None:
            need = _ram_need(parent, 0) + _ram_need(d, 0)
            notes.append(
                f"the {d.tier} draft was dropped: {parent.tier} and {d.tier} need {(need + extra) / GB:.1f} GB of RAM, "
                f"{budget}"
            )
    if chosen is None:
        raise NotEnoughMemory(parent.tier, _ram_need(parent, 0) + extra, ram + extra, budget)
    d, (name, p_layers, d_layers) = chosen
    on_gpu = (p_layers > 0) or (d_layers > 0)
    full = p_layers >= parent.n_layer + 1 and (d is None or d_layers >= d.n_layer + 1)
    mode = "cpu" if not on_gpu else "remote" if remote else "gpu" if full else "hybrid"
    # Offloading a local tier's big prompt matmuls to a worker would send its weights over the network.
    offload = on_gpu and not remote
    p_place = TierPlacement(parent.tier, p_layers, op_offload=offload)
    d_place = TierPlacement(d.tier, d_layers, op_offload=offload) if d is not None else None
    vram_used = _split(parent, p_layers)[0] * (p_layers > 0) + (_split(d, d_layers)[0] if d and d_layers else 0)
    ram_used = _ram_need(parent, p_layers) + _ram_need(d, d_layers)
    per_token = _per_token_s(parent, d, (p_layers, d_layers), s, remote)
    where = "no GPU is available" if gpu is None else f"{gpu.name} has {gpu.free_bytes / GB:.1f} GB free"
    if gpu is None and refused:
        where = _refusal(refused)
    if remote and gpu is not None:
        where += f", {s.rpc_rtt_s * 1000:.2f} ms round trip"
        if not on_gpu:
            where += f", not predicted {REMOTE_MARGIN:.2f}x faster than here"
    if s.mode != "auto":
        where = f"placement pinned to {s.mode}"
    reason = f"{name}: {where}; predicted {per_token * 1000:.1f} ms per token"
    if notes:
        reason += "; " + "; ".join(notes)
    return Plan(mode, name, p_place, d_place, inv.physical_cores, int(ram_used), int(vram_used), per_token, reason)


PRECISION_ORDER = ("f16", "q8_0", "q4_k_m")  # most precise first


def plan_precision(
    inv: Inventory,
    tiers: dict[str, TierSize],
    parent: str,
    draft: str | None,
    settings: PlacementSettings | None = None,
    pinned: bool = False,
    sibling: TierSize | None = None,
) -> Plan:
    """The most precise tier, at most `parent`, that fits (exactly `parent` when pinned), with the draft
    and the draft model (`sibling`) where they fit beside it; the reason says when precision had to give way
    to memory.

    A pinned parent that does not fit is a one-line error whose advice names a tier that fits, or says that
    none does and how much memory is missing.
    """
    ceiling = PRECISION_ORDER.index(parent)
    order = [parent] if pinned else [t for t in PRECISION_ORDER[ceiling:] if t in tiers]
    first_miss: NotEnoughMemory | None = None
    for tier in order:
        d = tiers[draft] if draft and PRECISION_ORDER.index(draft) > PRECISION_ORDER.index(tier) else None
        try:
            chosen = plan(inv, tiers[tier], d, settings, sibling)
        except NotEnoughMemory as e:
            first_miss = first_miss or e
            continue
        if first_miss is None:
            return chosen
        note = (
            f"{tier.upper()} precision: {first_miss.tier.upper()} needs {first_miss.need / GB:.1f} GB, "
            f"{first_miss.budget}"
        )
        return replace(chosen, reason=f"{note}; {chosen.reason}", precision_note=note)
    assert first_miss is not None
    smaller = [t for t in PRECISION_ORDER[PRECISION_ORDER.index(parent) + 1 :] if t in tiers]
    for tier in smaller:
        try:
            plan(inv, tiers[tier], None, settings)
        except NotEnoughMemory:
            continue
        raise UserError(f"{first_miss}; --parent {tier} fits") from None
    least = min((tiers[t] for t in tiers), key=lambda t: _ram_need(t, 0))
    try:
        plan(inv, least, None, settings)
    except NotEnoughMemory as e:
        raise UserError(
            f"{first_miss}; no tier of this model fits: even {least.tier} needs {e.need / GB:.1f} GB "
            f"({_more(e.need - e.have)} more than is available)"
        ) from None
    raise first_miss


def will_fit(
    inv: Inventory,
    sizes: dict[str, int],
    hparams: dict[str, int] | None,
    n_ctx: int = 4096,
    settings: PlacementSettings | None = None,
) -> tuple[bool, str]:
    """Before a conversion: would this machine answer with one of these tiers, and with which? (fits, one
    line to say). `sizes` are the tiers' expected file sizes; without shape facts the KV cache is left out."""
    shape = hparams or {"n_layer": 1, "n_head_kv": 0, "head_dim": 0, "n_vocab": 0, "n_embd": 0}
    facts = {t: tier_size(t, b, shape, n_ctx) for t, b in sizes.items()}
    try:
        chosen = plan_precision(inv, facts, PRECISION_ORDER[0], PRECISION_ORDER[-1], settings)
    except UserError as e:
        least = min(facts.values(), key=lambda t: _ram_need(t, 0))
        try:
            plan(inv, least, None, settings)
        except NotEnoughMemory as miss:
            return False, (
                f"no tier of this model will fit in this machine's memory: even {miss.tier.upper()} needs "
                f"{miss.need / GB:.1f} GB, {miss.budget}"
            )
        return False, str(e)
    pair = chosen.parent.tier.upper() + (f" ← {chosen.draft.tier.upper()}" if chosen.draft else "")
    why = f" ({chosen.precision_note})" if chosen.precision_note else ""
    return True, f"this machine will answer with {pair}, {chosen.ram_bytes / GB:.1f} GB of RAM{why}"


def measured_placement(settings: PlacementSettings, workers: list[WorkerProbe]) -> PlacementSettings:
    """The placement's settings with the workers' measured network round trip (the slowest worker's) and
    speed: this machine's CPU bandwidth scaled by how fast the slowest worker clears memory beside here."""
    rtt = max(w.rtt_s for w in workers)
    speeds = [w.clear_bps for w in workers if w.clear_bps > 0]
    if not speeds:
        return replace(settings, rpc_rtt_s=rtt)
    ratio = min(speeds) / local_clear_speed()
    return replace(settings, rpc_rtt_s=rtt, rpc_bandwidth=settings.cpu_bandwidth * ratio)
