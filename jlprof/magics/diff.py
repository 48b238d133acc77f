"""``%dlprof --diff BASE NEW``: load both profiles, compare them, write files if asked.

The same path as ``jlprof diff`` (:mod:`jlprof.commands.diff`): run folders resolve to their
database, per-side ranges fall back to ``--iter_start/--iter_stop``, files are written only when
``--output_path`` is given. Returns the :class:`jlprof.profile.Comparison` the magic binds and
displays (the diff view).
"""

from __future__ import annotations

from typing import Any

from jlprof.commands.diff import compare_args, load_pair
from jlprof.magics.options import RunOptions


def run_diff(opts: RunOptions) -> Any:
    assert opts.diff is not None
    say = print if opts.says("detailed") else None
    pb, pn = load_pair(
        opts.diff[0],
        opts.diff[1],
        key_node=opts.key_node,
        domains=opts.domains,
        mode=opts.mode,
        profile_name=opts.profile_name,
        progress=say,
    )
    result = compare_args(pb, pn, opts)
    if opts.output_path is not None:
        for path in result.write(opts.output_path, opts.formats, opts.profile_name, opts.force):
            if opts.says("normal"):
                print(f"jlprof: wrote {path}")
    return result
