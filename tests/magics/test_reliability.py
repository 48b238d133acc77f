"""The magic's side of the reliability matrix (issue 22); no sidecar is started here.

Odd file names, a profile name with a folder part, empty report/format lists and a missing CUDA
API table through ``%dlprof --database``; the CLI and API sides are ``tests/test_reliability.py``.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest

import jlprof
from tests.fixtures.scenarios import cpu_only_db, rich_db


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return rich_db().write(tmp_path_factory.mktemp("good") / "rich.sqlite")


def test_odd_file_name(shell, export) -> None:
    cpu_only_db().write(shell.cwd / "run")  # what the unescaped URI opened
    shutil.copyfile(export, shell.cwd / "run#1.sqlite")
    out = shell.line('--database="run#1.sqlite" --output_path=odd --reports=kernel -o odd')
    assert "Traceback" not in out.stderr, out.stderr
    want = jlprof.load(export).report("kernel")
    pd.testing.assert_frame_equal(shell.ns["odd"].report("kernel"), want)
    assert len(pd.read_csv(shell.cwd / "odd" / "dlprof_kernel.csv")) == len(want)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--profile_name=../../escape", "--profile_name '../../escape' is not a plain file name"),
        ("--reports=bogus", "unknown report 'bogus'"),
        ("--formats=", "--formats is empty"),
        ("--reports=", "--reports is empty; choose from summary"),
        ("--formats=xml", "unknown format 'xml'"),
    ],
)
def test_options_refused_before_anything_runs(shell, export, option, message) -> None:
    before = sorted(p.name for p in shell.cwd.parent.iterdir())
    out = shell.line(f"--database={export} --output_path=refused {option}")
    assert message in out.stderr, out.stderr
    assert not (shell.cwd / "refused").exists()
    assert sorted(p.name for p in shell.cwd.parent.iterdir()) == before
    out = shell.cell(option, "print('never runs')")  # a cell too: refused before the sidecar
    assert message in out.stderr and "never runs" not in out.stdout
    assert shell.magics.session.sidecar is None


def test_no_cuda_api_table_is_a_warning(shell, export, tmp_path) -> None:
    db = Path(shutil.copyfile(export, tmp_path / "nort.sqlite"))
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    con.close()
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    out = shell.line(f"--database={db} -o nort")
    assert "no CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME)" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and shell.ns["nort"].report("kernel") is not None
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_kernel_status_network_line() -> None:
    from jlprof.magics.dlprof import network_line

    private = network_line({"private_network": True})
    assert "private network namespace" in private and "no network for the profiled code" in private
    st = {"private_network": False, "listeners": [("0.0.0.0", 41937, 20652, "nsys"),
                                                  ("127.0.0.1", 54931, 20652, "nsys")]}  # fmt: skip
    line = network_line(st)
    assert "listens on 0.0.0.0:41937 (pid 20652 nsys)" in line and "54931" not in line
    assert "no option to bind it to loopback" in line and line.startswith("network: the notebook's")
    only_local = {"private_network": False, "listeners": [("127.0.0.1", 5, 1, "nsys")]}
    assert "no TCP port of the sidecar listens beyond loopback" in network_line(only_local)


class _Kernel:
    """What of ipykernel's Kernel the comm forwarding uses, recording what it sends."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []
        self.iopub_socket = object()
        self.parent = {"header": {"msg_id": "the-notebook-cell"}}
        self.session = self

    def send(self, socket, kind, content, **kw) -> None:  # Session.send
        self.sent.append((socket, kind, content, kw))

    def get_parent(self, channel=None):
        return self.parent


