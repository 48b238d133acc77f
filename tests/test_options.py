"""The CLI and the ``%%dlprof`` magic are built from one option table (jlprof/options.py):
they accept the same options, spelled as DLProf spells them."""

from __future__ import annotations

import argparse

import pytest

from jlprof.cli import build_parser, parse
from jlprof.options import CLI, DEFAULT_PROFILE_NAME, MAGIC, OPTIONS, notes
from jlprof.version import __version__

pytest.importorskip("IPython")


def _flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """flag -> dest, for every optional argument of the parser."""
    return {f: a.dest for a in parser._actions for f in a.option_strings}


def _magic_parser() -> argparse.ArgumentParser:
    from jlprof.magics.dlprof import DlprofMagics

    return DlprofMagics.dlprof.parser


def test_cli_and_magic_accept_the_same_table_options() -> None:
    cli, magic = _flags(build_parser()), _flags(_magic_parser())
    shared = [o for o in OPTIONS if CLI in o.surfaces and MAGIC in o.surfaces]
    assert len(shared) >= 15
    for o in shared:
        for flag in o.flags:
            assert cli[flag] == magic[flag] == o.name, flag
    # what is on one surface only is in the table as such (or is the surface's own verb)
    own = {"-h", "--help", "-V", "--version", "--setup", "-o"}
    table = {f for o in OPTIONS for f in o.flags}
    assert set(cli) - set(magic) - own == {
        f for o in OPTIONS if CLI in o.surfaces and MAGIC not in o.surfaces for f in o.flags
    }
    assert set(magic) - set(cli) - own == {
        f for o in OPTIONS if MAGIC in o.surfaces and CLI not in o.surfaces for f in o.flags
    }
    assert (set(cli) | set(magic)) - own <= table


@pytest.mark.parametrize(
    "words",
    [
        ["--key_op=step", "--iter_start=2", "--iter_stop=5", "--file_formats=csv,json"],
        ["--reports=all", "--base_name=run", "-f", "true", "-v", "quiet", "--domains=a,b"],
        ["-m", "pytorch", "-y", "1.5", "-d", "3", "--nsys_options=-t cuda"],
    ],
)
def test_both_parse_the_same_values(words: list[str]) -> None:
    cli = vars(build_parser().parse_args([*words, "--database=x.sqlite"]))
    magic = vars(_magic_parser().parse_args([*words, "--database=x.sqlite"]))
    for o in OPTIONS:
        if (
            CLI in o.surfaces
            and MAGIC in o.surfaces
            and o.name not in ("output_path", "database", "reports")
        ):
            assert cli[o.name] == magic[o.name], o.name
    assert cli["output_path"] == "." and magic["output_path"] is None  # the magic: a run folder
    if "--reports=all" in words:
        assert cli["reports"] == magic["reports"] == ["all"]
    else:  # DLProf writes no report unless asked (the CLI prints the summary); the magic one
        assert cli["reports"] == [] and magic["reports"] == ["summary"]
    # the CLI takes one file per rank after one --database; the magic a directory or a glob
    assert cli["database"] == [magic["database"]] == ["x.sqlite"]


def test_dlprof_names_are_accepted() -> None:
    """Every option DLProf has is accepted under DLProf's own spelling (guide ch. 15)."""
    for o in OPTIONS:
        if o.dlprof is not None:
            assert o.dlprof in o.flags, o.name


# ---- DLProf's grammar and ch. 15's options (issue 20) -------------------------------------
# every flag of the guide's ch. 15 tables, and the names DLProf used in other places/versions
_GUIDE_FLAGS_TEXT = (
    "-h --help -V --version -f --force -v --verbosity -m --mode --database --nsys_base_name "
    "--nsys_options -y --delay -d --duration --detailed_mode --key_node --iter_start "
    "--iter_stop --output_path --base_name --reports --formats --dump_model_data "
    # §4.4, §4.6, §10.1.1-10.1.3, §13.3.3 and earlier releases
    "--nsys_opts --nsys_base_output_filename --nsys_profile_range --report --file_formats "
    "--profile_name --key_op --nsys_database"
)
GUIDE_FLAGS = _GUIDE_FLAGS_TEXT.split()


def test_every_guide_flag_is_on_both_surfaces() -> None:
    cli, magic = _flags(build_parser()), _flags(_magic_parser())
    for flag in GUIDE_FLAGS:
        assert flag in cli, flag
        if flag not in ("-h", "--help", "-V", "--version", "--dump_model_data"):  # %dlprof? helps
            assert flag in magic, flag


def test_defaults_are_dlprofs() -> None:
    """§10.1.3 profile name dlprof, §10.1.4 the working folder, §10.1.2 csv, §15.1.4 no
    report unless asked (the summary is printed)."""
    ns, given = parse(["--database=x.sqlite"])
    assert (ns.profile_name, ns.output_path, ns.formats, ns.reports) == ("dlprof", ".", ["csv"], [])
    assert DEFAULT_PROFILE_NAME == "dlprof" and given == {"database"}
    assert (ns.nsys_base_name, ns.detailed_mode, ns.nsys_profile_range) == (
        "nsys_profile",
        True,
        False,
    )


