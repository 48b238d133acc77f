"""Running a ``%%dlprof`` cell: the sidecar session, one captured run, and its analysis.

Kept apart from the magic (which only parses and displays) so scripts and tests can drive a run
without IPython's magic machinery. Steps: capture in the sidecar → collect nsys's raw report →
import/export to SQLite in the run folder → analyse with the engine → reports + manifest.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jlprof import nsys, outputs, runs
from jlprof.errors import AnalysisError, JlprofError
from jlprof.magics.options import RunOptions
from jlprof.magics.progress import Progress
from jlprof.sidecar import Sidecar, SidecarBusy, SidecarDied
from jlprof.sidecar.capture import DOMAIN

Say = Callable[[str], None]


class Problem(str):
    """A message about something that went wrong (state lost): shown on stderr, not stdout."""


OnMessage = Callable[[dict[str, Any]], None]
OnInput = Callable[[str, bool], str]

STEPS = [
    "stopping the capture",
    "finalising the nsys report",
    "importing",
    "exporting SQLite",
    "analysing",
    "writing reports",
]


class _Steps:
    """Progress display plus the seconds each step took (kept in ``RunResult.timings_s``)."""

    def __init__(self, opts: RunOptions, timings: dict[str, float]) -> None:
        self.progress = Progress(STEPS, quiet=not opts.says("normal"))
        self.timings = timings
        self.current = STEPS[0]
        self.since = time.perf_counter()
        self.progress.step(self.current)

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[self.current] = self.timings.get(self.current, 0.0) + now - self.since
        self.current, self.since = name, now
        if name in STEPS:
            self.progress.step(name)

    def done(self, text: str) -> None:
        self("done")
        self.progress.done(text)


class Session:
    """The notebook's sidecar: started on first use, replaced (with a notice) after a death."""

    def __init__(self, cwd: Path | None = None) -> None:
        self.cwd = cwd
        self.sidecar: Sidecar | None = None
        self.nsys_opts = ""
        self.isolate_network = False
        self.lost_state = False  # a sidecar died since the last start
        self.setup_cells: list[str] = []  # the sidecar's --setup cells, for --ncu's re-run

    def ensure(
        self, nsys_opts: str, nsys_opts_given: bool, say: Say, isolate_network: bool | None = None
    ) -> Sidecar:
        """The running sidecar, or a new one; ``isolate_network`` None: as the last one (a
        sidecar that died comes back as it was), off after :meth:`shutdown`."""
        if self.sidecar is not None and not self.sidecar.alive():
            self.sidecar.shutdown(timeout=5)
            self.sidecar = None
            self.lost_state = True
            self.setup_cells = []
        if self.sidecar is not None:
            if nsys_opts_given and nsys_opts != self.nsys_opts:
                raise JlprofError(
                    f"the sidecar already runs with --nsys_opts={self.nsys_opts!r}; nsys options "
                    "apply when it starts: run %dlprof kernel shutdown, then this cell again "
                    "(the sidecar's variables are lost)"
                )
            if isolate_network is not None and isolate_network != self.isolate_network:
                raise JlprofError(
                    f"the sidecar already runs with --isolate_network={self.isolate_network}; it "
                    "applies when the sidecar starts: run %dlprof kernel shutdown, then this cell "
                    "again (the sidecar's variables are lost)"
                )
            return self.sidecar
        if self.lost_state:
            say(
                Problem(
                    "the previous sidecar kernel died: starting a fresh one. Its variables and "
                    "imports are lost; run your %%dlprof --setup cells again."
                )
            )
        isolate = self.isolate_network if isolate_network is None else isolate_network
        sidecar = Sidecar(nsys_opts=nsys_opts, cwd=self.cwd, say=say, isolate_network=isolate)
        sidecar.start()
        for note in sidecar.notes:  # before the first capture, not after an empty one
            say(Problem(note))
        self.sidecar = sidecar
        self.nsys_opts = nsys_opts
        self.isolate_network = isolate
        self.lost_state = False
        return sidecar

    def died(self) -> None:
        self.sidecar = None
        self.lost_state = True
        self.setup_cells = []

    def status(self) -> dict[str, Any]:
        if self.sidecar is None:
            return {"running": False, "state_lost": self.lost_state}
        return {**self.sidecar.status(), "nsys_opts": self.nsys_opts}

    def shutdown(self) -> bool:
        had = self.sidecar is not None
        if self.sidecar is not None:
            self.sidecar.shutdown()
        self.sidecar = None
        self.lost_state = False
        self.isolate_network = False
        self.setup_cells = []
        return had


