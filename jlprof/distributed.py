"""Many ranks on Dask: each rank's file is loaded and reduced on a Dask worker.

``load_ranks(paths)`` submits one task per rank to a ``distributed`` cluster: a
``LocalCluster`` sized to the machine (started and closed here), or an existing scheduler
(``scheduler=`` / ``$JLPROF_SCHEDULER``) — the same code path. The workers read the files
themselves (a shared filesystem) and return only
:class:`~jlprof.engine.analyses.ranks.RankAggregates`, so the driver's memory grows with ranks ×
iterations, never with kernels. Per-rank DLProf reports are written by the workers under
``OUTPUT/rank<N>/``.

Rank rule: a trace's own rank when its capture environment carries one (``RANK``,
``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``PMIX_RANK``, ``SLURM_PROCID``: see
:func:`jlprof.engine.analyses.ranks.trace_rank`), else its position in the order given (a directory
or a glob sorted by name, numbers as numbers).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from jlprof.engine.analyses.ranks import RankAggregates, reduce_profile
from jlprof.engine.analysis import DEFAULT_PROFILE_NAME
from jlprof.errors import InputError, JlprofError
from jlprof.reports.ranks import RANK_REPORTS, analyse, write_rank_reports

SCHEDULER_ENV = "JLPROF_SCHEDULER"
SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep", ".jlprof")
DLDB_SUFFIX = "_dldb.sqlite"
_GLOB = set("*?[")


def rank_paths(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The ranks' files in rank order: a list as given; a directory's or a glob's profiles
    sorted by name (a ``.sqlite`` beside a same-named ``.nsys-rep`` wins: it is its export).
    A directory's or a glob's ``*_dldb.sqlite`` (the database a single-file run writes beside
    its export, guide §4.3) is not another rank. A name that exists is that file, even with
    glob characters in it (:func:`is_pattern`)."""
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    out: list[Path] = []
    for item in items:
        s = os.fspath(item)
        if Path(s).is_dir():
            found = sorted(
                (
                    p
                    for p in Path(s).iterdir()
                    if p.suffix in SUFFIXES and p.is_file() and not p.name.endswith(DLDB_SUFFIX)
                ),
                key=_natural,
            )
            if not found:
                raise InputError(
                    f"{s} is a directory with no profile in it; give the .sqlite or .nsys-rep "
                    "file, or a directory holding one per rank."
                )
            out += _prefer_sqlite(found)
        elif is_pattern(s):
            found = sorted(
                (Path(p) for p in glob.glob(s) if not p.endswith(DLDB_SUFFIX)), key=_natural
            )
            if not found:
                raise InputError(f"{s}: the pattern matches no file; check the path.")
            out += _prefer_sqlite(found)
        elif not Path(s).is_file():
            raise InputError(f"{s}: no such file; give one nsys export per rank.")
        else:
            out.append(Path(s))
    return out


