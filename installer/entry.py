"""PyInstaller's entry point: one program that is the window as `specquant-app` and the command line as
`specquant` (a link to it on Linux and macOS, a console-mode copy on Windows), so the bundle holds its
Python modules once."""

import multiprocessing
import sys
from pathlib import Path

if __name__ == "__main__":
    # The converter quantizes in a spawned child, which in a bundle is this program again: freeze_support()
    # makes it that child (and nothing else) when started so.
    multiprocessing.freeze_support()
    if Path(sys.argv[0]).stem.lower() == "specquant":
        from commands.main import main
    else:
        from app.main import main
    sys.exit(main())
