"""The personas a chat may answer with (#43): the shipped ones and the user's presets.json, as the CLI's
`--persona` offers them; a chat's conversation (runtime.chat.conversation) finds and applies the one it chose.
A presets.json that cannot be read leaves the shipped personas offered.
"""

from __future__ import annotations

from runtime.engine.personas import SHIPPED, Persona, load_personas
from runtime.errors import UserError


class PersonaControl:
    """`personas`: what the Persona box offers, as last read."""

    def __init__(self) -> None:
        self.personas: list[Persona] = list(SHIPPED)

    def reload(self) -> str:
        """Read the personas again; "" or why presets.json could not be read (one line)."""
        try:
            self.personas = load_personas()
        except UserError as e:
            self.personas = list(SHIPPED)
            return str(e)
        return ""

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.personas]