@dataclass
class RunResult:
    """What a run left: the profile (None when analysis failed), folder, files, messages."""

    folder: Path | None
    profile: Any = None
    status: str = "ok"
    error: str | None = None
    database: Path | None = None
    nsys_report: Path | None = None
    written: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cell_error: str | None = None
    interrupted: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)
    """Seconds per step after the cell body (stop capture, finalise, import, export, ...)."""


def _ensure(session: Session, opts: RunOptions, say: Say) -> Sidecar:
    isolate = opts.isolate_network if opts.isolate_network_given else None
    return session.ensure(opts.nsys_opts, opts.nsys_opts_given, say, isolate_network=isolate)


def run_setup(
    session: Session,
    opts: RunOptions,
    code: str,
    on_message: OnMessage,
    say: Say,
    on_input: OnInput | None = None,
):
    """``%%dlprof --setup``: run in the sidecar without capture."""
    sidecar = _ensure(session, opts, say)
    try:
        res = sidecar.execute(code, store_history=True, on_message=on_message, on_input=on_input)
        if getattr(res, "status", "ok") == "ok":
            session.setup_cells.append(code)
        return res
    except SidecarDied:
        session.died()
        raise


def _run_folder(opts: RunOptions, cwd: Path | None) -> Path:
    if opts.output_path is None:
        return runs.new_run_folder(cwd)
    folder = outputs.prepare_folder(opts.output_path)
    if not opts.force:
        for suffix in (".qdstrm", ".nsys-rep", ".sqlite"):
            path = folder / f"{opts.nsys_base_name}{suffix}"
            if path.exists():
                raise JlprofError(
                    f"{path} already exists: pass -f true to overwrite it, or choose another "
                    "--nsys_base_name or --output_path"
                )
    return folder


def run_captured(
    session: Session,
    opts: RunOptions,
    code: str,
    on_message: OnMessage,
    say: Say,
    on_input: OnInput | None = None,
) -> RunResult:
    """Run ``code`` captured in the sidecar, then analyse what nsys recorded. The run folder is
    held until then: another notebook's run into the same --output_path refuses at once."""
    folder = _run_folder(opts, session.cwd)
    with outputs.folder_lock(folder):
        return _run_captured(session, opts, code, on_message, say, folder, on_input)


