"""``python -m prefixscope.cli``: the prefixscope command."""

import sys

from prefixscope.cli import main

sys.exit(main())
