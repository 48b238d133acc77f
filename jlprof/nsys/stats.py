"""``nsys stats`` reports, under their 2022.4 and 2023 names and CSV headers."""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from pathlib import Path

from jlprof.errors import JlprofError
from jlprof.nsys.export import ensure_sqlite
from jlprof.nsys.files import _check_input
from jlprof.nsys.locate import NsysFailed, NsysInfo, _info, _last_lines
from jlprof.nsys.tool import _run_tool

# 2022.4 name -> name since 2023.2 (the rename also added reports; unknown names pass through).
STATS_RENAMES: dict[str, str] = {
    "apigpusum": "cuda_api_gpu_sum",
    "cudaapisum": "cuda_api_sum",
    "cudaapitrace": "cuda_api_trace",
    "gpukernsum": "cuda_gpu_kern_sum",
    "gpumemsizesum": "cuda_gpu_mem_size_sum",
    "gpumemtimesum": "cuda_gpu_mem_time_sum",
    "gpusum": "cuda_gpu_sum",
    "gputrace": "cuda_gpu_trace",
    "kernexecsum": "cuda_kern_exec_sum",
    "kernexectrace": "cuda_kern_exec_trace",
    "nvtxgpuproj": "nvtx_gpu_proj_trace",
    "nvtxkernsum": "nvtx_kern_sum",
    "nvtxppsum": "nvtx_pushpop_sum",
    "nvtxpptrace": "nvtx_pushpop_trace",
    "nvtxsesum": "nvtx_startend_sum",
    "nvtxsum": "nvtx_sum",
    "openaccsum": "openacc_sum",
    "openmpevtsum": "openmp_sum",
    "osrtsum": "osrt_sum",
    "umcpupagefaults": "um_cpu_page_faults_sum",
    "unifiedmemory": "um_sum",
    "unifiedmemorytotals": "um_total_sum",
}
# Older CSV headers, mapped to the 2022.4 spelling once units are stripped.
_OLD_HEADERS = {"Average": "Avg", "Minimum": "Min", "Maximum": "Max", "Calls": "Num Calls"}
_UNIT_SUFFIX = re.compile(r"\s*\((?:%|ns|nsec|us|usec|ms|msec|s|sec|seconds|B|MB)\)$")

_reports_cache: dict[str, frozenset[str]] = {}


def stats_reports(nsys: NsysInfo | None = None) -> frozenset[str]:
    """Names of the ``nsys stats`` reports this nsys ships (``nsys stats --help-reports``)."""
    info = _info(nsys)
    key = str(info.path)
    if key not in _reports_cache:
        lines = _run_tool(
            [str(info.path), "stats", "--help-reports"],
            what="nsys stats --help-reports",
            check=False,  # 2022.4 lists the reports, then exits 1
        )
        names = {m.group(1) for ln in lines if (m := re.match(r"\s+([A-Za-z]\w*)\S* -- ", ln))}
        _reports_cache[key] = frozenset(names)
    return _reports_cache[key]


def _resolve_report(report: str, nsys: NsysInfo) -> str:
    """``report`` under the name this nsys knows it by; arguments (``:base``) are kept."""
    name, colon, args = report.partition(":")
    available = stats_reports(nsys)
    if name in available:
        return report
    renamed = {**STATS_RENAMES, **{new: old for old, new in STATS_RENAMES.items()}}
    alias = renamed.get(name)
    if alias in available:
        return alias + colon + args
    raise JlprofError(
        f"nsys {nsys.version_text} has no stats report {name!r}; it has: "
        + ", ".join(sorted(available))
    )


def stats_header(name: str) -> str:
    """A ``nsys stats`` CSV header without its unit, in the 2022.4 spelling (``Total Time``)."""
    bare = _UNIT_SUFFIX.sub("", name.strip())
    return _OLD_HEADERS.get(bare, bare)


def _convert(value: str) -> object:
    """Numbers as numbers (``nsys stats`` prints plain ``123`` and ``45.6``), all else as text."""
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if re.fullmatch(r"-?\d+\.\d*(?:[eE][-+]?\d+)?", value):
        return float(value)
    return value


def run_stats(
    sqlite_path: str | os.PathLike[str],
    report: str,
    *,
    normalize: bool = False,
    nsys: NsysInfo | None = None,
    timeout: float | None = 1800,
) -> list[dict[str, object]]:
    """Rows of NVIDIA's own ``nsys stats -r REPORT`` as dicts, for checking jlprof against it.

    Keys are the CSV headers as nsys prints them (``Total Time (ns)``), or with ``normalize`` as
    :func:`stats_header` gives them (``Total Time``). A report that finds no data (nsys says
    ``SKIPPED``) gives ``[]``. ``report`` may use the 2022.4 or the 2023.2+ name.
    """
    info = _info(nsys)
    source = _check_input(sqlite_path)
    if source.suffix != ".sqlite":
        source = ensure_sqlite(source, nsys=info)
    resolved = _resolve_report(report, info)
    with tempfile.TemporaryDirectory(prefix="jlprof-stats-") as tmp:
        lines = _run_tool(
            [
                str(info.path),
                "stats",
                "--report",
                resolved,
                "--format",
                "csv",
                "--output",
                str(Path(tmp) / "out"),
                str(source),
            ],
            what=f"nsys stats --report {resolved} on {source}",
            timeout=timeout,
        )
        errors = [ln for ln in lines if ln.lstrip().startswith("ERROR")]
        written = sorted(Path(tmp).glob("*.csv"))
        if errors or not written:
            detail = _last_lines(errors or lines)
            raise NsysFailed(f"nsys stats --report {resolved} on {source} failed: {detail}", lines)
        text = written[0].read_text(encoding="utf-8", errors="replace")
    rows = list(csv.DictReader(io.StringIO(text)))
    key = stats_header if normalize else (lambda header: header)
    return [{key(k): _convert(v) for k, v in row.items() if k is not None} for row in rows]
