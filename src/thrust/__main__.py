"""`python -m thrust` is the `thrust` command, for an environment whose scripts folder is not on PATH."""

from __future__ import annotations

import sys

from thrust.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
