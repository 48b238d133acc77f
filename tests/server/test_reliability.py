"""The server extension in a real JupyterLab against files that used to freeze or break it.

Issue 46: a FIFO named like a profile blocked the server's event loop (every API hung), a
manifest holding 1e400 made the whole listing fail and NaN was sent as bare ``NaN``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from tests.server.profiles import make_run, nsys_export_bytes

pytest.importorskip("jupyterlab", reason="install the 'ui' extra: pip install -e .[ui]")

from tests.ui.lab import LabServer, start_lab, stop_lab


def _release(fifo: os.PathLike[str]) -> None:
    """Give a reader blocked on ``fifo`` its end of file (the old code's server stays alive)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # nobody is reading
        return
    os.close(fd)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("srvrel")
    root = base / "root"
    root.mkdir()
    export = nsys_export_bytes(base)
    os.mkfifo(root / "fifo.sqlite")
    os.mkfifo(root / "fifo.nsys-rep")
    make_run(root / "runs", "good", export, mtime=1_000_000)
    make_run(root / "runs", "huge", export, mtime=1_000_001)
    make_run(root / "runs", "nan", export, mtime=1_000_002)
    make_run(root / "runs", "fifo", export, mtime=1_000_003)
    huge = root / "runs" / "jlprof_runs" / "huge" / "jlprof_run.json"
    huge.write_text(huge.read_text().replace('"iterations": 3', '"iterations": 1e400'))
    nan = root / "runs" / "jlprof_runs" / "nan" / "jlprof_run.json"
    nan.write_text(nan.read_text().replace('"gpu_util_pct": 41.5', '"gpu_util_pct": NaN'))
    manifest = root / "runs" / "jlprof_runs" / "fifo" / "jlprof_run.json"
    manifest.unlink()
    os.mkfifo(manifest)
    lab = start_lab(root, base / "server.log")
    try:
        yield lab
    finally:
        for fifo in (root / "fifo.sqlite", root / "fifo.nsys-rep", manifest):
            _release(fifo)
        stop_lab(lab)


def get(server: LabServer, endpoint: str, timeout: float, **params: object) -> tuple[int, bytes]:
    url = f"{server.url}{endpoint}?{urllib.parse.urlencode(params)}"
    req = urllib.request.Request(url, headers={"Authorization": f"token {server.token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.mark.parametrize("name", ["fifo.sqlite", "fifo.nsys-rep", "runs/jlprof_runs/fifo"])
def test_a_fifo_never_blocks_the_server(server: LabServer, name: str) -> None:
    answers: list[tuple[int, bytes]] = []
    probe = threading.Thread(
        target=lambda: answers.append(get(server, "jlprof/profile", 60, path=name)), daemon=True
    )
    probe.start()
    probe.join(10)
    t0 = time.monotonic()
    try:
        status, _ = get(server, "api/status", 10)
    except OSError as err:  # the event loop is blocked: the server answers nothing
        pytest.fail(f"/api/status hung after GET /jlprof/profile?path={name}: {err}")
    finally:
        _release(server.root / name)
        if name.startswith("runs/"):
            _release(server.root / name / "jlprof_run.json")
    assert status == 200 and time.monotonic() - t0 < 10
    probe.join(10)
    [(code, body)] = answers
    reply = json.loads(body)
    if name.startswith("fifo."):
        assert code == 400 and "not a regular file" in reply["message"], reply
    else:
        assert code == 200 and "not a regular file" in reply["error"], reply


def test_listing_with_bad_manifests_is_valid_json_and_complete(server: LabServer) -> None:
    status, body = get(server, "jlprof/profiles", 30, path="runs", limit=500)
    assert status == 200, body[:500]
    page = json.loads(body, parse_constant=lambda c: pytest.fail(f"bare {c} in the JSON"))
    entries = {e["name"]: e for e in page["items"]}
    assert sorted(entries) == ["fifo", "good", "huge", "nan"]
    assert entries["good"]["headline"]["iterations"] == 3
    assert "iterations" not in entries["huge"]["headline"]  # 1e400: no number to show
    assert entries["huge"]["headline"]["gpu_util_pct"] == 41.5
    assert "gpu_util_pct" not in entries["nan"]["headline"]
    assert entries["nan"]["headline"]["iterations"] == 3
    assert "not a regular file" in entries["fifo"]["error"]
    status, body = get(server, "jlprof/profiles", 30, limit=500)  # the root: FIFOs not listed
    assert status == 200
    names = {e["name"] for e in json.loads(body)["items"]}
    assert "fifo.sqlite" not in names and "fifo.nsys-rep" not in names
