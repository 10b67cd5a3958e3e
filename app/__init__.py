"""The SpecQuant desktop window (PySide6). Only UI lives here; inference stays in `runtime/`."""
