"""``python -m sluice_bench NAME ...``: the same as ``sluice-bench NAME ...``."""

import sys

from sluice_bench.cli import main

sys.exit(main())
