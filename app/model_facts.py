"""What the window knows of a cached model without loading it: whether it thinks aloud (its chat template
has thought markers, runtime.engine.thinking), read from its smallest tier's GGUF header. The Chat menu's
"Let the model think" is offered only where it does something (#63: ticked and enabled for any model)."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from runtime.engine import thinking
from runtime.models.cache import ModelDir, cache_root

log = logging.getLogger("specquant.app")


def can_think(model: str) -> bool:
    """Whether `model` (a cached model's name) thinks aloud; False when it cannot be read."""
    if not model:
        return False
    path = ModelDir(cache_root(), model).tier_path("q4_k_m")
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return False
    return _template_thinks(path, stamp)


@functools.lru_cache(maxsize=16)
def _template_thinks(path: Path, stamp: int) -> bool:  # `stamp`: a tier converted again is read again
    from runtime.decode.llama_backend import file_metadata

    try:
        template = file_metadata(path).get("tokenizer.chat_template")
    except Exception as e:  # a damaged header: the switch is not offered, and the answer says what is wrong
        log.debug("cannot read the chat template of %s: %s", path, e)
        return False
    return thinking.syntax_for(template if isinstance(template, str) else None) is not None
