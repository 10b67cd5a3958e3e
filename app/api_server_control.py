"""The local API server's lifetime in the window: started, stopped or moved to another port when the settings
say so, on the window's engine thread (one queue for the window's answers and the API's), answering with the
window's current model and options. Off by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from runtime.errors import UserError
from runtime.models.cache import DEMO_NAME

if TYPE_CHECKING:
    from app.settings import AppSettings
    from runtime.api.server import BackgroundServer, Defaults
    from runtime.engine.thread import EngineThread


class ApiServerControl:
    """`server` while it runs; `settings()` (the window's current ones) is read on the server's thread for each
    request."""

    def __init__(self, engine: EngineThread, settings: Callable[[], AppSettings]) -> None:
        self.engine, self.settings = engine, settings
        self.server: BackgroundServer | None = None

    @property
    def url(self) -> str | None:
        return self.server.url if self.server is not None else None

    def sync(self, port: int | None) -> str:
        """Serve on `port` (None: not at all); "" or why the server did not start (a port in use)."""
        if self.server is not None and self.server.service.config.port != port:
            self.stop()
        if port is None or self.server is not None:
            return ""
        from runtime.api.server import BackgroundServer, ServeConfig, Service

        try:
            self.server = BackgroundServer(Service(self.engine, self._defaults, ServeConfig(port=port)))
        except UserError as e:
            return f"The local API server did not start: {e}"
        return ""

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _defaults(self) -> Defaults:
        """What a request that names no model or options gets: the window's current choices."""
        from runtime.api.server import Defaults

        s = self.settings()
        return Defaults(s.model or DEMO_NAME, s.engine_settings(), s.chat_options())
