"""The jlprof server extension's REST API in a real Jupyter server (auth, confinement, paging)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest

from tests.server.profiles import make_run, nsys_export_bytes

pytest.importorskip("jupyterlab", reason="install the 'ui' extra: pip install -e .[ui]")

from tests.ui.lab import LabServer, start_lab, stop_lab


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("srv")
    root = base / "root"
    root.mkdir()
    export = nsys_export_bytes(base)
    make_run(root / "proj", "20261123-180000-ab12", export)
    for i in range(7):
        make_run(root / "many", f"r{i}", export, mtime=1_000_000 + i)
    (root / "bad").mkdir()
    (root / "bad" / "broken.sqlite").write_bytes(b"garbage, not SQLite")
    (root / "bad" / "notes.txt").write_text("x")
    (base / "outside").mkdir()
    (base / "outside" / "secret.nsys-rep").write_bytes(b"secret")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.nsys-rep").write_bytes(b"x")
    (root / "escape").symlink_to(base / "outside")
    (root / "escape.nsys-rep").symlink_to(base / "outside" / "secret.nsys-rep")
    lab = start_lab(root, base / "server.log")
    try:
        yield lab
    finally:
        stop_lab(lab)


def q(endpoint: str, **params: object) -> str:
    return f"jlprof/{endpoint}?{urllib.parse.urlencode(params)}"


def test_requires_authentication(server: LabServer) -> None:
    for url in (q("profiles"), q("profile", path="proj")):
        status, _ = server.api(url, token=False)
        assert status == 403, url
    status, body = server.api(q("profiles", path="proj"))
    assert status == 200, server.log_tail()
    assert [e["path"] for e in body["items"]] == ["proj/jlprof_runs/20261123-180000-ab12"]


def test_lists_run_with_headline(server: LabServer) -> None:
    status, body = server.api(q("profiles", path="proj"))
    assert status == 200
    entry = body["items"][0]
    assert entry["headline"]["iterations"] == 3 and entry["headline"]["gpu_util_pct"] == 41.5
    assert entry["database"] == "proj/jlprof_runs/20261123-180000-ab12/nsys_profile.sqlite"
    assert entry["open_dir"] == "proj"


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("../", 403),
        ("proj/../../", 403),
        ("/etc", 403),
        ("escape", 403),  # a symlink to a folder outside the root
        ("escape.nsys-rep", 403),
        ("missing", 404),
        (".hidden/x.nsys-rep", 404),  # hidden, as the contents API treats it
    ],
)
def test_paths_confined_to_root(server: LabServer, path: str, status: int) -> None:
    got, body = server.api(q("profiles", path=path))
    assert got == status, body
    got, body = server.api(q("profile", path=path))
    assert got == status, body
    assert "secret" not in str(body)


def test_root_listing_skips_links_out_of_root(server: LabServer) -> None:
    status, body = server.api(q("profiles", limit=500))
    assert status == 200
    paths = {e["path"] for e in body["items"]}
    assert not any(p.startswith("escape") for p in paths)
    assert "bad/broken.sqlite" in paths and body["total"] == len(paths) == 9


def test_bad_files_reported(server: LabServer) -> None:
    status, body = server.api(q("profile", path="bad/broken.sqlite"))
    assert status == 200 and body["error"] == "not a SQLite database"
    status, body = server.api(q("profile", path="bad/notes.txt"))
    assert status == 400 and "not a profile" in body["message"]
    status, body = server.api(q("profiles", offset="x"))
    assert status == 400 and "offset" in body["message"]


def test_pagination(server: LabServer) -> None:
    names: list[str] = []
    for offset in (0, 3, 6):
        status, body = server.api(q("profiles", path="many", offset=offset, limit=3))
        assert status == 200 and body["total"] == 7 and body["limit"] == 3
        names += [e["name"] for e in body["items"]]
    assert names == [f"r{i}" for i in reversed(range(7))]