def _run_captured(
    session: Session,
    opts: RunOptions,
    code: str,
    on_message: OnMessage,
    say: Say,
    folder: Path,
    on_input: OnInput | None,
) -> RunResult:
    sidecar = _ensure(session, opts, say)
    result = RunResult(folder=folder)
    try:
        sidecar.drain_lines()
        prep = sidecar.execute(
            f"_jlprof_capture.init_torch({opts.mode!r})\n"
            f"_jlprof_capture.CAPTURE.begin({sidecar.method!r}, {opts.delay!r}, {opts.duration!r})",
            silent=True,
        )
        if prep.status != "ok":
            raise JlprofError(f"could not start capture in the sidecar: {prep.evalue}")
        cell = sidecar.execute(code, store_history=True, on_message=on_message, on_input=on_input)
        result.interrupted = cell.interrupted
        if cell.status != "ok":
            result.cell_error = f"{cell.ename}: {cell.evalue}"
        step = _Steps(opts, result.timings_s)  # shown now: the cell's own output is complete
        end = sidecar.execute(
            "pass", silent=True, user_expressions={"r": "_jlprof_capture.CAPTURE.end()"}
        )
        info = ast.literal_eval(end.expression("r"))
    except SidecarDied as exc:
        session.died()
        kept = sidecar.rescue(folder, opts.nsys_base_name)
        result.status, result.error = "analysis_failed", str(exc)
        if kept is not None:
            result.nsys_report = kept
            result.error += (
                f" What nsys recorded until then is kept: %dlprof --database={kept} analyses it."
            )
        _write_manifest(result, opts)
        raise SidecarDied(result.error) from None
    except SidecarBusy as exc:  # still capturing: its report comes when the sidecar stops
        result.status, result.error = "analysis_failed", str(exc)
        _write_manifest(result, opts)
        raise
    if info.get("error"):
        result.warnings.append(f"capture error in the sidecar: {info['error']}")
    if not info["captured"]:
        result.status = "capture_empty"
        result.error = (
            f"nothing was captured: the cell ended before --delay {opts.delay:g} s elapsed"
            if opts.delay
            else "nothing was captured"
        )
        step.done("nothing captured")
        _write_manifest(result, opts)
        return result
    step(STEPS[1])
    raw = sidecar.wait_for_capture()
    if raw is None:
        result.status = "capture_empty"
        result.error = (
            "nsys wrote no report for this cell: the capture range never started (nsys's NVTX "
            "injection did not attach to jlprof's range). nsys said: "
            f"{nsys._last_lines(sidecar.tail)}"
        )
        step.done("nothing captured")
        _write_manifest(result, opts)
        return result

    def rerun_under_ncu(result: RunResult) -> None:
        if opts.ncu is not None:
            try:
                ncu_rerun(result, opts, session.setup_cells, code, say, session.cwd)
            except JlprofError as exc:
                result.warnings.append(f"--ncu: {exc}")

    return analyse_capture(raw, result, opts, step, then=rerun_under_ncu)


def analyse_capture(
    raw: Path,
    result: RunResult,
    opts: RunOptions,
    step: _Steps,
    then: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """The raw report of a capture into the run folder, imported, analysed, reported: the same
    for a sidecar capture and an in-place one (:mod:`jlprof.magics.inplace`); ``then`` runs on
    an analysed result before its manifest is written (the sidecar's ``--ncu`` re-run)."""
    folder = result.folder
    assert folder is not None
    target = folder / f"{opts.nsys_base_name}{raw.suffix}"
    with outputs.written(target) as tmp:  # moved: the sidecar's temp folder must not fill up
        shutil.move(raw, tmp)
    result.nsys_report = target
    try:
        step(STEPS[2])
        result.database = nsys.ensure_sqlite(
            target, force=True, progress=lambda m: step(_step_of(m))
        )
        rep = target.with_suffix(".nsys-rep")
        result.nsys_report = rep if rep.exists() else target
        step(STEPS[4])
        result.profile, warnings = analyse(result.database, opts, capture_domain=DOMAIN)
        result.warnings += warnings
        if opts.gpu_metrics and result.profile.report("gpu_metrics").empty:
            from jlprof.engine.analyses.gpu_metrics import UNAVAILABLE

            result.warnings.append(UNAVAILABLE)
        step(STEPS[5])
        result.written = result.profile.write_reports(
            folder, opts.reports, opts.formats, force=opts.force, progress=step.progress.detail
        )
    except JlprofError as exc:
        result.status, result.error = "analysis_failed", str(exc)
        step.done("analysis failed")
        _write_manifest(result, opts)
        return result
    except (Exception, KeyboardInterrupt) as exc:
        # nothing lost: the raw nsys files stay in the folder, the manifest says what happened
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}"
        result.status = "analysis_failed"
        result.error = (
            f"analysis failed ({why}: {exc}); the raw nsys files are kept in {folder}: "
            "re-analyse them with %dlprof --database (-v diagnostic shows the traceback)"
        )
        step.done("analysis failed")
        _write_manifest(result, opts)
        if isinstance(exc, KeyboardInterrupt) or opts.verbosity == "diagnostic":
            raise
        return result
    step.done(f"{result.profile.iterations.count} iterations analysed")
    if then is not None:
        then(result)
    _write_manifest(result, opts)
    return result


