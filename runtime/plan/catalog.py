"""The Discover catalogue (assets/catalog.json): a few well-known instruct models the converter supports, with
what each costs to download, to keep on disk and to run on this machine.

The JSON holds only facts about each model (repo id, parameter count, architecture, shape, licence, one line
of description). What it costs is computed here with the estimates the rest of SpecQuant uses, so the list
cannot drift from what a conversion and a chat would really need:

- download and F16 tier: 2 bytes per parameter (the repos ship F16 or BF16 safetensors); a repo whose weights
  hold more than the converter keeps (Gemma 3 4B's vision tower) gives its whole count as `download_params`;
- Q8_0 and Q4_K_M tiers: F16 bytes x bits-per-weight / 16, the converter's own estimate
  (`converters.quantize.expected_bytes`: 8.5 bits for Q8_0 = 1.0625 bytes/param, 4.9 bits for Q4_K_M =
  0.6125 bytes/param, embeddings included); tests/test_catalog.py pins these to the converter's table, which
  this module may not import (runtime's core sits below the converters);
- RAM per tier: `runtime.plan.placement.plan` (file, KV cache at n_ctx, compute buffer, the Q4_K_M repack and the
  margin), so a tier "fits" here exactly when a chat would place it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from runtime.errors import UserError
from runtime.machine.hardware import Inventory, physical_cores

# The catalogue's file, its pins and a download's disk check live in the base: the converter needs them too.
from runtime.models.cache import (  # noqa: F401
    DOWNLOAD_MARGIN,
    TIERS,
    catalog_path,
    check_download_space,
    pinned_revision,
    size_text,
)
from runtime.plan.placement import GB, NotEnoughMemory, PlacementSettings, plan, tier_size

CATALOG_SCHEMA = 1
# config.json's `architectures` names the converter reads (converters/hf_to_gguf.py ARCHITECTURES).
SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "SmolLM3ForCausalLM",
    "GraniteForCausalLM", "Phi3ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
)
BYTES_PER_PARAM_F16 = 2
BITS_PER_WEIGHT = {"f16": 16.0, "q8_0": 8.5, "q4_k_m": 4.9}  # converters.quantize.QUANT_TYPES
SHAPE_KEYS = ("n_layer", "n_embd", "n_head_kv", "head_dim", "n_vocab")
DEFAULT_N_CTX = 4096  # the app's default context size: the KV cache the RAM figures include
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_FIELDS = {
    "repo": str,
    "params": int,
    "architecture": str,
    "licence": str,
    "description": str,
    "shape": dict,
}
_KINDS = {str: "text", int: "a whole number", dict: "an object"}


@dataclass(frozen=True)
class Entry:
    """One model of the catalogue, with its costs computed from its parameter count."""

    repo: str
    params: int
    architecture: str
    licence: str
    description: str
    shape: dict[str, int]
    gated: bool = False  # the Hub asks the user to accept the licence (and log in) before downloading
    # The commit the entry was checked against: downloads ask for exactly these files, so a later push to the
    # repo (or a swapped file) cannot change what Discover installs.
    revision: str = ""
    # Why there is no pinned commit (an entry written without access to the Hub): downloads then take the
    # Hub's main, each file checked against the sha256 the Hub publishes for it (converters.sources.download).
    unpinned: str = ""
    # All the parameters the repo's safetensors hold, where more than `params` (the text model converted).
    download_params: int = 0

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[1]

    @property
    def download_bytes(self) -> int:
        return max(self.params, self.download_params) * BYTES_PER_PARAM_F16

    @property
    def tier_bytes(self) -> dict[str, int]:
        f16 = self.params * BYTES_PER_PARAM_F16
        return {t: int(f16 * BITS_PER_WEIGHT[t] / 16) for t in TIERS}

    @property
    def disk_bytes(self) -> int:
        """The three tiers together, as the cache will hold them."""
        return sum(self.tier_bytes.values())


def _entry(raw: Any, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be an object")
    for key, kind in _FIELDS.items():
        value = raw.get(key)
        if value is None:
            raise UserError(f"{where}: '{key}' is missing")
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise UserError(f"{where}: '{key}' must be {_KINDS[kind]}, not {value!r}")
    if not _REPO_ID.match(raw["repo"]):
        raise UserError(f"{where}: 'repo' {raw['repo']!r} is not a Hugging Face repo id like org/name")
    if raw["params"] <= 0:
        raise UserError(f"{where}: 'params' must be more than 0")
    if raw["architecture"] not in SUPPORTED_ARCHITECTURES:
        raise UserError(
            f"{where}: architecture {raw['architecture']!r} is not one the converter supports "
            f"({', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    for key in ("licence", "description"):
        if not raw[key].strip() or "\n" in raw[key]:
            raise UserError(f"{where}: '{key}' must be one non-empty line")
    shape = raw["shape"]
    for key in SHAPE_KEYS:
        if not isinstance(shape.get(key), int) or isinstance(shape.get(key), bool) or shape[key] <= 0:
            raise UserError(f"{where}: 'shape.{key}' must be a positive integer")
    gated = raw.get("gated", False)
    if not isinstance(gated, bool):
        raise UserError(f"{where}: 'gated' must be true or false")
    download_params = raw.get("download_params", 0)
    if not isinstance(download_params, int) or isinstance(download_params, bool) or download_params < 0:
        raise UserError(f"{where}: 'download_params' must be a whole number, not {download_params!r}")
    revision, unpinned = raw.get("revision"), raw.get("unpinned", "")
    if revision is None and not (isinstance(unpinned, str) and unpinned.strip() and "\n" not in unpinned):
        raise UserError(f"{where}: 'revision' is missing (or say why in one line of 'unpinned')")
    if revision is not None and (not isinstance(revision, str) or not _COMMIT.fullmatch(revision)):
        raise UserError(f"{where}: 'revision' {revision!r} is not a 40-character commit hash")
    return Entry(
        raw["repo"],
        raw["params"],
        raw["architecture"],
        raw["licence"].strip(),
        raw["description"].strip(),
        {k: shape[k] for k in SHAPE_KEYS},
        gated,
        revision or "",
        "" if revision else unpinned.strip(),
        download_params,
    )


def load_catalog(path: Path | None = None) -> list[Entry]:
    """The catalogue's entries; a bad file or entry is one UserError line naming the file and the entry."""
    path = catalog_path() if path is None else path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UserError(f"{path}: cannot read the model catalogue ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: the model catalogue is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise UserError(f"{path}: expected an object with a 'models' list")
    if data.get("schema") != CATALOG_SCHEMA:
        raise UserError(f"{path}: schema {data.get('schema')!r} is not {CATALOG_SCHEMA}")
    entries: list[Entry] = []
    for i, raw in enumerate(data["models"]):
        label = raw.get("repo") if isinstance(raw, dict) and isinstance(raw.get("repo"), str) else None
        where = f"{path}: entry {i + 1}" + (f" ({label})" if label else "")
        entry = _entry(raw, where)
        if any(e.repo == entry.repo for e in entries):
            raise UserError(f"{where}: {entry.repo} is listed twice")
        entries.append(entry)
    return entries


def machine_ram() -> int:
    """This computer's RAM: the catalogue compares against all of it, since what is free changes by the minute."""
    return psutil.virtual_memory().total


@dataclass(frozen=True)
class Fit:
    """Which tiers of an entry this machine could run, what each needs, and one line to say so."""

    tiers: tuple[str, ...]  # the tiers that fit, most precise first
    needs: dict[str, int]  # RAM each tier needs (the placement plan's figure, its margin included)
    ram_bytes: int
    line: str
    # RAM for the largest plan a chat loads: F16 with its Q4_K_M draft, both KV caches and buffers (#63: a model
    # said to fit by its F16 tier alone reached far more once its draft was loaded beside it).
    plan_need: int = 0

    @property
    def fits_plan(self) -> bool:
        """Whether F16 and its draft fit together (else F16 answers without the draft's speed-up)."""
        return self.fits_all and self.plan_need <= self.ram_bytes

    @property
    def fits_all(self) -> bool:
        return len(self.tiers) == len(TIERS)

    @property
    def fits_none(self) -> bool:
        return not self.tiers


def _gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


def fit(entry: Entry, ram_bytes: int | None = None, n_ctx: int = DEFAULT_N_CTX) -> Fit:
    """Each tier is placed on the CPU by `runtime.plan.placement.plan` against this machine's RAM (or `ram_bytes`);
    a tier fits when the plan finds room for it, exactly as a chat would."""
    ram = machine_ram() if ram_bytes is None else ram_bytes
    settings = PlacementSettings(mode="cpu")
    inv = Inventory("", physical_cores(), ram, ram)
    fitting: list[str] = []
    needs: dict[str, int] = {}
    for tier, size in entry.tier_bytes.items():
        facts = tier_size(tier, size, entry.shape, n_ctx)
        try:
            chosen = plan(inv, facts, None, settings)
        except NotEnoughMemory as e:
            needs[tier] = int(e.need)
        else:
            needs[tier] = chosen.ram_bytes + settings.margin_bytes
            fitting.append(tier)
    have = f"this computer has {_gb(ram)}"
    sizes = {t: tier_size(t, b, entry.shape, n_ctx) for t, b in entry.tier_bytes.items()}
    roomy = Inventory("", physical_cores(), 1 << 50, 1 << 50)  # room for both: what the pair needs
    plan_need = plan(roomy, sizes["f16"], sizes["q4_k_m"], settings).ram_bytes + settings.margin_bytes
    if len(fitting) == len(TIERS) and plan_need <= ram:
        line = f"fits: F16 with its draft needs {_gb(plan_need)}, {have}"
    elif len(fitting) == len(TIERS):
        line = f"F16 with its draft needs {_gb(plan_need)}, {have}: it fits, answering without the draft's speed-up"
    elif fitting:
        names = " and ".join(t.upper() for t in fitting)
        line = f"F16 needs {_gb(needs['f16'])}, {have}: only {names} would fit"
    else:
        line = f"too big for this computer: even Q4_K_M needs {_gb(needs['q4_k_m'])}, {have}"
    return Fit(tuple(fitting), needs, ram, line, plan_need)


DEMO_NOTE = ("That answer came from SpecQuant's tiny demo model (135 million parameters): it shows that everything "
             "works, but its answers are often wrong.")


def better_model(ram_bytes: int | None = None, path: Path | None = None) -> Entry | None:
    """What to offer after the demo's first answer (#63): the catalogue's largest model whose F16 and draft fit
    this computer together (or `ram_bytes`) and that downloads without a Hub login; None when none does (or
    the catalogue cannot be read: the offer is a courtesy)."""
    try:
        entries = load_catalog(path)
    except UserError:
        return None
    fitting = [e for e in entries if not e.gated and fit(e, ram_bytes).fits_plan]
    return max(fitting, key=lambda e: e.params, default=None)


def better_model_line(entry: Entry | None) -> str:
    """The terminal's words after the demo's first answer: the demo note and the command that gets `entry`."""
    if entry is None:
        return f"{DEMO_NOTE} No larger model of the catalogue fits this computer's memory."
    return (f"{DEMO_NOTE} For better answers, {entry.name} fits this computer ({size_text(entry.download_bytes)} "
            f"to download): specquant convert {entry.repo}")


# A family's models share one architecture and tokenizer; a larger one may pad its vocabulary by up to this many
# unused tokens (runtime.decode.vocab.MAX_PADDING: Qwen2.5-7B's 152,064 against the 0.5B's 151,936).
_VOCAB_PADDING = 128


def can_draft_for(entry: Entry, entries: list[Entry]) -> list[str]:
    """The catalogue's larger models of `entry`'s family that it could draft for (`--draft-model`): the same
    architecture and vocabulary size (or a few padding tokens more), more parameters. A hint from the shapes
    alone: the vocabulary is checked token for token once both are converted and the draft model is chosen."""
    n_vocab = entry.shape.get("n_vocab", 0)
    return [
        e.name
        for e in entries
        if e.architecture == entry.architecture
        and e.params > entry.params
        and 0 <= e.shape.get("n_vocab", 0) - n_vocab <= _VOCAB_PADDING
    ]


def eta_text(done: int, total: int, elapsed_s: float) -> str:
    """'1.20 GB of 3.09 GB, 2 min 10 s left' from the bytes so far and the time they took."""
    text = f"{size_text(done)} of {size_text(total)}" if total > 0 else size_text(done)
    if done <= 0 or elapsed_s <= 0 or total <= done:
        return text
    left = (total - done) / (done / elapsed_s)
    minutes, seconds = divmod(int(left + 0.5), 60)
    return text + (f", {minutes} min {seconds} s left" if minutes else f", {seconds} s left")
