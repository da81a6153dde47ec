"""``python -m refindex``: the same command line as the ``refindex`` script."""

import sys

from .cli import main

sys.exit(main())