def ncu_rerun(
    result: RunResult,
    opts: RunOptions,
    setup_cells: list[str],
    code: str,
    say: Say,
    cwd: Path | None = None,
    ncu: str | None = None,
) -> Path | None:
    """``%%dlprof --ncu``: the setup cells and the cell as one script in the run folder, run
    under ncu for the kernels chosen from the cell's profile; ncu's report joined to the
    profile. Without ncu on PATH the command is kept for a GPU machine. Returns the report."""
    from jlprof.nsys.ncu import SLOWDOWN_NOTE

    folder = result.folder or Path(".")
    script = folder / "ncu_cell.py"
    with outputs.written(script) as tmp:
        tmp.write_text("\n\n".join([*setup_cells, code]) + "\n", encoding="utf-8")
    result.written.append(script)
    cmd = result.profile.ncu_command([sys.executable, str(script)], opts.ncu,
                                     output=str(folder / "ncu_cell"), force=opts.force)  # fmt: skip
    exe = ncu or shutil.which("ncu")
    line = shlex.join(cmd.argv)
    if exe is None:
        result.warnings.append(f"ncu is not on PATH: nothing re-run. On a machine with a GPU "
                               f"and Nsight Compute: {line}; then %dlprof --database="
                               f"{result.database} --ncu_report={cmd.output}")  # fmt: skip
        return None
    say(f"re-running the cell under ncu for {cmd.what}. {SLOWDOWN_NOTE}.")
    proc = subprocess.run([exe, *cmd.argv[1:]], cwd=cwd, check=False)
    if proc.returncode != 0 or not cmd.output.is_file():
        raise JlprofError(f"ncu exited with status {proc.returncode} and no report ({line})")
    result.written.append(cmd.output)
    result.profile.attach_ncu(cmd.output)
    return cmd.output


def _step_of(message: str) -> str:
    return STEPS[2] if message.startswith("Importing") else STEPS[3]


def analyse(
    database: Path, opts: RunOptions, *, capture_domain: str | None = None
) -> tuple[Any, list[str]]:
    """Load ``database`` into a Profile with the options; returns it and health-check hints.

    A missing key node or a bad iteration range is a hint, not a failure: the profile is still
    worth looking at, and the message says what to change.
    """
    from jlprof.engine.read.store import read_any
    from jlprof.profile import Profile

    path = nsys.ensure_sqlite(database) if database.suffix != ".jlprof" else database
    trace = read_any(path)
    warnings: list[str] = list(trace.warnings)
    if capture_domain is not None:
        trace = without_capture_range(trace, capture_domain)
    nv = trace.nvtx
    if len(nv) == 0 and not any("NVTX_EVENTS" in w for w in warnings):  # said once
        warnings.append(
            "no NVTX ranges in the capture: jlprof finds ops and iterations from NVTX ranges. "
            "Annotate the loop (nvtx.annotate('optimizer_step') around the optimizer step), "
            "or use -m pytorch for PyTorch models."
        )
    profile = Profile(
        trace,
        domains=opts.domains,
        mode=opts.mode,
        profile_name=opts.profile_name,
    )
    if opts.key_node is not None:
        try:
            profile.set_key_node(opts.key_node)
        except AnalysisError as exc:  # say what is used instead, never silently
            instead = (
                f"using the default key node {profile.key_node!r} instead"
                if profile.key_node
                else "the whole capture is one iteration"
            )
            warnings.append(f"no key node instances: {exc} {instead}.")
    elif profile.key_node is None and len(nv):
        cands = ", ".join(profile.suggest_key_nodes(3)["op_name"].astype(str)) or "none"
        warnings.append(
            "no key node found (tried global_step, optimizer_step): the whole capture is one "
            f"iteration. Candidates for --key_node: {cands}"
        )
    if opts.iter_start is not None or opts.iter_stop is not None:
        try:
            profile.set_range(opts.iter_start, opts.iter_stop)
        except AnalysisError as exc:
            warnings.append(str(exc))
    if opts.ncu_report is not None:  # docs/kernels.md: a failed join leaves the profile
        try:
            profile.attach_ncu(opts.ncu_report)
        except JlprofError as exc:
            warnings.append(f"--ncu_report not joined: {exc}")
    return profile, warnings


