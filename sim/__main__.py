"""``python -m sim``: run simulated engines (same options as ``syshax sim``)."""

from __future__ import annotations

import sys

from sim.command import main

if __name__ == "__main__":
    sys.exit(main())
