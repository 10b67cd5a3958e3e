"""`python -m commands`: the `specquant` command line without its launcher."""

import sys

from commands.main import main

sys.exit(main())
