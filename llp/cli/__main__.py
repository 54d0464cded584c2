"""`python -m llp.cli`: the `llp` command."""

import sys

from llp.cli import main

sys.exit(main())
