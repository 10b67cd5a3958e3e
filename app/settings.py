"""The window's settings: one dataclass, saved with QSettings, turned into the runtime's options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from PySide6.QtCore import QSettings

from runtime.api_schema import DEFAULT_PORT
from runtime.engine import ChatOptions, EngineSettings
from runtime.errors import UserError
from runtime.placement import PlacementSettings
from runtime.rpc import parse_endpoints
from runtime.sampling import LLAMA_DEFAULTS, SamplingParams

ORGANIZATION = "SpecQuant"
APPLICATION = "SpecQuant"
THEMES = ("system", "light", "dark")


@dataclass(frozen=True)
class AppSettings:
    preset: str = ChatOptions.preset
    allow_lossy: bool = False
    level: str = "auto"  # auto, or a pinned level
    speculation: bool = True
    draft_length: int = 0  # 0: the controller picks k each cycle; N: always draft N tokens
    model_sampling: bool = True  # the model's recommended sampling; else the three values below
    temperature: float = LLAMA_DEFAULTS.temperature
    top_p: float = LLAMA_DEFAULTS.top_p
    top_k: int = LLAMA_DEFAULTS.top_k
    max_tokens: int = ChatOptions.max_tokens
    n_ctx: int = EngineSettings.n_ctx
    placement: str = PlacementSettings.mode  # one of runtime.placement.PLACEMENT_MODES
    max_memory_gb: float = 0.0  # memory the model may use; 0: what is available, less a margin
    workers: str = ""  # HOST:PORT[,HOST:PORT…] of `specquant worker`s that may run the parent (runtime.rpc)
    theme: str = "system"
    highlight_draft: bool = False
    speed_chart: bool = True  # the status bar's live speed sparkline (View menu)
    zoom: int = 0  # points added to the system font size (Ctrl+ / Ctrl-)
    model: str = ""  # the model last chatted with
    api_server: bool = False  # serve the OpenAI-compatible API on 127.0.0.1 (runtime.server)
    api_port: int = DEFAULT_PORT

    def check(self) -> AppSettings:
        """Raise UserError naming the first bad value (the runtime's own checks included)."""
        if self.theme not in THEMES:
            raise UserError(f"unknown theme {self.theme!r}")
        if self.n_ctx < 256:
            raise UserError(f"context size {self.n_ctx} is too small (at least 256)")
        if not 1 <= self.api_port <= 65535:
            raise UserError(f"API port {self.api_port} must be 1 to 65535")
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
            allow_lossy=self.allow_lossy,
            parent=parent,
            no_spec=not self.speculation,
            k=self.draft_length or None,
            max_tokens=self.max_tokens,
            sampling=None
            if self.model_sampling
            else SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k),
        )

    def engine_settings(self) -> EngineSettings:
        if self.max_memory_gb < 0:
            raise UserError(f"memory budget {self.max_memory_gb:g} GB must be 0 (no budget) or more")
        budget = int(self.max_memory_gb * 1e9) if self.max_memory_gb > 0 else None
        placement = PlacementSettings(mode=self.placement, max_memory_bytes=budget)
        return EngineSettings(n_ctx=self.n_ctx, placement=placement, rpc=parse_endpoints(self.workers))


def load_settings(store: QSettings | None = None) -> AppSettings:
    """Saved settings; a missing or damaged value falls back to its default, never stops the app."""
    store = store or QSettings(ORGANIZATION, APPLICATION)
    defaults = AppSettings()
    values: dict[str, Any] = {}
    for f in fields(AppSettings):
        raw = store.value(f.name)
        if raw is None:
            continue
        default = getattr(defaults, f.name)
        try:
            if isinstance(default, bool):  # QSettings' INI backend hands booleans back as "true"/"false"
                values[f.name] = raw if isinstance(raw, bool) else str(raw).lower() in ("true", "1")
            else:
                values[f.name] = type(default)(raw)
        except (TypeError, ValueError):
            continue
    settings = defaults
    for name, value in values.items():
        candidate = replace(settings, **{name: value})
        try:
            settings = candidate.check()
        except UserError:
            continue
    return settings


def save_settings(settings: AppSettings, store: QSettings | None = None) -> None:
    store = store or QSettings(ORGANIZATION, APPLICATION)
    for name, value in asdict(settings).items():
        store.setValue(name, value)
    store.sync()
