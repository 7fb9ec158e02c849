"""``python -m hetsim``: the command line (hetsim.cli.main)."""

import sys

from hetsim.cli.main import main

sys.exit(main())
