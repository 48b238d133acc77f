"""``%%dlprof --ncu``: the cell re-run under Nsight Compute (docs/kernels.md). No GPU here: a
stand-in ``ncu`` writes a real report where ncu would, so the script, the command line, the
join and the messages are checked; the real ncu run is not."""

from __future__ import annotations

import lzma
import shlex
import stat
import sys
from pathlib import Path

import pytest

from jlprof.errors import JlprofError
from jlprof.magics import options
from jlprof.magics.run import RunResult, analyse, ncu_rerun
from jlprof.nsys import ncu
from tests.test_ncu import DATA, _cutlass_export


def parse(shell, line, cell=True):
    from jlprof.magics.dlprof import parse_line

    return options.from_namespace(parse_line(shell.magics.dlprof, line), cell=cell)


def test_ncu_option_values(shell):
    assert parse(shell, "--ncu").ncu == "top5"
    assert parse(shell, "--ncu=top2").ncu == "top2"
    assert parse(shell, "--ncu gemm -o p").ncu == "gemm"
    assert parse(shell, "").ncu is None
    with pytest.raises(JlprofError, match="use it on %%dlprof around"):
        parse(shell, "--database=x.sqlite --ncu", cell=False)
    with pytest.raises(JlprofError, match="not with --setup"):
        parse(shell, "--setup --ncu")


@pytest.fixture
def cutlass(tmp_path):
    rep = tmp_path / "report.ncu-rep"
    rep.write_bytes(lzma.decompress((DATA / "report.ncu-rep.xz").read_bytes()))
    launches = ncu.read_ncu_report(rep)
    return rep, _cutlass_export(tmp_path / "cutlass.sqlite", launches), launches


def test_ncu_rerun_with_a_stand_in_ncu(tmp_path, cutlass):
    pytest.importorskip("ncu_report")
    rep, db, launches = cutlass
    opts = options.RunOptions(ncu="top1")
    result = RunResult(folder=tmp_path / "run", database=db)
    result.folder.mkdir()
    result.profile, _ = analyse(db, opts)
    fake = tmp_path / "ncu"  # copies the real report to ncu's --export path, logs its argv
    fake.write_text(f"#!{sys.executable}\nimport shutil, sys\n"
                    f"open({str(tmp_path / 'argv')!r}, 'w').write(repr(sys.argv))\n"
                    "out = sys.argv[sys.argv.index('--export') + 1] + '.ncu-rep'\n"
                    f"shutil.copy({str(rep)!r}, out)\n")  # fmt: skip
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    said = []
    out = ncu_rerun(result, opts, ["import torch", "x = 1"], "train()", said.append,
                    ncu=str(fake))  # fmt: skip
    assert out == result.folder / "ncu_cell.ncu-rep" and out.is_file()
    script = result.folder / "ncu_cell.py"
    assert script.read_text() == "import torch\n\nx = 1\n\ntrain()\n"
    argv = eval((tmp_path / "argv").read_text())
    assert argv[-2:] == [sys.executable, str(script)]
    # top1: the fused GEMM has most GPU time (2 x 26 us against 2 x 2 x 11 us)
    assert argv[argv.index("--kernel-name") + 1] == "regex:^(Kernel)$"
    assert any("10-100x slower" in str(m) for m in said)
    k = result.profile.report("kernel").set_index("Long Kernel Name")
    assert k.loc[launches[2].kernel, "Measured Duration (ns)"] == 25984.0
    assert k.loc[launches[2].kernel, "TC Verdict"] == "measured"


def test_ncu_rerun_without_ncu_keeps_the_command(tmp_path, cutlass, monkeypatch):
    _, db, _ = cutlass
    opts = options.RunOptions(ncu="gemm|conv")
    result = RunResult(folder=tmp_path / "run", database=db)
    result.folder.mkdir()
    result.profile, _ = analyse(db, opts)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ncu_rerun(result, opts, [], "train()", lambda m: None) is None
    (w,) = result.warnings
    assert w.startswith("ncu is not on PATH: nothing re-run.")
    cmd = shlex.split(w.split("Nsight Compute: ")[1].split("; then")[0])
    assert cmd[0] == "ncu" and "regex:gemm|conv" in cmd
    assert f"--ncu_report={result.folder / 'ncu_cell.ncu-rep'}" in w
    assert Path(result.folder / "ncu_cell.py").read_text() == "train()\n"


def test_the_session_keeps_its_setup_cells_for_ncu():
    """Setup cells that ran are kept (the --ncu script starts with them); a failed one is not,
    and a new sidecar starts with none."""
    from types import SimpleNamespace

    from jlprof.magics.run import Session, run_setup

    class FakeSidecar:
        def execute(self, code, **_kw):
            return SimpleNamespace(status="error" if "raise" in code else "ok")

        def shutdown(self, **_kw):
            pass

    s = Session()
    s.ensure = lambda *_a, **_kw: FakeSidecar()
    opts = options.RunOptions(setup=True)
    for code in ("import torch", "raise ValueError", "model = 1"):
        run_setup(s, opts, code, lambda *_: None, lambda *_: None)
    assert s.setup_cells == ["import torch", "model = 1"]
    s.sidecar = FakeSidecar()
    s.shutdown()
    assert s.setup_cells == []
