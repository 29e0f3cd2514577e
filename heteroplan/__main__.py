"""``python -m heteroplan``: the ``heteroplan`` command."""

import sys

from heteroplan.cli import main

sys.exit(main())
