"""Drop the outputs of ``# NBVAL_IGNORE_OUTPUT`` cells from executed example notebooks.

Those cells display live widgets: their saved outputs (inline BokehJS, a static rendering,
random model ids) are megabytes that nbval never compares. Run after re-executing:
``python notebooks/strip_live_outputs.py notebooks/dashboard.ipynb``.
"""

from __future__ import annotations

import sys

import nbformat


def strip(path: str) -> int:
    nb = nbformat.read(path, as_version=4)
    n = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT"):
            n += len(cell.outputs)
            cell.outputs = []
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return n


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"{p}: {strip(p)} output(s) removed")
