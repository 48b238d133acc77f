"""Real notebooks (nbclient, a real ipykernel) using ``%%dlprof`` with the real sidecar and nsys.

Two notebooks run at the same time: A goes through the normal day (setup, profiled cells, rich
output, an interrupt from the notebook kernel), B loses its sidecar (``os._exit``) and carries
on. Running them together is also the "two notebooks at once" check: separate sidecars, folders.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time

import nbformat
import pytest
from nbclient import NotebookClient

from jlprof import runs
from tests.ui.conftest import write_notebook

pytestmark = [pytest.mark.nsys, pytest.mark.slow]

SETUP = """%%dlprof --setup
import nvtx, time
def step():
    with nvtx.annotate("train_step"):
        with nvtx.annotate("optimizer_step"):
            time.sleep(0.002)
counter = 0
print("setup ok")"""

NOTEBOOK_A = [
    "%load_ext jlprof",
    SETUP,
    "%%dlprof --key_node=optimizer_step --reports=summary,kernel\n"
    "for i in range(5):\n    step()\n    counter += 1\nprint('steps', counter)",
    "print('instances', _dlprof.iterations.instances)",
    "%%dlprof -o rich\nfrom IPython.display import HTML, display\n"
    "display(HTML('<b>rich from the sidecar</b>'))\nstep()",
    "%dlprof kernel status",
    "%%dlprof -o stopped\nwhile True:\n    step()\n    counter += 1",  # interrupted by the test
    "%%dlprof --setup\nprint('after interrupt', counter > 5)",
    "print('stopped instances', stopped.iterations.instances > 0)",
    "%dlprof kernel status",
]
NOTEBOOK_B = [
    "%load_ext jlprof",
    SETUP.replace("counter = 0", "kept = 'yes'"),
    "%dlprof kernel status",
    "%%dlprof\nimport os\nos._exit(7)",
    "print('notebook kernel fine', 6 * 7)",
    "%%dlprof --setup\nprint('kept' in globals())",
    "%dlprof kernel status",
]


NOTEBOOK_C = [  # no cell may fail here: nbconvert stops at the failed %%dlprof cell
    "%load_ext jlprof",
    "%%dlprof --setup\nimport nvtx",
    "%%dlprof -o failed\nwith nvtx.annotate('optimizer_step'):\n    pass\nraise ValueError('boom')",
    "print('never reached')",
]


def tag_raises(path, *indices: int) -> None:
    """Mark cells expected to fail (nbclient then carries on past them)."""
    nb = nbformat.read(path, as_version=4)
    for i in indices:
        nb.cells[i].metadata["tags"] = ["raises-exception"]
    nbformat.write(nb, path)


def failure(cell) -> str | None:
    """The error output a failed cell ends with, as text (None when the cell did not fail)."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    return "\n".join(errors[-1]["traceback"]) if errors else None


