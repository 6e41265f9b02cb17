"""``python -m taskctl``: the same as the ``taskctl`` script."""

import sys

from taskctl.main import main

sys.exit(main())
