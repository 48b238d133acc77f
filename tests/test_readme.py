"""Every ```python snippet of README.md runs, so the README cannot drift from the code again.

The rule, per snippet (in README order):

* **Plain Python** runs for real, all snippets in one namespace like the cells of a notebook, in a
  temporary folder that holds ``run.sqlite``: a training-loop export built by the test fixtures
  (``optimizer_step`` and ``train_step`` ranges), standing in for the user's profile.
* **IPython snippets** (any line starting with ``%``) run in an ``InteractiveShell`` with
  ``%load_ext jlprof`` really loaded. Every ``%dlprof``/``%%dlprof`` line goes through jlprof's
  own option parsing and checks (an unknown option, a bad value or a stray word fails the
  test), but what the magic would then do (start a sidecar kernel under nsys, profile the cell,
  re-analyse the run folder the snippet names) is recorded instead of done: the snippets use
  the user's model and data. The body of a ``%%dlprof`` cell must compile as Python.
  ``%dlprof?`` (help) runs for real.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from jlprof.magics import options as opt
from tests.fixtures.loops import small_training_export

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets() -> list[str]:
    return FENCE.findall(README.read_text(encoding="utf-8"))


def is_ipython(snippet: str) -> bool:
    return any(line.lstrip().startswith("%") for line in snippet.splitlines())


def test_the_readme_has_both_kinds_of_snippet() -> None:
    found = snippets()
    assert sum(map(is_ipython, found)) >= 3 and sum(not is_ipython(s) for s in found) >= 2


def test_python_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_training_export(tmp_path / "run.sqlite", steps=45)  # iterations 5..40 exist
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__readme__"}
    ran = 0
    for i, code in enumerate(snippets()):
        if is_ipython(code):
            continue
        exec(compile(code, f"README.md python snippet {i + 1}", "exec"), ns)
        ran += 1
    assert ran >= 2
    assert (tmp_path / "run.jlprof").exists()  # p.save("run.jlprof") ran
    assert ns["p"].key_node == "train_step"  # d.set_key_node("train_step") re-aggregated


def test_ipython_snippets_parse_and_check_their_options(monkeypatch, tmp_path) -> None:
    ip = InteractiveShell.instance()
    monkeypatch.chdir(tmp_path)
    ip.run_line_magic("load_ext", "jlprof")
    magics = ip.magics_manager.registry["DlprofMagics"]
    dispatched: list[tuple[opt.RunOptions, str | None]] = []
    monkeypatch.setattr(magics, "_dispatch", lambda o, cell: dispatched.append((o, cell)))
    checked = 0
    for code in filter(is_ipython, snippets()):
        if code.startswith("%%dlprof"):
            ast.parse(code.split("\n", 1)[1])  # the cell body is Python
        with capture_output() as out:
            res = ip.run_cell(code)
        assert res.success, f"{code}\n{out.stdout}\n{out.stderr}\n{res.error_in_exec!r}"
        assert "UsageError" not in out.stderr and "jlprof:" not in out.stderr, out.stderr
        checked += 1
    assert checked >= 3
    setup, captured, database, status = (o for o, _ in dispatched)
    assert setup.setup and captured.key_node == "optimizer_step"
    assert captured.reports == ["summary", "detail", "kernel"]
    assert database.database is not None and database.iter_start == 5
    assert status.kernel == "status"
    assert os.getcwd() == str(tmp_path)