def _natural(path: Path) -> list[tuple[int, Any]]:
    """Name order with numbers compared as numbers: report_2 before report_10."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", path.name)]


def several(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> bool:
    """True when ``spec`` names a job's ranks (several paths, a directory or a glob), not one
    file: the CLI's and the magic's ``--database`` go to :func:`load_ranks` then."""
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    if len(items) != 1:
        return True
    s = os.fspath(items[0])
    return Path(s).is_dir() or is_pattern(s)


def is_pattern(s: str) -> bool:
    """``s`` is a glob: it has ``*``, ``?`` or ``[`` and no file has that very name (a path that
    exists is that file: ``run?x=1.sqlite`` is one export, not a pattern)."""
    return bool(_GLOB & set(s)) and not Path(s).exists()


def _prefer_sqlite(paths: list[Path]) -> list[Path]:
    stems = {p.with_suffix("") for p in paths if p.suffix == ".sqlite"}
    return [p for p in paths if p.suffix == ".sqlite" or p.with_suffix("") not in stems]


def _rank_task(
    path: str,
    label: str,
    rank: int,
    options: dict[str, Any],
    output: str | None,
    reports: list[str],
    formats: list[str],
    force: bool,
) -> RankAggregates:
    """Runs on a worker: load one rank, write its reports under ``rank<N>/`` (N: the rank the
    trace carries, else its position), return its small aggregates. A user's error (an empty
    or foreign file) is returned, not raised: raised, Dask's worker logs it as "Compute Failed"
    with a traceback, at any verbosity."""
    from jlprof.profile import load

    try:
        prof = load(path, **options)
        agg = reduce_profile(prof, label, rank)
        if output is not None and reports:
            prof.write_reports(Path(output) / f"rank{agg.rank}", reports, formats, force=force)
    except JlprofError as exc:
        return exc  # type: ignore[return-value]
    return agg


@dataclass
class RankSet:
    """A distributed job's ranks, analysed together: the cross-rank tables and the paths of
    each rank's file (load one with :meth:`profile` for its own views)."""

    paths: list[Path]
    aggregates: list[RankAggregates]
    options: dict[str, Any] = field(default_factory=dict)
    profile_name: str = DEFAULT_PROFILE_NAME

    def __post_init__(self) -> None:
        self.tables = analyse(self.aggregates)

    def report(self, name: str = "ranks") -> pd.DataFrame:
        """``ranks``, ``rank_iterations`` or ``ranks_expert_systems``."""
        if name not in self.tables:
            raise JlprofError(
                f"unknown rank report {name!r}; choose from {', '.join(RANK_REPORTS)}."
            )
        return self.tables[name]

    def path(self, rank: int) -> Path:
        """The file of ``rank`` (a rank number, as in the reports' Rank column)."""
        for p, a in zip(self.paths, self.aggregates, strict=True):
            if a.rank == rank:
                return p
        raise JlprofError(f"no rank {rank}; the ranks are {[a.rank for a in self.aggregates]}.")

    def profile(self, rank: int) -> Any:
        """That rank's :class:`~jlprof.profile.Profile` (read here, in this process)."""
        from jlprof.profile import load

        return load(self.path(rank), **dict(self.options, profile_name=self.profile_name))

    def write_reports(
        self, output_path: str | Path = ".", formats: Sequence[str] = ("csv",), force: bool = False
    ) -> list[Path]:
        return write_rank_reports(self.tables, Path(output_path), self.profile_name, formats, force)

    def dashboard(self) -> Any:
        """Rank × iteration heatmap and per-rank table (needs the 'notebook' extra)."""
        from jlprof.widgets.ranks import RanksDashboard

        return RanksDashboard(self)

    def _ipython_display_(self) -> None:
        """The ranks dashboard in a kernel; the per-rank table elsewhere (or without the
        'notebook' extra)."""
        from IPython.display import display

        from jlprof.widgets.frontend import in_kernel

        if in_kernel():
            try:
                display(self.dashboard())
                return
            except ImportError:
                pass
        table = self.tables["ranks"]
        display({"text/plain": repr(self), "text/html": table.to_html(index=False)}, raw=True)

    def __repr__(self) -> str:
        s = self.tables["ranks"]
        flagged = s.loc[s["Straggler"], "Rank"].tolist()
        return f"<jlprof.RankSet {len(s)} ranks, stragglers: {flagged or 'none'}>"


