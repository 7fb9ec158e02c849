"""``python -m hetsim``: the command line (hetsim.cli)."""

import sys

from hetsim.cli import main

sys.exit(main())
