"""`python -m app`: the same as the `specquant-app` command."""

import sys

from app.main import main

sys.exit(main())
