"""`build_installer.py`'s parts: the llama.cpp flavour check, the build environment, the PyInstaller
bundle, and one module per operating system's installer (linux, windows, macos)."""
