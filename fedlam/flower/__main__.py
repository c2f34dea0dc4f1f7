"""``python -m fedlam.flower local ...`` (see :mod:`fedlam.flower.local`)."""

import sys

from fedlam.flower.local import main

sys.exit(main())