def load_ranks(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    scheduler: str | None = None,
    output_path: str | Path | None = None,
    reports: Sequence[str] = (),
    formats: Sequence[str] = ("csv",),
    force: bool = False,
    profile_name: str = DEFAULT_PROFILE_NAME,
    progress: bool = True,
    **options: Any,
) -> RankSet:
    """Analyse one profile per rank on Dask (see the module docstring).

    ``options`` are :func:`jlprof.load`'s (key_node, iter_start, iter_stop, domains, mode).
    ``output_path`` and ``reports``: each rank's DLProf reports go to ``output_path/rank<N>/``.
    """
    from jlprof.engine.analysis import check_options
    from jlprof.reports.writers import check_outputs

    files = rank_paths(paths)
    check_options(
        options.get("key_node"),
        options.get("iter_start"),
        options.get("iter_stop"),
        options.get("domains"),
        options.get("mode"),
    )
    reports_l, formats_l = (
        check_outputs(list(reports), list(formats), profile_name) if reports else ([], [])
    )
    opts = dict(options, profile_name=profile_name)
    out = None if output_path is None else str(Path(output_path).resolve())
    client, cluster = _connect(scheduler, len(files))
    try:
        futures = {
            client.submit(
                _rank_task,
                str(p.resolve()),
                str(p),
                r,
                opts,
                out,
                reports_l,
                formats_l,
                force,
                key=f"jlprof-rank-{r}-{p.name}",
                pure=False,
            ): r
            for r, p in enumerate(files)
        }
        aggs: list[RankAggregates | None] = [None] * len(files)
        bar = _bar(len(files), progress)
        from distributed import as_completed

        failed: dict[int, JlprofError] = {}  # raised once every rank ended: a cluster closed
        # under a running task logs a worker's traceback
        try:
            for fut in as_completed(futures):
                r = futures[fut]
                try:
                    result = fut.result()
                except JlprofError as exc:
                    raise type(exc)(f"rank {r} ({files[r]}): {exc}") from exc
                finally:
                    fut.release()
                if isinstance(result, JlprofError):
                    failed[r] = result
                else:
                    aggs[r] = result
                bar.set_postfix_str(f"rank {r}", refresh=False)
                bar.update(1)
        finally:
            bar.close()
        if failed:
            r = min(failed)
            raise type(failed[r])(f"rank {r} ({files[r]}): {failed[r]}")
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    order = _rank_order(files, aggs)  # type: ignore[arg-type]
    return RankSet([files[i] for i in order], [aggs[i] for i in order], options, profile_name)  # type: ignore[misc]


def _rank_order(files: list[Path], aggs: list[RankAggregates]) -> list[int]:
    """Positions sorted by rank: the traces' own ranks when every trace carries a distinct one,
    the given order when none does; a mix is an error (ranks would collide)."""
    carried = [a.trace_rank for a in aggs]
    if all(c is None for c in carried):
        return list(range(len(files)))
    if any(c is None for c in carried) or len(set(carried)) != len(carried):
        some = [f"{f.name}: {c}" for f, c in zip(files, carried, strict=True)][:6]
        raise InputError(
            "some traces carry a rank in their capture environment (RANK, "
            f"OMPI_COMM_WORLD_RANK…) and others none or the same one ({', '.join(some)}); "
            "give the traces of one job, each with its own rank."
        )
    return sorted(range(len(files)), key=lambda i: carried[i])


def _connect(scheduler: str | None, n_ranks: int) -> tuple[Any, Any]:
    """A client of the given scheduler, else of a LocalCluster jlprof starts (one worker
    process per core, one thread each: the engine is single-threaded numpy/pandas)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise JlprofError(
            "several databases need Dask: pip install 'jlprof[distributed]'."
        ) from exc
    address = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if address:
        try:
            return Client(address, timeout="30s"), None
        except OSError as exc:
            raise JlprofError(
                f"cannot reach the Dask scheduler {address}: {exc}; start it "
                f"(dask scheduler) or unset --scheduler/${SCHEDULER_ENV} for a local cluster."
            ) from exc
    workers = max(1, min(os.cpu_count() or 1, n_ranks))
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=40,
    )
    return Client(cluster), cluster


class _NoBar:
    def set_postfix_str(self, *_a: Any, **_k: Any) -> None: ...
    def update(self, *_a: Any) -> None: ...
    def close(self) -> None: ...


def _bar(total: int, show: bool) -> Any:
    if not show:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="rank", desc="jlprof ranks")


__all__ = ["SCHEDULER_ENV", "RankSet", "load_ranks", "rank_paths", "several"]
