"""Find and drive the Nsight Systems CLI: ``nsys profile``, .qdstrm import, SQLite export, stats.

nsys differs by build and by version, and this module absorbs that so nothing else has to:

* Debian's ``nsight-systems`` package (2022.4) writes a ``.qdstrm`` and cannot find its own
  importer; NVIDIA's builds import by themselves. :func:`run_profile` finishes the import
  when nsys did not.
* ``nsys stats`` reports were renamed in 2023 (``gpukernsum`` → ``cuda_gpu_kern_sum``) and their CSV
  headers gained units (``Time(%)`` → ``Time (%)``); :func:`run_stats` accepts either name.

Only the standard library is used, so the profiled sidecar kernel and plain scripts can import it.
Every command is an argv list handed to :mod:`subprocess` without a shell; files the user recorded
are never deleted or overwritten unless ``force`` is given.

One module per job: :mod:`~jlprof.nsys.locate` (find nsys, its version and importer),
:mod:`~jlprof.nsys.command` (``nsys profile`` command lines), :mod:`~jlprof.nsys.run` (run them),
:mod:`~jlprof.nsys.qdstrm` (import a .qdstrm), :mod:`~jlprof.nsys.export` (SQLite export),
:mod:`~jlprof.nsys.stats` (``nsys stats``), :mod:`~jlprof.nsys.session` (``nsys launch``,
``start``, ``stop``: in-place mode); :mod:`~jlprof.nsys.tool` and
:mod:`~jlprof.nsys.files` hold what they share.
"""

from jlprof.nsys.command import (
    DEFAULT_TRACE,
    DL_LIBRARY_TRACE,
    NVTX_REGISTER_ENV,
    ProfileCommand,
    _parse_options,
    profile_command,
)
from jlprof.nsys.export import ensure_sqlite, export_sqlite
from jlprof.nsys.locate import (
    INSTALL_HINT,
    NsysFailed,
    NsysInfo,
    NsysNotFound,
    Progress,
    _last_lines,
    find_nsys,
)
from jlprof.nsys.qdstrm import import_qdstrm
from jlprof.nsys.run import ProfileResult, _generated_paths, _stop_nsys, run_profile
from jlprof.nsys.session import Session as NsysSession
from jlprof.nsys.stats import STATS_RENAMES, run_stats, stats_header, stats_reports
from jlprof.nsys.tool import IMPORTER_NOTE, NsysTimeout, start_lock

__all__ = [
    "DEFAULT_TRACE",
    "DL_LIBRARY_TRACE",
    "IMPORTER_NOTE",
    "INSTALL_HINT",
    "NVTX_REGISTER_ENV",
    "STATS_RENAMES",
    "NsysFailed",
    "NsysInfo",
    "NsysNotFound",
    "NsysSession",
    "NsysTimeout",
    "ProfileCommand",
    "ProfileResult",
    "Progress",
    "_generated_paths",
    "_last_lines",
    "_parse_options",
    "_stop_nsys",
    "ensure_sqlite",
    "export_sqlite",
    "find_nsys",
    "import_qdstrm",
    "profile_command",
    "run_profile",
    "run_stats",
    "start_lock",
    "stats_header",
    "stats_reports",
]
