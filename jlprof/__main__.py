"""``python -m jlprof`` runs the command line."""

import sys

from jlprof.cli import main

sys.exit(main())