def test_widget_comm_messages_of_the_sidecar_reach_the_frontend(monkeypatch) -> None:
    """A sidecar's comm_open/comm_msg/comm_close (tqdm.auto's ipywidgets models) go out on the
    notebook kernel's IOPub as the cell's, buffers included, so their views display."""
    import IPython

    from jlprof.magics.dlprof import forward

    kernel = _Kernel()
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": kernel})())
    state = {"_model_name": "FloatProgressModel", "value": 0}
    forward({"header": {"msg_type": "comm_open"}, "metadata": {"version": "2.1.0"},
             "content": {"comm_id": "c1", "target_name": "jupyter.widget",
                         "data": {"state": state}}, "buffers": [b"\x01"]})  # fmt: skip
    forward({"header": {"msg_type": "comm_msg"}, "metadata": {},
             "content": {"comm_id": "c1", "data": {"method": "update"}}})  # fmt: skip
    forward({"header": {"msg_type": "comm_close"}, "content": {"comm_id": "c1", "data": {}}})
    assert [k for _s, k, _c, _kw in kernel.sent] == ["comm_open", "comm_msg", "comm_close"]
    socket, _kind, content, kw = kernel.sent[0]
    assert socket is kernel.iopub_socket and content["data"]["state"] is state
    assert kw["parent"] is kernel.parent and kw["ident"] == b"comm-c1"
    assert kw["buffers"] == [b"\x01"] and kw["metadata"] == {"version": "2.1.0"}


class _FakeSidecar:
    """Records how the session starts sidecars (no nsys)."""

    started: ClassVar[list[bool]] = []

    def __init__(self, *, nsys_opts, cwd, say, isolate_network) -> None:
        self.isolate_network = isolate_network
        self.notes = ["nsys 2022.4.2.1 records no NVTX ranges of the nvtx package 0.2.17"]
        self.up = False

    def start(self) -> None:
        self.up = True
        _FakeSidecar.started.append(self.isolate_network)

    def alive(self) -> bool:
        return self.up

    def shutdown(self, timeout: float = 60.0) -> None:
        self.up = False


def test_isolate_network_applies_when_the_sidecar_starts(monkeypatch) -> None:
    from jlprof.errors import JlprofError
    from jlprof.magics import run

    monkeypatch.setattr(run, "Sidecar", _FakeSidecar)
    _FakeSidecar.started = []
    said: list[str] = []
    session = run.Session()
    car = session.ensure("", False, said.append, isolate_network=True)
    assert _FakeSidecar.started == [True] and car.isolate_network
    # the start-up note (the user's NVTX not recorded) is said at once, as a problem (stderr)
    assert said == car.notes and isinstance(said[0], run.Problem)
    assert session.ensure("", False, said.append) is car  # not given: the running one
    assert session.ensure("", False, said.append, isolate_network=True) is car
    with pytest.raises(JlprofError, match="already runs with --isolate_network=True"):
        session.ensure("", False, said.append, isolate_network=False)
    car.up = False  # it died: the next one comes back as it was
    session.ensure("", False, said.append)
    assert _FakeSidecar.started == [True, True]
    session.shutdown()  # shut down on purpose: the next one is the default again
    session.ensure("", False, said.append)
    assert _FakeSidecar.started == [True, True, False]


def test_output_folder_held_by_another_run(shell, export) -> None:
    """A folder another run is writing (here: held by this test) is refused with one line and
    left as it was; the notebook cell fails. Free again, the same line writes the reports."""
    from jlprof import outputs

    folder = shell.cwd / "held"
    folder.mkdir()
    with outputs.folder_lock(folder):
        shell.line(f"--database={export} --output_path=held --reports=kernel -o held")
        assert shell.failure == (
            "jlprof: another jlprof run is writing held: wait for it to end, or choose another "
            "--output_path"
        )
        assert list(folder.iterdir()) == []
    shell.line(f"--database={export} --output_path=held --reports=kernel -o held")
    assert shell.failure is None and (folder / "dlprof_kernel.csv").is_file()


def test_failed_line_magic_fails_the_cell(shell) -> None:
    """A jlprof error fails the notebook cell (Run All stops) with its one line, shown once."""
    out = shell.line("--database=nowhere.sqlite")
    assert shell.failure == (
        "jlprof: nowhere.sqlite: no such file (give the .sqlite, .nsys-rep or .jlprof)"
    )
    assert "nowhere" not in out.stderr  # not printed besides
