"""The extension's in-place mode reads the kernel's state from environment variables that the
Python side sets: the names in labextension/src/mode.ts must be the Python constants, and its
expression must evaluate (in Python) to the state each combination means."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jlprof.magics import inplace
from jlprof.nsys import session

MODE_TS = Path(__file__).resolve().parents[2] / "labextension" / "src" / "mode.ts"


def _expression() -> str:
    text = MODE_TS.read_text()
    body = re.search(r"STATE_EXPRESSION =\n(.*?);\n", text, re.S)
    assert body, "STATE_EXPRESSION not found in mode.ts"
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body.group(1)))


def test_mode_ts_uses_the_python_names() -> None:
    expr = _expression()
    assert f"'{session.SESSION_ENV}'" in expr
    assert f"'{inplace.PROVISIONER_ENV}'" in expr
    assert "%dlprof enable" in MODE_TS.read_text()
    assert "enable" in inplace.COMMANDS


@pytest.mark.parametrize(
    ("env", "state"),
    [
        ({}, "cannot-enable"),
        ({inplace.PROVISIONER_ENV: "1"}, "can-enable"),
        ({inplace.PROVISIONER_ENV: "1", session.SESSION_ENV: "jlprof-x"}, "in-place"),
        ({session.SESSION_ENV: "jlprof-x"}, "in-place"),
    ],
)
def test_state_expression_in_python(monkeypatch: pytest.MonkeyPatch, env: dict, state: str) -> None:
    monkeypatch.delenv(inplace.PROVISIONER_ENV, raising=False)
    monkeypatch.delenv(session.SESSION_ENV, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert eval(_expression()) == state  # the expression the kernel evaluates
    assert inplace.active() == (state == "in-place")
