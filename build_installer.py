#!/usr/bin/env python3
"""Build SpecQuant's installer for this platform: a PyInstaller bundle of `specquant-app` and `specquant`,
then a Linux .tar.gz (and AppImage), a Windows Inno Setup script (and setup .exe), or a macOS .app and .dmg.

    python build_installer.py [--out DIR] [--with-demo-model] [--name NAME]

The parts live in the `installer` package; docs/installers.md, "Building installers", explains the options.
"""

import sys

try:
    from installer.build import main
except ModuleNotFoundError as e:  # a bare Python: everything else goes into the build environment it makes
    needs = f"it needs {e.name} in this Python: pip install platformdirs filelock"
    print(f"build_installer.py: error: {needs}", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main())
