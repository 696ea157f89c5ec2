"""``python -m lizard_local`` is the ``lizard-local`` command."""

import sys

from lizard_local.cli import main

sys.exit(main())
