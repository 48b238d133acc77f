"""``jlprof diff BASE NEW``: the A/B diff of two profiles for people and for CI (docs/diff.md).

BASE and NEW are nsys exports (.sqlite/.nsys-rep), jlprof databases or ``%%dlprof`` run folders.
Prints the verdict (``--format text|markdown|json``, to ``--output_file`` or stdout), writes
``<profile_name>_diff*.{csv,json}`` when ``--output_path`` or ``--formats`` is given, and exits
0; with ``--fail-on-regression PCT`` it exits 1 on "regression likely" and 3 on "not
comparable" (2 stays jlprof's error status). The options are rows of :mod:`jlprof.options`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jlprof.commands import guarded
from jlprof.errors import OptionError
from jlprof.options import CLI, DIFF, OPTIONS, VERBOSITY
from jlprof.outputs import written

# the table's analysis and output options the sub-command shares with the DLProf command line
SHARED = ("force", "verbosity", "mode", "key_node", "iter_start", "iter_stop", "domains",
          "output_path", "profile_name", "formats")  # fmt: skip
NO_DEFAULT = ("output_path", "formats")  # given: write files; not given: print only


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jlprof diff",
        description="Compare two profiles (BASE, then NEW) on DLProf's op view: per op, kernel "
        "and op type, both iteration-time distributions, and a verdict for CI.",
        epilog="Examples:\n  jlprof diff main.sqlite pr.sqlite --key_node=optimizer_step "
        "--format markdown --output_file comment.md --fail-on-regression 5\n"
        "  jlprof diff a.sqlite b.sqlite --output_path out --formats csv,json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("base", metavar="BASE", help="the reference profile")
    p.add_argument("new", metavar="NEW", help="the profile compared with it")
    groups: dict[str, Any] = {}
    for o in OPTIONS:
        if o.name not in SHARED and DIFF not in o.surfaces:
            continue
        if o.group not in groups:
            groups[o.group] = p.add_argument_group(o.group)
        kw = o.kwargs(DIFF if DIFF in o.surfaces else CLI)
        if o.name in NO_DEFAULT:
            kw["default"] = None
        groups[o.group].add_argument(*o.flags, **kw)
    return p


def load_pair(
    base: str | Path,
    new: str | Path,
    *,
    key_node: str | None = None,
    domains: list[str] | None = None,
    mode: str | None = None,
    profile_name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Any, Any]:
    """Both profiles (run folders resolved to their database; one file read once)."""
    from jlprof.profile import load
    from jlprof.runs import run_database

    kw: dict[str, Any] = {"key_node": key_node, "domains": domains, "mode": mode}
    if profile_name is not None:
        kw["profile_name"] = profile_name
    bp, np_ = run_database(base), run_database(new)
    say = progress or (lambda _m: None)
    say(f"loading base {bp}")
    pb = load(bp, progress=progress, **kw)
    if Path(np_).resolve() == Path(bp).resolve():
        return pb, pb
    say(f"loading new {np_}")
    return pb, load(np_, progress=progress, **kw)


def compare_args(pb: Any, pn: Any, a: Any) -> Any:
    """``Profile.compare`` with the per-side ranges and threshold of parsed options ``a``."""
    threshold = a.regression_threshold
    if threshold is None:  # the gate's PCT is the threshold (the magic has no gate)
        threshold = getattr(a, "fail_on_regression", None)
    kw = {} if threshold is None else {"threshold_pct": threshold}
    if threshold is not None and threshold <= 0:
        raise OptionError(f"the regression threshold is a percentage > 0, got {threshold}.")

    def pick(side: str, end: str) -> int | None:
        v = getattr(a, f"{side}_iter_{end}")
        return getattr(a, f"iter_{end}") if v is None else v

    return pb.compare(
        pn,
        iter_start=pick("base", "start"),
        iter_stop=pick("base", "stop"),
        other_iter_start=pick("new", "start"),
        other_iter_stop=pick("new", "stop"),
        **kw,
    )


def render(result: Any, fmt: str) -> str:
    if fmt == "markdown":
        return result.to_markdown()
    if fmt == "json":
        return json.dumps(result.summary(), indent=2, default=str) + "\n"
    lines = [repr(result), *(f"  {e}" for e in result.evidence)]
    lines += [f"  warning: {w}" for w in result.warnings]
    moved = result.ops[result.ops["Status"] != "unchanged"].head(15)
    if len(moved):
        lines += ["", moved.to_string(index=False)]
    return "\n".join(lines) + "\n"


def run(argv: list[str]) -> int:
    if sum(w.endswith(".ncu-rep") for w in argv if not w.startswith("-")) == 2:
        from jlprof.commands.ncu import run_diff  # two Nsight Compute reports (docs/kernels.md)

        return run_diff(argv)
    a = build_parser().parse_args(argv)
    t0 = time.perf_counter()

    def say(msg: str, at: str = "normal") -> None:
        if VERBOSITY.index(a.verbosity) >= VERBOSITY.index(at):
            print(f"[jlprof diff {time.perf_counter() - t0:6.2f}s] {msg}", file=sys.stderr)

    return guarded("jlprof diff", lambda: _run(a, say), reraise=a.verbosity == "diagnostic")


def _run(a: argparse.Namespace, say: Callable[..., None]) -> int:
    from jlprof.outputs import prepare_folder
    from jlprof.reports.writers import FORMATS, check_profile_name

    name = a.profile_name or next(o.default for o in OPTIONS if o.name == "profile_name")
    check_profile_name(name)
    formats = a.formats
    if formats is not None:
        bad = [f for f in formats if f not in FORMATS] or ([] if formats else [""])
        if bad:
            raise OptionError(f"unknown format {bad[0]!r}; choose csv and/or json.")
    out = None
    if a.output_path is not None or formats is not None:
        out = prepare_folder(a.output_path or ".")
    if a.output_file:
        prepare_folder(Path(a.output_file).parent, "--output_file")
    pb, pn = load_pair(a.base, a.new, key_node=a.key_node, domains=a.domains, mode=a.mode,
                       profile_name=name, progress=lambda m: say(m, "detailed"))  # fmt: skip
    result = compare_args(pb, pn, a)
    if out is not None:
        for path in result.write(out, formats or ["csv"], name, force=a.force):
            say(f"wrote {path}")
    text = render(result, a.format)
    if a.output_file:
        with written(a.output_file, "--output_file") as tmp:
            tmp.write_text(text, encoding="utf-8")
        say(f"wrote {a.output_file}")
    else:
        sys.stdout.write(text)
    status = result.exit_status(a.fail_on_regression)
    if status:
        say(f"exit status {status}: the verdict is {result.verdict!r}", "minimal")
    return status


__all__ = ["build_parser", "compare_args", "load_pair", "render", "run"]
