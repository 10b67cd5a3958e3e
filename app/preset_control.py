"""The system-prompt presets a chat may answer with (#43): the shipped ones and the user's presets.json, as
the CLI's `--system-preset` offers them, and the one a chat's answer applies (under the user's own sampling
when the settings say so). A presets.json that cannot be read leaves the shipped presets offered.
"""

from __future__ import annotations

from app.settings import AppSettings
from runtime.engine.system_presets import SHIPPED, SystemPreset, load_presets
from runtime.errors import UserError


class PresetControl:
    """`presets`: what the Preset box offers, as last read."""

    def __init__(self) -> None:
        self.presets: list[SystemPreset] = list(SHIPPED)

    def reload(self) -> str:
        """Read the presets again; "" or why presets.json could not be read (one line)."""
        try:
            self.presets = load_presets()
        except UserError as e:
            self.presets = list(SHIPPED)
            return str(e)
        return ""

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.presets]

    def for_answer(self, name: str | None, settings: AppSettings) -> tuple[SystemPreset | None, str]:
        """The chat's preset `name` as its answer applies it, and the name of a chosen one that no longer
        exists ("" when it does, or none was chosen)."""
        if name is None:
            return None, ""
        preset = next((p for p in self.presets if p.name.casefold() == name.casefold()), None)
        if preset is None:
            return None, name
        return settings.under_own_sampling(preset), ""
