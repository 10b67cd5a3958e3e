"""Personas: a name, a system prompt and sampling settings, picked per chat (#43; `specquant chat --persona`).

Not to be confused with the speed presets (`exact`, `fast`, `auto`...: runtime.plan.policy, `--preset`), which
choose tiers; a persona chooses what the assistant is told and how it samples. A few ship with SpecQuant; the
user's own live in `presets.json` in the config folder (runtime.paths; the file and its "presets" key keep the
name they had before personas were called so, so that saved ones keep loading), written atomically:

    {"presets": [{"name": "Reviewer", "system": "You review code...", "sampling": {"temperature": 0.2}}]}

A user persona with a shipped persona's name replaces it. A file that is not valid gives one line naming the
file and the entry at fault.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from runtime.atomic import write_text_atomic
from runtime.engine.options import ChatOptions, Message
from runtime.errors import UserError
from runtime.paths import config_dir, private_dir

FILE = "presets.json"
SAMPLING_RANGES = {"temperature": (0.0, 5.0), "top_p": (0.0, 1.0), "min_p": (0.0, 1.0), "top_k": (0, 1000)}
MAX_SYSTEM_CHARS = 20_000


@dataclass(frozen=True)
class Persona:
    name: str
    system: str
    sampling: tuple[tuple[str, float], ...] = ()  # (field of SamplingParams, value), applied over the model's
    shipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "system": self.system, "sampling": dict(self.sampling)}


SHIPPED = (
    Persona("Assistant", "You are a helpful assistant.", shipped=True),
    Persona(
        "Concise",
        "You are a helpful assistant. Answer in as few words as the question allows; no preamble, no summary.",
        (("temperature", 0.3),),
        shipped=True,
    ),
    Persona(
        "Coder",
        "You are an expert programmer. Answer with working code first, then a short explanation. Say which "
        "language and version the code needs, and point out anything that could fail.",
        (("temperature", 0.2),),
        shipped=True,
    ),
    Persona(
        "Teacher",
        "You are a patient teacher. Explain step by step in plain words, with one small example, and check "
        "the learner's understanding with a question at the end.",
        shipped=True,
    ),
    Persona(
        "Writer",
        "You are a careful writer and editor. Write clear, vivid prose; keep the user's voice when editing.",
        (("temperature", 0.9),),
        shipped=True,
    ),
)


def persona_file() -> Path:
    return config_dir() / FILE


def load_personas(path: Path | None = None) -> list[Persona]:
    """The shipped personas, then the user's (one replacing a shipped one keeps its place)."""
    path = path or persona_file()
    own = _read(path)
    out = {p.name.casefold(): p for p in SHIPPED}
    for p in own:
        out[p.name.casefold()] = p
    return list(out.values())


def find_persona(name: str, path: Path | None = None) -> Persona:
    personas = load_personas(path)
    for p in personas:
        if p.name.casefold() == name.strip().casefold():
            return p
    raise UserError(f"no persona {name!r}: choose from {', '.join(p.name for p in personas)}")


def save_persona(persona: Persona, path: Path | None = None) -> None:
    """Add or replace the user's persona of that name."""
    path = path or persona_file()
    checked = _persona({**persona.as_dict()}, str(path), 0)
    own = [p for p in _read(path) if p.name.casefold() != checked.name.casefold()] + [checked]
    _write(path, own)


def delete_persona(name: str, path: Path | None = None) -> bool:
    """Forget the user's persona `name` (a shipped one cannot be deleted; its replacement can)."""
    path = path or persona_file()
    own = _read(path)
    kept = [p for p in own if p.name.casefold() != name.strip().casefold()]
    if len(kept) == len(own):
        return False
    _write(path, kept)
    return True


def apply_persona(
    persona: Persona, messages: Sequence[Message], options: ChatOptions
) -> tuple[list[Message], ChatOptions]:
    """The chat with the persona's system prompt (a chat's own system message wins) and the options with its
    sampling under the request's own `sampling_overrides` (what the user set wins)."""
    chat = [dict(m) for m in messages]
    if persona.system and not (chat and chat[0]["role"] == "system"):
        chat.insert(0, {"role": "system", "content": persona.system})
    merged = dict(persona.sampling) | dict(options.sampling_overrides)
    return chat, replace(options, sampling_overrides=tuple(merged.items()))


def _read(path: Path) -> list[Persona]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the personas ({e})") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    entries = data.get("presets") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UserError(f'{path}: expected {{"presets": [...]}}')
    return [_persona(e, str(path), i) for i, e in enumerate(entries)]


def _persona(entry: Any, where: str, i: int) -> Persona:
    at = f"{where}: presets[{i}]"
    if not isinstance(entry, dict):
        raise UserError(f"{at} must be an object with a name and a system prompt")
    name, system, sampling = entry.get("name"), entry.get("system", ""), entry.get("sampling") or {}
    if not isinstance(name, str) or not name.strip() or len(name) > 80 or any(ch < " " for ch in name):
        raise UserError(f"{at}: the name must be 1-80 printable characters")
    if not isinstance(system, str) or len(system) > MAX_SYSTEM_CHARS:
        raise UserError(f"{at} ({name}): the system prompt must be text of at most {MAX_SYSTEM_CHARS} characters")
    if not isinstance(sampling, dict):
        raise UserError(f"{at} ({name}): sampling must be an object")
    pairs = []
    for key, value in sampling.items():
        if key not in SAMPLING_RANGES:
            raise UserError(f"{at} ({name}): unknown sampling setting {key!r}: use {', '.join(SAMPLING_RANGES)}")
        lo, hi = SAMPLING_RANGES[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not lo <= value <= hi or (key == "top_k" and value != int(value)):
            raise UserError(f"{at} ({name}): {key}={value!r} is out of range: {lo} to {hi}")
        pairs.append((key, int(value) if key == "top_k" else float(value)))
    return Persona(name.strip(), system, tuple(pairs))


def _write(path: Path, personas: list[Persona]) -> None:
    private_dir(path.parent)
    write_text_atomic(path, json.dumps({"presets": [p.as_dict() for p in personas]}, indent=2, ensure_ascii=False))