def text(cell) -> str:
    """Everything a cell showed as text: streams, text/plain, text/html, its error."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        if out.get("output_type") == "error":
            parts.append("\n".join(out["traceback"]))
        for mime in ("text/plain", "text/html"):
            if mime in out.get("data", {}):
                parts.append(out["data"][mime])
    return "".join(parts)


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory, need_nsys):
    a_dir, b_dir = tmp_path_factory.mktemp("nb_a"), tmp_path_factory.mktemp("nb_b")
    tag_raises(
        write_notebook(b_dir, "b.ipynb", NOTEBOOK_B),
        NOTEBOOK_B.index("%%dlprof\nimport os\nos._exit(7)"),
    )
    runner_b = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
         "--ExecutePreprocessor.timeout=240", "--output", "b_out.ipynb", "b.ipynb"],
        cwd=b_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    nb_a = nbformat.read(write_notebook(a_dir, "a.ipynb", NOTEBOOK_A), as_version=4)
    nb_a.cells[6].metadata["tags"] = ["raises-exception"]  # the interrupted cell fails
    client = NotebookClient(nb_a, timeout=120, resources={"metadata": {"path": str(a_dir)}})
    with client.setup_kernel():
        for index, cell in enumerate(nb_a.cells):
            timer = None
            if "while True" in cell.source:
                # the user presses "interrupt the kernel" (SIGINT to the notebook kernel's group)
                timer = threading.Timer(6.0, lambda: asyncio.run(client.km.interrupt_kernel()))
                timer.start()
            try:
                client.execute_cell(cell, index)
            finally:
                if timer is not None:
                    timer.cancel()
    b_log, _ = runner_b.communicate(timeout=300)
    assert runner_b.returncode == 0, b_log[-3000:]
    nb_b = nbformat.read(b_dir / "b_out.ipynb", as_version=4)
    return (a_dir, nb_a), (b_dir, nb_b)


def test_a_normal_day_state_reports_and_rich_output(notebooks):
    (a_dir, nb), _ = notebooks
    cells = [text(c) for c in nb.cells]
    assert "setup ok" in cells[1]
    assert "steps 5" in cells[2] and "jlprof: profile ok" in cells[2]
    assert "key node <code>optimizer_step</code> · 6 iterations" in cells[2]  # the HTML summary
    assert "instances 5" in cells[3]
    rich = [o for o in nb.cells[4].outputs if "text/html" in o.get("data", {})]
    assert any("<b>rich from the sidecar</b>" in o["data"]["text/html"] for o in rich)
    widgets = [o for o in nb.cells[2].outputs
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]  # fmt: skip
    assert widgets, "a progress bar is shown in notebooks"
    folders = runs.list_runs(a_dir)
    assert len(folders) == 3  # the profiled cells, one folder each
    first = json.loads((folders[0] / "jlprof_run.json").read_text())
    assert first["status"] == "ok" and first["iterations"] == 6
    assert (folders[0] / "dlprof_kernel.csv").exists()


def test_a_interrupt_stops_the_capture_and_keeps_the_sidecar(notebooks):
    (_, nb), _ = notebooks
    cells = [text(c) for c in nb.cells]
    assert failure(nb.cells[6]).startswith("jlprof: interrupted: the capture was stopped")
    assert [i for i, c in enumerate(nb.cells) if failure(c)] == [6]  # only that cell failed
    assert "after interrupt True" in cells[7]  # the sidecar kept its state
    assert "stopped instances True" in cells[8]
    pid = cells[5].split("kernel pid ")[1].split(",")[0]
    assert f"kernel pid {pid}," in cells[9]  # same sidecar process before and after


def test_b_sidecar_death_leaves_the_notebook_kernel_alone(notebooks):
    _, (b_dir, nb) = notebooks
    cells = [text(c) for c in nb.cells]
    assert "the sidecar kernel died" in failure(nb.cells[3])  # the cell failed, said once
    assert cells[3].count("the sidecar kernel died") == 1
    assert "notebook kernel fine 42" in cells[4]
    assert "previous sidecar kernel died" in cells[5] and "False" in cells[5]
    assert "sidecar: running" in cells[6]
    [folder] = (b_dir / "jlprof_runs").iterdir()
    assert json.loads((folder / "jlprof_run.json").read_text())["status"] == "analysis_failed"


def test_two_notebooks_had_separate_sidecars_and_folders(notebooks):
    (a_dir, nb_a), (b_dir, nb_b) = notebooks
    pid_a = text(nb_a.cells[5]).split("kernel pid ")[1].split(",")[0]
    pid_b = text(nb_b.cells[2]).split("kernel pid ")[1].split(",")[0]
    assert pid_a != pid_b
    runs_a = {p.name for p in (a_dir / "jlprof_runs").iterdir()}
    runs_b = {p.name for p in (b_dir / "jlprof_runs").iterdir()}
    assert runs_a and runs_b and not runs_a & runs_b


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_a_widget_made_in_the_sidecar_reaches_the_frontend(tmp_path, need_nsys):
    """A tqdm.auto bar in a sidecar cell: the frontend (nbclient keeps what it is sent, as
    JupyterLab's widget manager does) gets its models and their updates, not only a view of a
    model it never heard of ("Error displaying widget")."""
    pytest.importorskip("tqdm")
    cells = [
        "%load_ext jlprof",
        "%%dlprof --setup\nfrom tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='epoch'):\n"
        "    pass",
        "%dlprof kernel shutdown",
    ]
    nb = nbformat.read(write_notebook(tmp_path, "w.ipynb", cells), as_version=4)
    NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    views = [o["data"][WIDGET_VIEW]["model_id"] for o in nb.cells[1].outputs
             if WIDGET_VIEW in o.get("data", {})]  # fmt: skip
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert views and all(v in state for v in views), (views, list(state))
    bars = [m["state"] for m in state.values() if m["model_name"] == "FloatProgressModel"]
    assert [(b["value"], b["max"]) for b in bars] == [(3, 3)]  # the updates arrived too


def test_input_in_the_sidecar_is_asked_in_the_notebooks_frontend(tmp_path, need_nsys):
    """A frontend that takes input (JupyterLab): the profiled code's input() prompt reaches it
    through the notebook's kernel, and the answer goes back to the sidecar."""
    import queue

    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        kc.execute_interactive("%load_ext jlprof", timeout=60)
        msg_id = kc.execute(
            "%%dlprof --setup\nprint('hello', input('your name? '))", allow_stdin=True
        )
        prompts, out = [], []
        reply, idle = None, False
        deadline = time.monotonic() + 120
        while reply is None or not idle:
            assert time.monotonic() < deadline, (prompts, out)
            with contextlib.suppress(queue.Empty):
                req = kc.get_stdin_msg(timeout=0.05)
                prompts.append(req["content"]["prompt"])
                kc.input("Ada")
            with contextlib.suppress(queue.Empty):
                msg = kc.get_iopub_msg(timeout=0.05)
                if msg["parent_header"].get("msg_id") == msg_id:
                    if msg["header"]["msg_type"] == "stream":
                        out.append(msg["content"]["text"])
                    idle = idle or msg["content"].get("execution_state") == "idle"
            with contextlib.suppress(queue.Empty):
                got = kc.get_shell_msg(timeout=0.05)
                if got["parent_header"].get("msg_id") == msg_id:
                    reply = got["content"]
        assert reply["status"] == "ok" and prompts == ["your name? "]
        assert "hello Ada\n" in "".join(out)
        kc.execute_interactive("%dlprof kernel shutdown", timeout=60)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_failed_profiled_cell_stops_nbconvert(tmp_path, need_nsys):
    """A %%dlprof cell whose code raised fails: nbconvert stops there, after the analysis."""
    write_notebook(tmp_path, "c.ipynb", NOTEBOOK_C)
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
         "--ExecutePreprocessor.timeout=240", "--output", "c_out.ipynb", "c.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "the cell raised ValueError: boom; the profile covers what ran" in proc.stderr
    assert "never reached" not in proc.stdout + proc.stderr
    [folder] = (tmp_path / "jlprof_runs").iterdir()  # what ran was analysed
    assert json.loads((folder / "jlprof_run.json").read_text())["status"] == "ok"
