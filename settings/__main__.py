"""``python -m settings check [--run-config ...]``: see :mod:`settings.check`."""

import sys

from settings.check import main

sys.exit(main())