@pytest.mark.parametrize(
    ("argv", "want", "command"),
    [
        (["--reports", "iteration", "tensor", "node_op", "--", "python", "t.py"],
         {"reports": ["iteration", "tensor", "node_op"]}, ["python", "t.py"]),
        (["--reports=kernel,iteration,summary", "python", "t.py", "--reports=x"],
         {"reports": ["kernel", "iteration", "summary"]}, ["python", "t.py", "--reports=x"]),
        (["--file_formats", "json", "csv", "--", "--database", "a.sqlite"],
         {"formats": ["json", "csv"], "database": ["a.sqlite"]}, []),
        (["--file_formats", "json", "--reports", "summary", "python", "t.py"],
         {"formats": ["json"], "reports": ["summary"]}, ["python", "t.py"]),
        (["--reports", "kernel", "tensor", "python", "t.py"],  # no --: the names it knows
         {"reports": ["kernel", "tensor"]}, ["python", "t.py"]),
        (["-m", "simple", "-f", "true", "-y", "2", "-d", "3", "t.py"],
         {"mode": "simple", "force": True, "delay": 2.0, "duration": 3.0}, ["t.py"]),
        (["--iter_start", "20", "--iter_stop", "80", "python", "main.py", "--mode=train"],
         {"iter_start": 20, "iter_stop": 80, "mode": None}, ["python", "main.py", "--mode=train"]),
        (["--nsys_options", "-t cuda,nvtx -s none", "t.py"],
         {"nsys_opts": "-t cuda,nvtx -s none"}, ["t.py"]),
        (["--database", "a.sqlite", "b.sqlite", "--key_node", "step"],
         {"database": ["a.sqlite", "b.sqlite"], "key_node": "step"}, []),
        (["--key_node=step", "--", "--weird-program"], {"key_node": "step"}, ["--weird-program"]),
        (["--mode=trtexec", "t.py"], {"mode": "tensorrt"}, ["t.py"]),  # §3.4's spelling
    ],
)  # fmt: skip
def test_cli_grammar(argv, want, command) -> None:
    ns, _given = parse(argv)
    for key, value in want.items():
        assert getattr(ns, key) == value, key
    assert ns.command == command


def test_magic_shares_the_grammar() -> None:
    from jlprof.magics.dlprof import parse_line

    ns = parse_line(
        DlprofMagicsParser(), "--database x.sqlite --reports iteration tensor node_op -- -f true"
    )
    assert ns.reports == ["iteration", "tensor", "node_op"] and ns.force is True
    assert ns.database == "x.sqlite" and ns.command == []
    ns = parse_line(DlprofMagicsParser(), "kernel status")
    assert ns.command == ["kernel", "status"]


class DlprofMagicsParser:
    """What :func:`parse_line` needs of the magic: its parser."""

    @property
    def parser(self) -> argparse.ArgumentParser:
        return _magic_parser()


def test_help_lists_the_guides_groups_in_order(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    heads = [
        "CLI Global Options",
        "Generic Options",
        "Nsight Systems Options",
        "Data Aggregation Options",
        "Output Report Options",
    ]
    at = [text.index(h) for h in heads]
    assert at == sorted(at)
    for flag in GUIDE_FLAGS:
        assert flag in text, flag


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["-V"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"jlprof {__version__}"


@pytest.mark.parametrize(
    ("argv", "surface", "note"),
    [
        (["--database=x", "--detailed_mode=false"], CLI, "--detailed_mode has no effect"),
        (["--database=x", "--delay", "3"], CLI, "-y has no effect: nothing is profiled"),
        (["--database=x", "--nsys_opts=-t cuda"], CLI, "--nsys_options has no effect"),
        (["--database=x", "--nsys_profile_range=true"], MAGIC, "captures exactly the profiled"),
    ],
)
def test_options_without_effect_say_so(argv, surface, note) -> None:
    if surface == CLI:
        ns, given = parse(argv)
    else:
        from jlprof.magics.dlprof import parse_line

        ns = parse_line(DlprofMagicsParser(), " ".join(argv))
        given = ns.given_options
    lines = notes(ns, given, surface)
    assert len(lines) == 1 and note in lines[0] and lines[0].startswith("note: ")


def test_given_options_with_effect_have_no_note() -> None:
    ns, given = parse(["--nsys_opts=-t cuda", "-y", "1", "--nsys_profile_range=true", "t.py"])
    assert notes(ns, given, CLI) == []


def test_the_cli_prints_the_notes(tmp_path, capsys) -> None:
    from jlprof.cli import main
    from tests.fixtures.loops import small_training_export

    db = small_training_export(tmp_path / "run.sqlite")
    out = tmp_path / "out"
    assert main([f"--database={db}", f"--output_path={out}", "--detailed_mode", "false",
                 "-m", "simple", "--reports", "summary", "kernel", "--"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "note: --detailed_mode has no effect" in err
    assert "note: not written: summary; the only report of simple mode is 'kernel'" in err
    assert sorted(p.name for p in out.iterdir()) == ["dlprof_kernel.csv"]
