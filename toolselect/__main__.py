"""`python -m toolselect`: the `toolselect` command, for where the entry point is not on PATH."""

import sys

from toolselect.cmd.main import main

sys.exit(main())
