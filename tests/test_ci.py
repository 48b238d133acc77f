"""``.ci/enable-non-free``: the apt sources edit CI makes on a fresh machine, tried on a copy."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "enable-non-free"

DEB822 = textwrap.dedent(
    """\
    Types: deb
    # http://snapshot.debian.org/archive/debian/20250520T000000Z
    URIs: http://deb.debian.org/debian
    Suites: bookworm bookworm-updates
    Components: main
    Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

    Types: deb
    URIs: http://deb.debian.org/debian-security
    Suites: bookworm-security
    Components: main
    Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
    """
)
THIRD_PARTY_DEB822 = textwrap.dedent(
    """\
    Types: deb
    URIs: https://download.docker.com/linux/debian
    Suites: bookworm
    Components: stable

    Types: deb
    URIs: https://deb.nodesource.com/node_20.x
    Suites: nodistro
    Components: main
    """
)
CLASSIC = textwrap.dedent(
    """\
    deb http://deb.debian.org/debian bookworm main
    deb-src http://deb.debian.org/debian bookworm main
    deb http://security.debian.org/debian-security bookworm-security main non-free-firmware
    deb [signed-by=/k.gpg] http://mirror.example.com/debian/ bookworm-updates main contrib
    # deb http://deb.debian.org/debian bookworm main
    deb https://deb.nodesource.com/node_20.x nodistro main
    """
)


def run(apt_dir: Path) -> list[str]:
    out = subprocess.run(
        ["bash", str(SCRIPT), str(apt_dir)], capture_output=True, text=True, check=True
    ).stdout
    return out.splitlines()


def test_adds_contrib_non_free_once(tmp_path: Path) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(DEB822)
    (parts / "other.sources").write_text(THIRD_PARTY_DEB822)
    (tmp_path / "sources.list").write_text(CLASSIC)

    changed = run(tmp_path)
    assert sorted(changed) == sorted(
        [str(parts / "debian.sources"), str(tmp_path / "sources.list")]
    )
    components = [
        ln for ln in (parts / "debian.sources").read_text().splitlines() if ln.startswith("Comp")
    ]
    assert components == ["Components: main contrib non-free"] * 2
    assert (parts / "other.sources").read_text() == THIRD_PARTY_DEB822
    assert (tmp_path / "sources.list").read_text().splitlines() == [
        "deb http://deb.debian.org/debian bookworm main contrib non-free",
        "deb-src http://deb.debian.org/debian bookworm main contrib non-free",
        "deb http://security.debian.org/debian-security bookworm-security main non-free-firmware"
        " contrib non-free",
        "deb [signed-by=/k.gpg] http://mirror.example.com/debian/ bookworm-updates main contrib"
        " non-free",
        "# deb http://deb.debian.org/debian bookworm main",
        "deb https://deb.nodesource.com/node_20.x nodistro main",
    ]
    assert (parts / "debian.sources.jlprof-ci.bak").read_text() == DEB822

    assert run(tmp_path) == []  # idempotent


def test_empty_apt_dir(tmp_path: Path) -> None:
    assert run(tmp_path) == []
