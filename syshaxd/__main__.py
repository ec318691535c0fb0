"""``python -m syshaxd``: the daemon, as the ``syshaxd`` command runs it."""

import sys

from syshaxd.service import main

sys.exit(main())
