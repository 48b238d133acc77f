"""``jlprof prof DB [-c COLS] [--csv | -w WIDTH]``: PyProf's ``python -m pyprof.prof`` on a profile.

DB is an nsys export (.sqlite/.nsys-rep), an nvprof database (``nvprof -o net.sql``), a jlprof
database or a ``%%dlprof`` run folder: no ``parse`` step and no ``net.dict`` in between. The
output is PyProf's (``pyprof/prof/output.py``): a header, then one line per kernel;
space-separated by default, ``--csv`` quotes every field, ``-w WIDTH`` columnates (``kernel``
and ``params`` share what the other columns leave; the trace column shows its last frame's
file). The columns and defaults are PyProf's (docs/kernels.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from jlprof.commands import guarded
from jlprof.engine.analyses.prof import COLUMNS, DEFAULT_COLUMNS
from jlprof.errors import OptionError

# PyProf's output.py: option -> (header, is an int, minimum width when columnated)
TABLE: dict[str, tuple[str, bool, int]] = {
    "idx": ("Idx", True, 7), "seq": ("SeqId", False, 7), "altseq": ("AltSeqId", False, 7),
    "tid": ("TId", True, 12), "layer": ("Layer", False, 10), "trace": ("Trace", False, 25),
    "dir": ("Direction", False, 5), "sub": ("Sub", True, 3), "mod": ("Module", False, 15),
    "op": ("Op", False, 15), "kernel": ("Kernel", False, 0), "params": ("Params", False, 0),
    "sil": ("Sil(ns)", True, 10), "tc": ("TC", False, 2), "device": ("Device", True, 3),
    "stream": ("Stream", True, 3), "grid": ("Grid", False, 12), "block": ("Block", False, 12),
    "flops": ("FLOPs", True, 12), "bytes": ("Bytes", True, 12),
}  # fmt: skip
HELP = {"idx": "Index", "seq": "PyTorch Sequence Id", "altseq": "PyTorch Alternate Sequence Id",
        "tid": "Thread Id", "layer": "User annotated NVTX string (can be nested)",
        "trace": "Function Call Trace", "dir": "Direction", "sub": "Sub Sequence Id",
        "mod": "Module", "op": "Operation", "kernel": "Kernel Name", "params": "Parameters",
        "sil": "Silicon Time (in ns)", "tc": "Tensor Core Usage", "device": "GPU Device Id",
        "stream": "Stream Id", "grid": "Grid Dimensions", "block": "Block Dimensions",
        "flops": "Floating point ops (FMA = 2 FLOPs)",
        "bytes": "Number of bytes in and out of DRAM"}  # fmt: skip


def columns(value: str) -> list[str]:
    """``-c idx,kernel,sil`` -> the names, each one of PyProf's 20."""
    cols = [c for c in value.split(",") if c]
    for c in cols:
        if c not in COLUMNS:
            raise argparse.ArgumentTypeError(
                f"{c} is not a valid column name. Valid column names are {','.join(COLUMNS)}."
            )
    if not cols:
        raise argparse.ArgumentTypeError(f"no column given; choose from {','.join(COLUMNS)}.")
    return cols


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jlprof prof",
        description="PyProf's kernel table: one line per GPU kernel with its op, parameters, "
        "silicon time, FLOPs and bytes (python -m pyprof.prof, without the parse step).",
        epilog="Examples:\n  jlprof prof net.sqlite\n  jlprof prof -w 130 -c "
        "idx,dir,kernel,params,sil net.sqlite\n  jlprof prof --csv net.sql   (nvprof -o net.sql)",
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("db", metavar="DB", help="an nsys export, nvprof database, jlprof database "
                   "or %%%%dlprof run folder")  # fmt: skip
    p.add_argument(
        "-c", dest="columns", type=columns, default=list(DEFAULT_COLUMNS),
        help="Comma separated names of columns to print (default "
        f"{','.join(DEFAULT_COLUMNS)}).\n"
        + "\n".join(f"{k + ':':<10}{v}" for k, v in HELP.items()) + "\ne.g. -c idx,kernel,sil",
    )  # fmt: skip
    group = p.add_mutually_exclusive_group()
    group.add_argument("--csv", action="store_true", default=False, help="Print a CSV output.")
    group.add_argument("-w", dest="width", type=int, default=0,
                       help="Width of columnated output.")  # fmt: skip
    return p


def formatter(cols: list[str], csv: bool, width: int) -> tuple[str, Any]:
    """The header line and a function row values -> line, as PyProf's ``Output``."""
    headers = tuple(TABLE[c][0] for c in cols)
    if csv:
        return ",".join(f'"{h}"' for h in headers), lambda v: ",".join(f'"{x}"' for x in v)
    if width <= 0:
        return " ".join(headers), lambda v: " ".join(map(str, v))
    widths = {c: TABLE[c][2] for c in cols}
    need = sum(widths.values())
    if need > width:
        raise OptionError(
            f"minimum width required to print {','.join(cols)} = {need}; give -w {need} or more."
        )
    rest = width - need
    if "kernel" in cols and "params" in cols:
        widths["kernel"] = widths["params"] = rest // 2
    elif "kernel" in cols:
        widths["kernel"] = rest
    elif "params" in cols:
        widths["params"] = rest
    hfmt = "".join(f"%-{widths[c]}.{widths[c]}s " for c in cols)
    dfmt = "".join(f"%{widths[c]}d " if TABLE[c][1] else f"%-{widths[c]}.{widths[c]}s "
                   for c in cols)  # fmt: skip
    return hfmt % headers, lambda v: dfmt % tuple(v)


def lines(df: Any, cols: list[str], csv: bool = False, width: int = 0) -> Iterable[str]:
    """PyProf's output of the table ``df`` (:func:`jlprof.engine.analyses.prof.prof_table`)."""
    head, fmt = formatter(cols, csv, width)
    yield head
    data = [df[c].tolist() for c in cols]
    if width > 0 and "trace" in cols:  # columnated: the last frame's file only
        i = cols.index("trace")
        data[i] = [t.split(",")[-1].split("/")[-1] if t != "-" else t for t in data[i]]
    for row in zip(*data, strict=True):
        yield fmt(row)


def run(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    return guarded("jlprof prof", lambda: _print(a))


def _print(a: argparse.Namespace) -> int:
    from jlprof.engine.analyses.prof import prof_table
    from jlprof.profile import load
    from jlprof.runs import run_database

    formatter(a.columns, a.csv, a.width)  # a width too small fails before the read
    p = load(run_database(a.db))
    out = sys.stdout
    try:
        for line in lines(prof_table(p.correlated), a.columns, a.csv, a.width):
            out.write(line + "\n")
        out.flush()
    except BrokenPipeError:  # `jlprof prof DB | head`: stop quietly, as PyProf does
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
