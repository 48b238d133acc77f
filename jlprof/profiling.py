"""Profile a command under nsys, as DLProf's ``dlprof [options] python train.py`` did.

Kept apart from the CLI so the notebook magic and scripts can use it too: build the nsys
command line (never a shell string), run it with its output streamed, import/export the
report to SQLite, and hand the path to the engine. Every raw file stays in ``output``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jlprof.errors import JlprofError


def profile_command(command: Sequence[str], **options: Any) -> Path:
    """Run ``command`` under ``nsys profile``; return the SQLite export of its report
    (``options`` as :func:`profile_run`)."""
    return profile_run(command, **options)[0]


def profile_run(
    command: Sequence[str],
    *,
    output: Path,
    base_name: str = "nsys_profile",
    nsys_opts: str = "",
    delay: float | None = None,
    duration: float | None = None,
    force: bool = False,
    say: Callable[..., None] | None = None,
    mode: str | None = None,
    env: Mapping[str, str] | None = None,
    profile_range: bool = False,
    gpu_metrics: bool = False,
) -> tuple[Path, int]:
    """:func:`profile_command`, also returning the profiled program's exit status (the CLI
    passes a failure on, as nsys does).

    In ``pytorch`` mode the program runs with ``jlprof.torch`` enabled once it imports torch
    (see ``jlprof.torch.autoenable``), as DLProf's mode needed ``nvidia_dlprof_pytorch_nvtx``.
    ``profile_range`` (DLProf's ``--nsys_profile_range=true``, guide §4.6): collect only between
    the program's ``cudaProfilerStart``/``Stop`` (``torch.cuda.profiler.start()``/``stop()``).
    ``gpu_metrics``: nsys also samples GPU metrics (``--gpu-metrics-device=all``, docs/kernels.md).
    """
    from jlprof import nsys

    log = say or (lambda *_a, **_k: None)
    output.mkdir(parents=True, exist_ok=True)
    cmd = nsys.profile_command(
        list(command),
        output / base_name,
        delay=delay or None,
        duration=duration,
        force=force,
        nsys_opts=nsys_opts,
        capture_range="cudaProfilerApi" if profile_range else None,
        gpu_metrics=gpu_metrics,
    )
    extra = dict(env or {})
    if mode == "pytorch":
        from jlprof.torch.autoenable import pytorch_env

        extra = {**pytorch_env(), **extra}
    result = nsys.run_profile(cmd, env=extra or None, progress=lambda m: log(m))
    if not result.reports:
        raise JlprofError(
            f"nsys wrote no report for {' '.join(command)!r} (exit {result.returncode}); "
            "check that the program ran and that --delay/--duration leave something to capture."
        )
    if result.returncode != 0:
        log(f"the profiled program exited with status {result.returncode}; analysing what "
            "was captured", "minimal")  # fmt: skip
    report = result.reports[-1]
    return nsys.ensure_sqlite(report, force=True, progress=lambda m: log(m)), result.returncode
