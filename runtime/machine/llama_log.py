"""Route llama.cpp's log into Python `logging` (logger "llama.cpp"), through `llama_log_set`.

Never llama-cpp-python's `verbose=False`, which redirects the process's stdout/stderr while a model loads
and so swallows other threads' output. The last error lines are kept, so failures can say why.
"""

from __future__ import annotations

import ctypes
import logging
import re
from collections import deque

logger = logging.getLogger("llama.cpp")

# ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the previous line's level)
_LEVELS = {0: logging.INFO, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_CONT = 5
# What a model load reports about its weights: the tensor types and the buffers that hold them.
_LOAD_FACT = re.compile(
    r"llama_model_loader: - type\s+(?P<type>\w+):|load_tensors:\s+(?P<buffer>\S+) model buffer size"
)


class _LogSink:
    """Joins llama.cpp's partial lines (level CONT) and forwards whole lines to `logging`."""

    def __init__(self) -> None:
        self.level = logging.INFO
        self.buffer = ""
        self.errors: deque[str] = deque(maxlen=8)
        # Set while a decode is being aborted on purpose (a Stop, a client gone): llama.cpp then reports
        # "failed to decode" at error level, which is no error to the user.
        self.aborting = False
        self.load_facts: deque[str] = deque(maxlen=64)  # "type:q4_K", "buffer:CPU_REPACK", newest last
        self.load_count = 0  # facts seen so far: a load reads the ones that came after its start

    def facts_since(self, count: int) -> list[str]:
        """The load facts logged after `load_count` was `count`."""
        new = self.load_count - count
        return list(self.load_facts)[-new:] if new > 0 else []

    def feed(self, level: int, text: str) -> None:
        if level != _CONT:
            self.level = _LEVELS.get(level, logging.DEBUG)
        self.buffer += text
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            line = line.strip()
            if not line:
                continue
            level = logging.DEBUG if self.aborting and self.level >= logging.ERROR else self.level
            if level >= logging.ERROR:
                self.errors.append(line)
            fact = _LOAD_FACT.search(line)
            if fact:
                self.load_facts.append(f"type:{fact['type']}" if fact["type"] else f"buffer:{fact['buffer']}")
                self.load_count += 1
            logger.log(level, "%s", line)

    def last(self) -> str:
        return self.errors[-1] if self.errors else ""


_sink = _LogSink()
_callback = None  # the ctypes callback must outlive every call llama.cpp makes to it


def route_llama_log() -> _LogSink:
    """Install the callback once per process (importing llama_cpp installs its own stderr printer)."""
    global _callback
    if _callback is None:
        import llama_cpp

        @llama_cpp.llama_log_callback
        def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            _sink.feed(level, text.decode("utf-8", errors="replace"))

        _callback = _on_log
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    return _sink
