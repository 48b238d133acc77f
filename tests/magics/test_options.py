"""Option parsing and checks of ``%%dlprof``: every mistake is caught before anything runs."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jlprof.errors import JlprofError
from jlprof.magics import options
from jlprof.reports import REPORTS


def test_unknown_option_prints_usage(shell):
    out = shell.line("--bogus_option=1")
    assert "unrecognized arguments: --bogus_option=1" in out.stderr
    assert "usage" in out.stderr.lower() or "%dlprof [" in out.stderr
    assert "--key_node" in out.stderr  # the usage lists the options


def test_help_lists_every_option(shell):
    doc = shell.magics.dlprof.__doc__
    for flag in ("--setup", "--database", "-o", "--key_node", "--iter_start", "--iter_stop",
                 "--reports", "--formats", "--output_path", "--profile_name", "--delay",
                 "--duration", "--nsys_opts", "--nsys_base_name", "--force", "--verbosity",
                 "--mode", "--domains"):  # fmt: skip
        assert flag in doc, flag


def parse(shell, line, cell=True):
    from jlprof.magics.dlprof import parse_line

    return options.from_namespace(parse_line(shell.magics.dlprof, line), cell=cell)


def test_dlprof_options_become_run_options(shell):
    o = parse(shell, "--key_op=optimizer_step --iter_start 2 --iter_stop 5 --reports=all "
                     "--file_formats=csv,json -f true -v quiet -m pytorch -o prof "
                     "--domains=,jlprof_user --delay 1 -d 2.5 --base_name run1 "
                     '--nsys_opts="-t nvtx,osrt --sample=none"')  # fmt: skip
    assert o.key_node == "optimizer_step" and (o.iter_start, o.iter_stop) == (2, 5)
    assert o.reports[0] == "summary" and o.reports == list(REPORTS)  # DLProf's 8 + jlprof's
    assert o.formats == ["csv", "json"] and o.force is True and o.verbosity == "quiet"
    assert o.mode == "pytorch" and o.name == "prof" and o.domains == ["jlprof_user"]
    assert (o.delay, o.duration, o.profile_name) == (1.0, 2.5, "run1")
    assert o.nsys_opts == "-t nvtx,osrt --sample=none"  # DLProf's quoting, POSIX rules
    assert o.output_path is None and not o.setup and o.kernel is None


@pytest.mark.parametrize(
    ("line", "cell", "message"),
    [
        ("--reports=summary,bogus", True, "unknown report 'bogus'"),
        ("--formats=xml", True, "unknown format 'xml'"),
        ("-o 1abc", True, "not a Python name"),
        ("--database=x.sqlite", True, "line magic"),
        ("kernel status", True, "only options"),
        ("kernel reboot", False, "unknown %dlprof command"),
        ("", False, "needs --database"),
        ("--delay=-1", True, "--delay must be >= 0"),
        ("--nsys_opts='--duration=5'", True, "cannot use --duration"),
        ("--nsys_opts='-x true'", True, "cannot use -x"),
        ("--nsys_opts='--capture-range-end=stop'", True, "one report per captured cell"),
        ("--nsys_opts='-t nvtx python x.py'", True, "only nsys options"),
        ('--nsys_opts="-t \'nvtx"', True, "check the quotes"),
        ("--key_node 'a b", True, "check the quotes"),
    ],
)
def test_bad_options_name_the_fix(shell, line, cell, message):
    with pytest.raises((JlprofError, UsageError), match=__import__("re").escape(message)):
        parse(shell, line, cell=cell)


def test_bad_option_in_the_notebook_is_one_line_and_runs_nothing(shell):
    out = shell.cell("--reports=bogus", "raise SystemExit('must not run')")
    assert "unknown report 'bogus'" in out.stderr
    assert shell.magics.session.sidecar is None  # nothing was started
