"""The CLI and the ``%%dlprof`` magic are built from one option table (jlprof/options.py):
they accept the same options, spelled as DLProf spells them."""

from __future__ import annotations

import argparse

import pytest

from jlprof.cli import build_parser
from jlprof.options import CLI, MAGIC, OPTIONS

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
        f for o in OPTIONS if MAGIC not in o.surfaces for f in o.flags
    }
    assert set(magic) - set(cli) - own == set()
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
        if MAGIC in o.surfaces and o.name not in ("output_path", "database", "reports"):
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
