"""Moved: runtime.engine.options, runtime.engine.answer and runtime.engine.summary (kept while callers move)."""

from runtime.engine.answer import *  # noqa: F403
from runtime.engine.answer import _speedup_facts  # noqa: F401
from runtime.engine.options import *  # noqa: F403
from runtime.engine.summary import *  # noqa: F403
