"""The window's settings: one dataclass, saved with QSettings, turned into the runtime's options.

A damaged, hand-edited or unreadable settings file never stops the window: each value that cannot be read or
checked falls back to its default. QSettings writes atomically (a uniquely named temporary file renamed into
place, under a lock file for other processes), so a crash mid-save leaves the old settings or the new ones.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from PySide6.QtCore import QSettings

from runtime.api import DEFAULT_PORT
from runtime.decode.sampling import LLAMA_DEFAULTS, SamplingParams
from runtime.engine.engine import ChatOptions, EngineSettings
from runtime.engine.options import thinking_option
from runtime.engine.tool_loop import DEFAULT_ROUNDS
from runtime.errors import UserError
from runtime.machine.rpc import parse_endpoints
from runtime.models.cache import check_name
from runtime.plan.placement import PlacementSettings

ORGANIZATION = "SpecQuant"
APPLICATION = "SpecQuant"
THEMES = ("system", "light", "dark")
# runtime.mcp.approval's modes, named here so that the settings load without the MCP SDK (half a second).
APPROVAL_MODES = ("ask", "all", "none")

log = logging.getLogger("specquant.app")


@dataclass(frozen=True)
class AppSettings:
    preset: str = ChatOptions.preset
    level: str = "auto"  # auto, or a pinned level
    speculation: bool = True
    draft_length: int = 0  # 0: the controller picks k each cycle; N: always draft N tokens
    draft_model: str = ""  # another converted model with the same vocabulary that drafts (`--draft-model`); "": none
    model_sampling: bool = True  # the model's recommended sampling; else the three values below
    temperature: float = LLAMA_DEFAULTS.temperature
    top_p: float = LLAMA_DEFAULTS.top_p
    top_k: int = LLAMA_DEFAULTS.top_k
    max_tokens: int = ChatOptions.max_tokens
    thinking: bool = True  # a thinking model thinks before it answers (off: its template's switch, if any)
    thinking_budget: int = 0  # tokens of thought before the answer begins; 0: 3/4 of the answer's room
    n_ctx: int = EngineSettings.n_ctx
    placement: str = PlacementSettings.mode  # one of runtime.plan.placement.PLACEMENT_MODES
    max_memory_gb: float = 0.0  # memory the model may use; 0: what is available, less a margin
    workers: str = ""  # HOST:PORT[,HOST:PORT…] of `specquant worker`s that may run the parent (runtime.machine.rpc)
    theme: str = "system"
    highlight_draft: bool = False
    speed_chart: bool = True  # the status bar's live speed sparkline (View menu)
    zoom: int = 0  # points added to the system font size (Ctrl+ / Ctrl-)
    model: str = ""  # the model last chatted with
    api_server: bool = False  # serve the OpenAI-compatible API on 127.0.0.1 (runtime.api.server)
    api_port: int = DEFAULT_PORT
    # -1: a fresh seed for every answer (Regenerate samples anew). 0 to 2^64 - 1: every answer draws the same
    # numbers (settings file only, for reproducing a run; docs/cli.md, "Seeds", says what that repeats).
    seed: int = -1
    tool_approval: str = "ask"  # MCP tool calls (Tools panel): ask each time, run all, or run none
    # Settings file only, for tests and for reproducing a turn: the first answer's tool_choice ("required": it
    # must call a tool, which makes a small model's call certain) and the answers per turn with tools.
    tool_first_choice: str = "auto"
    tool_rounds: int = DEFAULT_ROUNDS

    def check(self) -> AppSettings:
        """Raise UserError naming the first bad value (the runtime's own checks included)."""
        if self.theme not in THEMES:
            raise UserError(f"unknown theme {self.theme!r}")
        if self.n_ctx < 256:
            raise UserError(f"context size {self.n_ctx} is too small (at least 256)")
        if not 1 <= self.api_port <= 65535:
            raise UserError(f"API port {self.api_port} must be 1 to 65535")
        if self.tool_approval not in APPROVAL_MODES:
            modes = ", ".join(APPROVAL_MODES)
            raise UserError(f"unknown tool approval mode {self.tool_approval!r}: use one of {modes}")
        if self.tool_first_choice not in ("auto", "required"):
            raise UserError(f"unknown first tool choice {self.tool_first_choice!r}: auto or required")
        if not 1 <= self.tool_rounds <= 64:
            raise UserError(f"answers per turn with tools {self.tool_rounds} is out of range: 1 to 64")
        if self.draft_length < 0:
            raise UserError(f"draft length {self.draft_length} must be 0 (automatic) or more")
        SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)  # checked even if unused
        self.chat_options()
        self.engine_settings()
        return self

    def chat_options(self, parent: str | None = None) -> ChatOptions:
        """This request's options; `parent` pins a tier (regenerate at higher precision)."""
        return ChatOptions(
            level=self.level,
            preset=self.preset,
            parent=parent,
            no_spec=not self.speculation,
            k=self.draft_length or None,
            max_tokens=self.max_tokens,
            enable_thinking=thinking_option(self.thinking),
            thinking_budget=self.thinking_budget or None,
            sampling_overrides=(("seed", self.seed),) if self.seed >= 0 else (),
            sampling=None
            if self.model_sampling
            else SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k),
        )

    def own_sampling(self) -> tuple[str, ...]:
        """The sampling values the user set here, which win over a chat's persona's (runtime.chat.conversation),
        as the CLI's --temp does; none while the model's own sampling is used."""
        return () if self.model_sampling else ("temperature", "top_p", "top_k")

    def engine_settings(self) -> EngineSettings:
        if not math.isfinite(self.max_memory_gb) or self.max_memory_gb < 0:
            raise UserError(f"memory budget {self.max_memory_gb:g} GB must be 0 (no budget) or more")
        budget = int(self.max_memory_gb * 1e9) if self.max_memory_gb > 0 else None
        placement = PlacementSettings(mode=self.placement, max_memory_bytes=budget)
        draft_model = check_name(self.draft_model) if self.draft_model else None
        return EngineSettings(
            n_ctx=self.n_ctx, placement=placement, rpc=parse_endpoints(self.workers), draft_model=draft_model
        )


