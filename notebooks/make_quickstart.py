"""Write ``quickstart.ipynb`` (its cells live here, reviewable as code) and execute it in place.

    python notebooks/make_quickstart.py     # rewrites and re-runs the notebook (needs nsys)

The executed outputs are what nbval compares on every test run (``notebooks/sanitize.cfg``
blanks timings, paths and run-folder names).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent

CELLS = [
    (
        "markdown",
        """# jlprof quickstart: profile a training loop from the notebook

`%%dlprof` runs a cell in a **sidecar kernel** started under Nsight Systems (`nsys`), captures just
that cell, and shows DLProf's reports. The loop here is a small CPU "training loop" annotated with
the `nvtx` package (see `examples/train_loop.py`): `dataloader`, forward and backward ops under
`/model/...`, and `optimizer_step` once per step: the **key node** that marks iterations.""",
    ),
    ("code", "%load_ext jlprof"),
    (
        "markdown",
        """`--setup` cells run in the sidecar **without** capture: imports, model, data. The
sidecar keeps its state between cells, like any kernel.""",
    ),
    (
        "code",
        """%%dlprof --setup
import os, sys, tempfile
import numpy as np
sys.path.insert(0, os.path.abspath("../examples"))
from train_loop import LAYERS, batch, step

rng = np.random.default_rng(0)
weights = [rng.standard_normal((64, 64), dtype=np.float32) * 0.1 for _ in LAYERS]
data = os.path.join(tempfile.mkdtemp(), "data.bin")
with open(data, "wb") as fh:
    fh.write(rng.standard_normal(64 * 64, dtype=np.float32).tobytes())
print("model and data ready:", len(weights), "layers")""",
    ),
    (
        "markdown",
        """Now the profiled cell. Its output streams live; when it ends, jlprof finalises
the nsys report, exports SQLite, analyses it and writes the reports to a new folder under
`jlprof_runs/`. The result is bound to `_dlprof` (choose another name with `-o NAME`).""",
    ),
    (
        "code",
        """%%dlprof --key_node=optimizer_step --reports=summary,detail,iteration --formats=csv,json
for i in range(20):
    loss = step(batch(rng, data, 64), weights, 0.01, slow=(i == 0))
print(f"trained 20 steps, final loss {loss:.4f}")""",
    ),
    ("markdown", "The profile is a Python object: every DLProf report is a DataFrame."),
    (
        "code",
        """detail = _dlprof.report("detail")
detail[["Op Name", "No. Calls"]].sort_values("Op Name").reset_index(drop=True)""",
    ),
    (
        "code",
        """# re-aggregate over steady iterations (the first had a hiccup), without profiling again
its = _dlprof.summary(iter_start=2, iter_stop=18)["Iterations"]
first, last = its["Start Iteration"], its["Stop Iteration"]
print("key node:", _dlprof.key_node, "| iterations:", its["Total Iterations"])
print("aggregated:", its["Aggregated Iterations"], f"({first}..{last})")""",
    ),
    (
        "markdown",
        """Each run's folder holds the raw nsys files, the reports and `jlprof_run.json`.
`%dlprof --database=FILE` re-analyses any of them later with new options.""",
    ),
    (
        "code",
        """from jlprof import runs

run = runs.list_runs()[-1]
manifest = runs.read_manifest(run)
print({k: manifest[k] for k in ("format", "status", "key_node", "iterations", "database")})
print(sorted(p.name for p in run.iterdir() if p.suffix in (".csv", ".json")))""",
    ),
    ("code", "%dlprof kernel shutdown"),
]


# The profiled cell displays the live dashboard (inline BokehJS, widget models with random ids):
# nbval does not compare it (tests/magics and tests/widgets check that output), and the saved file
# keeps only its text so the notebook stays small.
LIVE_TAG = "nbval-ignore-output"


def _light(output: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A display output reduced to its text/plain form; streams as they are."""
    if output.output_type not in ("display_data", "execute_result"):
        return output
    text = output.get("data", {}).get("text/plain", "")
    return nbformat.v4.new_output("display_data", data={"text/plain": text})


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for kind, src in CELLS:
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(make(src))
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def main() -> int:
    nb = build()
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("%%dlprof --key_node"):
            cell.metadata["tags"] = [LIVE_TAG]
    NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(HERE)}}).execute()
    for cell in nb.cells:  # ids are random per build: stable ones keep diffs small
        cell.id = f"cell-{nb.cells.index(cell)}"
        if LIVE_TAG in cell.metadata.get("tags", []):
            light = [_light(o) for o in cell.outputs]
            cell.outputs = [o for o in light if o.output_type == "stream" or o.data["text/plain"]]
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, HERE / "quickstart.ipynb")
    print("wrote", HERE / "quickstart.ipynb", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
