"""The one way to hold an engine: what answers chats, whichever wrapper it runs in.

- `runtime.engine.engine.Engine`: the tiers loaded in this process.
- `runtime.engine.process.EngineProcess`: an Engine in a child process (answers on a worker, whose loss
  ggml answers by aborting the process that holds it).
- `runtime.engine.thread.EngineThread`: an Engine (or EngineProcess) on one thread with a queue, shared by
  the window and the API.

All three are `ChatEngine`s; the first two also hold one model (`LoadedEngine`). Each subclasses ChatEngine,
implements `stream_chat` only and inherits its `chat`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from runtime.engine.answer import Answer, Chunk, collect
from runtime.engine.options import ChatOptions, Message

if TYPE_CHECKING:
    from runtime.engine.options import EngineSettings
    from runtime.machine.hardware import Inventory
    from runtime.machine.rpc import WorkerProbe
    from runtime.models.cache import ModelDir


@runtime_checkable
class ChatEngine(Protocol):
    """Answers chats: a stream of Chunks (the last has done=True), or the whole Answer. An engine subclasses it
    and writes `stream_chat`; `chat` is written here once, for all of them."""

    def stream_chat(
        self, messages: Sequence[Message], options: ChatOptions | None = None, cancel: threading.Event | None = None
    ) -> Iterator[Chunk]: ...

    def chat(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None = None,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Answer:
        """The whole answer to `messages` (what `stream_chat` streams, collected); `on_text` sees each piece."""
        return collect(self.stream_chat(messages, options, cancel), on_text)

    def close(self) -> bool | None: ...  # EngineThread says whether its thread ended in time


@runtime_checkable
class LoadedEngine(ChatEngine, Protocol):
    """A ChatEngine for one model with fixed settings (an Engine, here or in a child process)."""

    model: ModelDir
    settings: EngineSettings
    manifest: dict[str, Any]
    hardware: Inventory
    workers: list[WorkerProbe]

    def stream_chat(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None = None,
        cancel: threading.Event | None = None,
        *,
        on_reading: Callable[[int, float | None], None] | None = None,
    ) -> Iterator[Chunk]:
        """As ChatEngine's; `on_reading(tokens, read_rate)` once the prompt is built: the tokens still to read
        and the machine's last measured reading speed (tokens per second; None before it is known)."""
        ...

    @property
    def calibrated(self) -> bool: ...

    def calibration(self) -> dict[str, Any] | None: ...

    def reset_caches(self) -> None: ...

    def take_notice(self) -> str | None:
        """A line for the user about where the last answer ran, once (a worker that was down)."""
        ...

