"""System-prompt presets: a name, a system prompt and sampling settings, picked per chat (#43).

Not to be confused with the speculation presets (`exact`, `paper`, `auto`: runtime.plan.policy), which choose
tiers; these choose what the assistant is told and how it samples. A few ship with SpecQuant; the user's own
live in `presets.json` in the config folder (runtime.paths), written atomically:

    {"presets": [{"name": "Reviewer", "system": "You review code...", "sampling": {"temperature": 0.2}}]}

A user preset with a shipped preset's name replaces it. A file that is not valid gives one line naming the
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
class SystemPreset:
    name: str
    system: str
    sampling: tuple[tuple[str, float], ...] = ()  # (field of SamplingParams, value), applied over the model's
    shipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "system": self.system, "sampling": dict(self.sampling)}


SHIPPED = (
    SystemPreset("Assistant", "You are a helpful assistant.", shipped=True),
    SystemPreset(
        "Concise",
        "You are a helpful assistant. Answer in as few words as the question allows; no preamble, no summary.",
        (("temperature", 0.3),),
        shipped=True,
    ),
    SystemPreset(
        "Coder",
        "You are an expert programmer. Answer with working code first, then a short explanation. Say which "
        "language and version the code needs, and point out anything that could fail.",
        (("temperature", 0.2),),
        shipped=True,
    ),
    SystemPreset(
        "Teacher",
        "You are a patient teacher. Explain step by step in plain words, with one small example, and check "
        "the learner's understanding with a question at the end.",
        shipped=True,
    ),
    SystemPreset(
        "Writer",
        "You are a careful writer and editor. Write clear, vivid prose; keep the user's voice when editing.",
        (("temperature", 0.9),),
        shipped=True,
    ),
)


def preset_file() -> Path:
    return config_dir() / FILE


def load_presets(path: Path | None = None) -> list[SystemPreset]:
    """The shipped presets, then the user's (one replacing a shipped one keeps its place)."""
    path = path or preset_file()
    own = _read(path)
    out = {p.name.casefold(): p for p in SHIPPED}
    for p in own:
        out[p.name.casefold()] = p
    return list(out.values())


def find_preset(name: str, path: Path | None = None) -> SystemPreset:
    presets = load_presets(path)
    for p in presets:
        if p.name.casefold() == name.strip().casefold():
            return p
    raise UserError(f"no system preset {name!r}: choose from {', '.join(p.name for p in presets)}")


def save_preset(preset: SystemPreset, path: Path | None = None) -> None:
    """Add or replace the user's preset of that name."""
    path = path or preset_file()
    checked = _preset({**preset.as_dict()}, str(path), 0)
    own = [p for p in _read(path) if p.name.casefold() != checked.name.casefold()] + [checked]
    _write(path, own)


def delete_preset(name: str, path: Path | None = None) -> bool:
    """Forget the user's preset `name` (a shipped one cannot be deleted; its replacement can)."""
    path = path or preset_file()
    own = _read(path)
    kept = [p for p in own if p.name.casefold() != name.strip().casefold()]
    if len(kept) == len(own):
        return False
    _write(path, kept)
    return True


def apply_preset(
    preset: SystemPreset, messages: Sequence[Message], options: ChatOptions
) -> tuple[list[Message], ChatOptions]:
    """The chat with the preset's system prompt (a chat's own system message wins) and the options with its
    sampling under the request's own `sampling_overrides` (what the user set wins)."""
    chat = [dict(m) for m in messages]
    if preset.system and not (chat and chat[0]["role"] == "system"):
        chat.insert(0, {"role": "system", "content": preset.system})
    merged = dict(preset.sampling) | dict(options.sampling_overrides)
    return chat, replace(options, sampling_overrides=tuple(merged.items()))


def _read(path: Path) -> list[SystemPreset]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the presets ({e})") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    entries = data.get("presets") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UserError(f'{path}: expected {{"presets": [...]}}')
    return [_preset(e, str(path), i) for i, e in enumerate(entries)]


def _preset(entry: Any, where: str, i: int) -> SystemPreset:
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
    return SystemPreset(name.strip(), system, tuple(pairs))


def _write(path: Path, presets: list[SystemPreset]) -> None:
    private_dir(path.parent)
    write_text_atomic(path, json.dumps({"presets": [p.as_dict() for p in presets]}, indent=2, ensure_ascii=False))
