"""``python -m prefixscope``: the prefixscope command (as ``python -m prefixscope.cli``)."""

import sys

from prefixscope.cli import main

sys.exit(main())
