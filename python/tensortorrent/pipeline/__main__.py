"""`python -m tensortorrent.pipeline DIR`: one rank of an exported pipeline (see runner.py)."""

import sys

from .runner import main

sys.exit(main())
