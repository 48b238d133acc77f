"""`jlprof view PROFILE`: what it accepts (database, export, run folder), its errors (missing
or corrupt profile, port in use), --export-html written whole, and a server that answers on
loopback only. The page itself is tested in Chromium in tests/ui/test_viewer_ui.py."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from jlprof import runs, viewer
from jlprof.errors import InputError, OutputError
from tests.fixtures.loops import small_training_export


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_training_export(tmp_path_factory.mktemp("view") / "loop.sqlite", steps=6)


def _view(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jlprof", "view", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def non_loopback_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if not loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
        except OSError:
            return None
        addr = s.getsockname()[0]
    return None if addr.startswith("127.") else addr


def start_viewer(profile: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    """``jlprof view`` as a subprocess, returned once it serves (it prints its URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jlprof", "view", str(profile), "--port", str(port), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                if r.status == 200:
                    return proc
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"jlprof view exited: {proc.stdout.read()}") from None
            time.sleep(0.3)
    stop_viewer(proc)
    raise AssertionError("jlprof view did not answer in 120 s")


def stop_viewer(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_export_html_writes_one_whole_file(export: Path, tmp_path: Path) -> None:
    out = tmp_path / "viewer.html"
    r = _view(str(export), "--export-html", str(out))
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout
    page = out.read_text(encoding="utf-8")
    assert page.rstrip().endswith("</html>")
    assert "Top 10 GPU Ops" in page
    assert [p.name for p in tmp_path.iterdir()] == ["viewer.html"]  # no temporary left


def test_export_html_failure_leaves_the_old_file(
    export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "viewer.html"
    out.write_text("old", encoding="utf-8")
    profile = viewer.load_profile(export)

    def broken(self: Path, *_a: object, **_k: object) -> None:
        Path.write_bytes(self, b"<!DOCTYPE html> half a page")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", broken)
    with pytest.raises(OutputError, match="no space left"):
        viewer.export_html(profile, out, "loop")
    monkeypatch.undo()
    assert out.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["viewer.html"]


def test_export_html_into_a_missing_folder_is_one_clear_error(export: Path, tmp_path) -> None:
    r = _view(str(export), "--export-html", str(tmp_path / "no" / "such" / "v.html"))
    assert r.returncode == 2
    assert "no such folder for --export-html" in r.stderr
    assert "Traceback" not in r.stderr


def test_aggregation_options_come_from_the_option_table(export: Path, tmp_path: Path) -> None:
    from jlprof.options import CLI, OPTIONS

    ap = viewer.build_parser()
    flags = {f for a in ap._actions for f in a.option_strings}
    for o in OPTIONS:
        if o.name in viewer.VIEW_OPTIONS:
            assert set(o.flags) <= flags  # same spellings (aliases too) as `jlprof`
            assert ap.get_default(o.name) == o.kwargs(CLI)["default"]
    out = tmp_path / "range.html"
    r = _view(str(export), "--iter_start", "2", "--iter_stop", "4", "--export-html", str(out))
    assert r.returncode == 0, r.stderr
    assert "Static export: iterations 2..4" in out.read_text(encoding="utf-8")
    r = _view(str(export), "--key_node", "nope", "--export-html", str(out))
    assert r.returncode == 2 and "not an op name or op ID" in r.stderr


def test_a_run_folder_shows_its_database(export: Path, tmp_path: Path) -> None:
    folder = runs.new_run_folder(tmp_path)
    shutil.copy(export, folder / "loop.sqlite")
    runs.write_manifest(
        folder,
        runs.manifest(profile_name="loop", database=folder / "loop.sqlite", nsys_report=None,
                      status="ok"),
    )  # fmt: skip
    assert viewer.resolve(folder) == folder / "loop.sqlite"
    out = tmp_path / "run.html"
    r = _view(str(folder), "--export-html", str(out))
    assert r.returncode == 0, r.stderr
    assert folder.name in out.read_text(encoding="utf-8")  # the title names the run


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.sqlite", "no such file or folder"),
        (lambda d: d, "without jlprof_run.json: not a jlprof run folder"),
        (lambda d: (d / "x.sqlite").write_bytes(os.urandom(4096)) and d / "x.sqlite",
         "is not a SQLite database"),
    ],
    ids=["missing", "plain-folder", "corrupt"],
)  # fmt: skip
def test_bad_profiles_are_one_clear_error(tmp_path: Path, make, message: str) -> None:
    r = _view(str(make(tmp_path)))
    assert r.returncode == 2
    assert message in r.stderr
    assert r.stderr.startswith("jlprof: error:") and "Traceback" not in r.stderr


def test_a_failed_run_folder_says_why(tmp_path: Path) -> None:
    folder = runs.new_run_folder(tmp_path)
    runs.write_manifest(
        folder,
        runs.manifest(profile_name="x", database=None, nsys_report=None,
                      status="capture_empty", error="no CUDA work was captured"),
    )  # fmt: skip
    with pytest.raises(InputError, match="no CUDA work was captured"):
        viewer.resolve(folder)


def test_port_in_use_is_one_clear_error(export: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _view(str(export), "--port", str(port))
    assert r.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in r.stderr
    assert "--port" in r.stderr and "Traceback" not in r.stderr


def test_signed_sessions_need_a_secret(export: Path) -> None:
    env_key = os.environ.pop("BOKEH_SECRET_KEY", None)
    try:
        r = _view(str(export), "--port", str(_free_port()), "--session-ids", "signed")
    finally:
        if env_key is not None:
            os.environ["BOKEH_SECRET_KEY"] = env_key
    assert r.returncode == 2
    assert "BOKEH_SECRET_KEY" in r.stderr


def test_serves_on_loopback_only(export: Path) -> None:
    port = _free_port()
    proc = start_viewer(export, port)
    try:
        with urllib.request.urlopen(f"http://localhost:{port}/", timeout=30) as r:
            page = r.read().decode()
        assert "jlprof view" in page  # the document's title
        assert "cdn.bokeh.org" not in page  # BokehJS from the server itself
        other = non_loopback_address()
        if other is None:
            pytest.skip("this machine has no non-loopback address to try")
        with pytest.raises(OSError), socket.create_connection((other, port), timeout=5):
            pass
    finally:
        stop_viewer(proc)


def test_on_loopback_it_prints_the_ssh_tunnel_and_address(
    export: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 43 item 8: bound to 127.0.0.1 (still the default), `jlprof view` says how to reach
    it from another machine; bound elsewhere it says nothing more."""
    assert viewer.build_parser().parse_args([str(export)]).address == "127.0.0.1"

    class Loop:
        def start(self) -> None:
            raise KeyboardInterrupt

        def add_callback(self, *a) -> None:
            pass

    class FakeServer:
        port = 8123
        io_loop = Loop()

        def start(self) -> None:
            pass

    monkeypatch.setattr(viewer, "load_profile", lambda *a: object())
    monkeypatch.setattr(viewer, "make_server", lambda *a: FakeServer())
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-box")
    assert viewer.main([str(export)]) == 0
    out = capsys.readouterr().out
    assert "ssh -L 8123:localhost:8123 gpu-box" in out
    assert "--address 0.0.0.0" in out
    assert viewer.main([str(export), "--address", "10.1.2.3"]) == 0
    out = capsys.readouterr().out
    assert "http://10.1.2.3:8123/" in out and "ssh -L" not in out
