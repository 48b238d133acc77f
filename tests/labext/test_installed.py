"""The installed package registers both halves: `jupyter labextension list` shows jlprof
enabled and OK (the CI smoke test of the prebuilt extension), and the server extension loads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("jupyterlab", reason="install the 'ui' extra: pip install -e .[ui]")


def _jupyter(*args: str, tmp_path) -> str:
    env = dict(os.environ)
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_PLATFORM_DIRS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _line(text: str, name: str) -> str:
    return next((ln for ln in text.splitlines() if ln.split()[:1] == [name]), "")


def test_labextension_listed_enabled_ok(tmp_path) -> None:
    text = _jupyter("labextension", "list", tmp_path=tmp_path)
    line = _line(text, "jlprof")
    assert "enabled" in line and "OK" in line and "(python, jlprof)" in line, text


def test_server_extension_enabled(tmp_path) -> None:
    text = _jupyter("server", "extension", "list", tmp_path=tmp_path)
    assert "enabled" in _line(text, "jlprof.server"), text
    validated = [ln for ln in text.splitlines() if "jlprof.server" in ln and "OK" in ln]
    assert validated, text