def without_capture_range(trace: Any, domain: str) -> Any:
    """The trace without jlprof's own capture range, cut at the range's end.

    The range is jlprof's, not an op of the user's. nsys keeps collecting while it flushes at
    the range's pop (about 2 s here), so events that start after the pop are dropped: that is
    what makes ``--duration`` stop where it says.
    """
    nv = trace.nvtx
    if not len(nv):
        return trace
    ours = (nv["domain"].astype(str) == domain).to_numpy()
    if not ours.any():
        return trace
    end = int(nv.loc[ours, "end_ns"].max())
    kept = nv[~ours & (nv["start_ns"].to_numpy() <= end)].reset_index(drop=True)
    kept["domain"] = kept["domain"].cat.remove_unused_categories()
    clip = {
        "gpu": trace.gpu[trace.gpu["start_ns"] <= end].reset_index(drop=True),
        "api": trace.api[trace.api["start_ns"] <= end].reset_index(drop=True),
        "marks": trace.marks[trace.marks["ts_ns"] <= end].reset_index(drop=True),
        "osrt": trace.osrt[trace.osrt["start_ns"] <= end].reset_index(drop=True),
    }
    return dataclasses.replace(trace, nvtx=kept, **clip)


def reanalyse(opts: RunOptions) -> RunResult:
    """``%dlprof --database=FILE``: the guide's "running DLProf without profiling" (§4.8)."""
    assert opts.database is not None
    if not opts.database.exists():
        raise JlprofError(f"{opts.database}: no such file (give the .sqlite, .nsys-rep or .jlprof)")
    profile, warnings = analyse(opts.database, opts)
    result = RunResult(folder=opts.output_path, profile=profile, warnings=warnings)
    result.database = opts.database
    if opts.output_path is not None:
        folder = outputs.prepare_folder(opts.output_path)
        with outputs.folder_lock(folder):
            result.written = profile.write_reports(
                folder, opts.reports, opts.formats, force=opts.force
            )
    return result


def _write_manifest(result: RunResult, opts: RunOptions) -> None:
    if result.folder is None:
        return
    headline = None
    if result.profile is not None:
        try:
            headline = result.profile.headline()
        except Exception as exc:  # a headline failure must not lose the run's record
            result.warnings.append(f"headline numbers unavailable: {exc}")
    data = runs.manifest(
        profile_name=opts.profile_name,
        database=result.database,
        nsys_report=result.nsys_report,
        status=result.status,
        headline=headline,
        key_node=opts.key_node,
        error=result.error,
    )
    runs.write_manifest(result.folder, data)


def describe(result: RunResult, cwd: Path | None = None) -> str:
    """One or two plain lines about the run, for the notebook."""
    where = ""
    if result.folder is not None:
        folder = result.folder
        base = cwd or Path.cwd()
        with contextlib.suppress(ValueError):
            folder = folder.resolve().relative_to(base.resolve())
        where = f" → {folder}/"
    if result.status == "ok":
        return f"jlprof: profile {result.status}{where} ({len(result.written)} report files)"
    return f"jlprof: {result.status}{where}: {result.error}"


__all__ = ["RunResult", "Session", "analyse", "describe", "reanalyse", "run_captured", "run_setup"]
