"""``python -m validation`` -> :func:`validation.cli.main`."""

import sys

from validation.cli import main

sys.exit(main())