def load_settings(store: QSettings | None = None) -> AppSettings:
    """Saved settings; a missing, damaged or unreadable value falls back to its default, never stops the app."""
    store = store or QSettings(ORGANIZATION, APPLICATION)
    if store.status() != QSettings.Status.NoError:
        log.warning("settings %s: %s; using the defaults", store.fileName(), store.status().name)
    defaults = AppSettings()
    settings = defaults
    for f in fields(AppSettings):
        # Anything may come out of a damaged file (a list, a huge number, a Variant of an unknown type), and
        # the runtime's own checks may object in ways of their own: every failure only skips this value.
        try:
            raw = store.value(f.name)
            if raw is None:
                continue
            settings = replace(settings, **{f.name: _typed(raw, getattr(defaults, f.name))}).check()
        except Exception as e:
            log.debug("setting %s ignored: %s", f.name, e)
    return settings


def _typed(raw: Any, default: Any) -> Any:
    """`raw` as the type of `default`; ValueError or TypeError if it cannot be."""
    if isinstance(default, bool):  # QSettings' INI backend hands booleans back as "true"/"false"
        return raw if isinstance(raw, bool) else str(raw).lower() in ("true", "1")
    if isinstance(default, float):
        value = float(raw)
        if not math.isfinite(value):  # "nan" and "inf" parse, and then break every comparison downstream
            raise ValueError(f"{raw!r} is not a finite number")
        return value
    if isinstance(default, str) and isinstance(raw, list):  # INI reads an unquoted "a, b" as a list
        return ",".join(str(x).strip() for x in raw)
    return type(default)(raw)


def save_settings(settings: AppSettings, store: QSettings | None = None) -> str | None:
    """Save `settings`; None, or one line saying why they could not be (they stay in effect until exit)."""
    store = store or QSettings(ORGANIZATION, APPLICATION)
    for name, value in asdict(settings).items():
        store.setValue(name, value)
    store.sync()
    # status() keeps the first error met, reading included: a FormatError from a damaged file read at start
    # does not stop the write (the file is rewritten whole and clean); only an AccessError means it failed.
    if store.isWritable() and store.status() != QSettings.Status.AccessError:
        return None
    problem = f"the settings {store.fileName()} cannot be written; changes last until SpecQuant closes"
    log.warning("%s", problem)
    return problem
