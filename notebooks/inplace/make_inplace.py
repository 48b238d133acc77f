"""Write ``inplace.ipynb``: the in-place mode's nbval notebook (kernel ``jlprof-inplace``).

    JUPYTER_PATH=jupyter-config python notebooks/inplace/make_inplace.py --execute

It is run by ``tests/magics/test_inplace.py`` (nbval on the ``jlprof-inplace`` kernel), not by
``make test``'s nbval run, which uses the current environment's plain kernel.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

HERE = Path(__file__).parent
IGNORE = {"tags": ["nbval-ignore-output"]}
CELLS = [
    ("%load_ext jlprof", {}),
    ("%dlprof kernel status", IGNORE),
    (
        "import time\n\nimport nvtx\n\n"
        "steps = 5  # defined before profiling, used in the profiled cell\n\n\n"
        "def step():\n"
        '    with nvtx.annotate("train_step"), nvtx.annotate("optimizer_step"):\n'
        "        time.sleep(0.002)",
        {},
    ),
    (
        "%%dlprof --key_node=optimizer_step --reports=summary,kernel\n"
        'for i in range(steps):\n    step()\nprint("steps", i + 1)',
        IGNORE,
    ),
    ('print("instances", _dlprof.iterations.instances)', {}),
    (
        'ops = _dlprof.report("detail")\n'
        'print(sorted(set(ops["Op Name"])), sorted(ops["No. Calls"]))',
        {},
    ),
    ("%dlprof start --key_node=optimizer_step -o spanned", IGNORE),
    ("for _ in range(3):\n    step()", {}),
    ("step()\nstep()", {}),
    ("%dlprof stop", IGNORE),
    ('print("spanned instances", spanned.iterations.instances)', {}),
    ('print("state kept", steps, i)', {}),
]


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "jlprof-inplace",
        "display_name": "Python 3 (jlprof, in place)",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(src, metadata=dict(md)) for src, md in CELLS]
    return nb


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--execute", action="store_true", help="run it and store the outputs")
    args = ap.parse_args()
    nb = build()
    if args.execute:
        from nbclient import NotebookClient

        with tempfile.TemporaryDirectory() as tmp:  # run folders land there, not in the repo
            NotebookClient(nb, timeout=300, resources={"metadata": {"path": tmp}}).execute()
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
            if "nbval-ignore-output" in cell.metadata.get("tags", []):
                cell.outputs = []  # live widgets, inline BokehJS: megabytes nbval never compares
        nb.metadata.pop("widgets", None)  # their saved state, for the outputs just dropped
    nbformat.write(nb, HERE / "inplace.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
