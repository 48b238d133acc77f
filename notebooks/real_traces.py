"""The real third-party traces the repository carries, for the notebooks in this folder.

The exports live xz-compressed in ``tests/data/real/<name>/`` (see its README.md for what each
covers and its licence); ``real_data_dir()`` decompresses them once into ``<repo>/.cache/real``
and returns that folder, laid out as ``<name>/<file>.sqlite``. The notebooks run with this
folder as their working directory, so ``from real_traces import real_data_dir`` finds this module.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the tests package holds the one decompressing helper
    sys.path.insert(0, str(REPO))

from tests.fixtures.scenarios import real_data_dir  # noqa: E402

__all__ = ["real_data_dir"]
