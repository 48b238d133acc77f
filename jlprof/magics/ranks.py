"""``%dlprof --database=DIR`` (or a glob): one rank per file, analysed on Dask.

The scheduler is ``--scheduler``, else ``$JLPROF_SCHEDULER``, else a local cluster
(``jlprof.distributed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jlprof.distributed import RankSet
    from jlprof.magics.options import RunOptions


def reanalyse_ranks(opts: RunOptions) -> RankSet:
    """Each rank's reports under ``OUTPUT/rank<N>/`` and the cross-rank reports in ``OUTPUT``
    (with ``--output_path``); the :class:`RankSet` whose display is the ranks dashboard."""
    from jlprof.distributed import load_ranks

    assert opts.database is not None
    out = opts.output_path
    ranks = load_ranks(
        str(opts.database),
        scheduler=opts.scheduler,
        output_path=out,
        reports=opts.reports if out is not None else (),
        formats=opts.formats,
        force=opts.force,
        profile_name=opts.profile_name,
        progress=opts.says("normal"),
        key_node=opts.key_node,
        iter_start=opts.iter_start,
        iter_stop=opts.iter_stop,
        domains=opts.domains,
        mode=opts.mode,
    )
    if out is not None:
        ranks.write_reports(out, opts.formats, force=opts.force)
    return ranks
