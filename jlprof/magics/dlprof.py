"""``%%dlprof`` / ``%dlprof``: the thin IPython layer (parse → run → show).

Parsing is :mod:`jlprof.magics.options`, running is :mod:`jlprof.magics.run`; this module only
wires them to IPython: option definitions (``%dlprof?`` lists them), forwarding the sidecar's
output to the notebook as it arrives, binding and displaying the result.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import clear_output, display, publish_display_data

from jlprof.distributed import several
from jlprof.errors import JlprofError
from jlprof.magics import inplace, run
from jlprof.magics import options as opt
from jlprof.magics.diff import run_diff
from jlprof.magics.ranks import reanalyse_ranks
from jlprof.options import MAGIC, magic_arguments_from_table, notes, parse_words

COMM_MESSAGES = ("comm_open", "comm_msg", "comm_close")


def _publish_comm(msg: dict[str, Any]) -> None:
    """Pass a comm message of the sidecar (a widget's model: tqdm.auto, ipywidgets) to this
    kernel's frontend, so the widget views it displays have their models."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:  # not in a kernel (a terminal IPython): no frontend to show widgets
        return
    content = msg["content"]
    kernel.session.send(
        kernel.iopub_socket,
        msg["header"]["msg_type"],
        content,
        metadata=msg.get("metadata") or {},
        parent=kernel.get_parent(),
        ident=f"comm-{content.get('comm_id', '')}".encode(),
        buffers=list(msg.get("buffers") or []),
    )


class CellFailed(Exception):
    """A ``%%dlprof`` cell that failed: raised after the analysis of what ran is shown, so the
    notebook cell fails too ("Run All" and nbconvert stop there). Rendered as its one line, no
    traceback: the profiled code's own traceback came from the sidecar already."""

    def _render_traceback_(self) -> list[str]:
        return [f"jlprof: {self}"]


def forward(msg: dict[str, Any]) -> None:
    """Show one iopub message of the sidecar in this kernel's output, as it arrives."""
    kind = msg["header"]["msg_type"]
    content = msg["content"]
    if kind in COMM_MESSAGES:
        _publish_comm(msg)
    elif kind == "stream":
        stream = sys.stderr if content.get("name") == "stderr" else sys.stdout
        stream.write(content.get("text", ""))
        stream.flush()
    elif kind in ("display_data", "execute_result", "update_display_data"):
        publish_display_data(
            content.get("data", {}),
            metadata=content.get("metadata") or {},
            transient=content.get("transient") or None,
            update=kind == "update_display_data",
        )
    elif kind == "error":
        sys.stderr.write("\n".join(content.get("traceback", [])) + "\n")
        sys.stderr.flush()
    elif kind == "clear_output":
        clear_output(wait=bool(content.get("wait")))


def parse_line(magic: Any, line: str) -> Any:
    """IPython's ``parse_argstring`` with POSIX quoting, so DLProf's own spelling
    ``--nsys_opts="-t cuda,nvtx"`` works (IPython's splitter keeps ``="-t`` and ``nvtx"`` as two
    words with their quotes), and DLProf's grammar as the CLI has it
    (:func:`jlprof.options.split_argv`: ``--reports kernel tensor --``). The options given are
    in the namespace's ``given_options``."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot split the options: {exc} (check the quotes)") from None
    ns, ns.given_options = parse_words(magic.parser, words)
    return ns


def network_line(status: dict[str, Any]) -> str:
    """The sidecar's network, and what of it can be reached: nothing, or nsys's agent port."""
    if status.get("private_network"):
        return (
            "network: --isolate_network: nsys and the profiled code run in a private network "
            "namespace (loopback only: no network for the profiled code); no TCP port of the "
            "sidecar is reachable from outside"
        )
    ports = [
        f"{addr}:{port} (pid {pid} {name})"
        for addr, port, pid, name in status.get("listeners", [])
        if not addr.startswith("127.") and addr != "::1"
    ]
    if not ports:
        return "network: the notebook's; no TCP port of the sidecar listens beyond loopback"
    return (
        f"network: the notebook's; nsys's agent listens on {', '.join(ports)} while the sidecar "
        "lives (nsys's own behaviour, as with nsys profile by hand: it has no option to bind it "
        "to loopback); a firewall can block that port, or --isolate_network=true hides it in a "
        "private network namespace, which also cuts the profiled code off the network"
    )


@magics_class
class DlprofMagics(Magics):
    """Profile notebook cells under Nsight Systems in a persistent sidecar kernel."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.session = run.Session()
        self.last_result: run.RunResult | None = None
        self.inplace = inplace.InPlace()

    @magic_arguments()
    @argument(
        "command",
        nargs="*",
        help="line magic only: 'kernel status', 'kernel restart' or 'kernel shutdown'",
    )
    @argument(
        "--setup",
        action="store_true",
        help="run the cell in the sidecar without capturing it (imports, model, data)",
    )
    @argument(
        "-o",
        dest="name",
        default=opt.DEFAULT_NAME,
        help=f"name to bind the resulting Profile to (default {opt.DEFAULT_NAME})",
    )
    @magic_arguments_from_table
    @no_var_expand
    @line_cell_magic
    def dlprof(self, line: str, cell: str | None = None) -> None:
        """Profile a cell in the sidecar kernel under nsys and show DLProf's reports.

        %%dlprof [options]          profile the cell (captured)
        %%dlprof --setup            run the cell in the sidecar, not captured
        %dlprof --database=FILE     re-analyse an existing profile
        %dlprof --diff BASE NEW     compare two profiles (diff view, verdict; docs/diff.md)
        %dlprof kernel status|restart|shutdown
        %dlprof enable [nsys launch options] | disable    in-place mode (docs/notebook.md)
        %dlprof start [options] ... %dlprof stop          capture in place across cells
        """
        command = inplace.split_command(line) if cell is None else None
        if command is not None:
            try:
                self._inplace(*command)
            except JlprofError as exc:
                print(f"jlprof: {exc}", file=sys.stderr)
            return
        try:
            ns = parse_line(self.dlprof, line)
        except UsageError as exc:
            raise UsageError(f"{exc}\n\n{self.dlprof.parser.format_usage()}") from None
        try:
            opts = opt.from_namespace(ns, cell=cell is not None)
        except JlprofError as exc:
            raise UsageError(str(exc)) from None
        if opts.says("minimal"):
            for note in notes(ns, ns.given_options, MAGIC):
                self._say(note.removeprefix("note: "))
        try:
            self._dispatch(opts, cell)
        except JlprofError as exc:  # SidecarDied and NsysNotFound (install hint) included
            if opts.verbosity == "diagnostic":
                raise
            raise CellFailed(str(exc)) from None

    def _say(self, text: str) -> None:
        """jlprof's notes: informational ones on stdout (JupyterLab paints stderr as an error)."""
        stream = sys.stderr if isinstance(text, run.Problem) else sys.stdout
        print(f"jlprof: {text}", file=stream, flush=True)

    def _warn(self, text: str) -> None:
        print(f"jlprof: {text}", file=sys.stderr, flush=True)

    def _dispatch(self, opts: opt.RunOptions, cell: str | None) -> None:
        if opts.kernel is not None:
            self._kernel(opts)
        elif opts.diff is not None:
            result = run_diff(opts)
            self.shell.user_ns[opts.name] = result
            if opts.says("minimal"):
                display(result)
        elif opts.database is not None and several(str(opts.database)):
            ranks = reanalyse_ranks(opts)  # a job's ranks: a directory or a glob
            self.shell.user_ns[opts.name] = ranks
            display(ranks)
        elif opts.database is not None:
            result = run.reanalyse(opts)
            self._show(result, opts)
        elif inplace.active() and opts.setup:
            self.shell.run_cell(cell or "")  # this kernel is the profiled one: nothing to capture
        elif inplace.active():
            result = self.inplace.run_cell(opts, cell or "", self.shell.run_cell, self._say)
            self._show(result, opts)
        elif opts.setup:
            res = run.run_setup(
                self.session, opts, cell or "", forward, self._say, on_input=self._input_source()
            )
            if res.interrupted:
                raise CellFailed("setup cell interrupted; the sidecar keeps its state")
            if res.status != "ok":
                raise CellFailed(f"the setup cell raised {res.ename}: {res.evalue}")
        else:
            result = run.run_captured(
                self.session, opts, cell or "", forward, self._say, on_input=self._input_source()
            )
            self._show(result, opts)

    def _input_source(self) -> Any:
        """How the sidecar's ``input()``/``getpass`` are answered: by this kernel's frontend
        when it takes input (JupyterLab does; nbclient and nbval do not, and then the profiled
        ``input()`` raises StdinNotImplementedError, as it would in this kernel)."""
        kernel = getattr(self.shell, "kernel", None)
        if kernel is None or not getattr(kernel, "_allow_stdin", False):
            return None

        def ask(prompt: str, password: bool) -> str:
            return kernel.getpass(prompt) if password else kernel.raw_input(prompt)

        return ask

    def _inplace(self, command: str, rest: str) -> None:
        """``%dlprof enable|disable|start|stop`` (:mod:`jlprof.magics.inplace`)."""
        if command in ("enable", "disable"):
            inplace.restart_with(command == "enable", rest, self._say)
        elif command == "start":
            opts = opt.from_namespace(parse_line(self.dlprof, rest), cell=True)
            self.inplace.start(opts, self._say)
            self._say("capturing in place until %dlprof stop")
        else:
            opts = self.inplace.current.opts if self.inplace.current else opt.RunOptions()
            self._show(self.inplace.stop(self._say), opts)

    def _kernel(self, opts: opt.RunOptions) -> None:
        if opts.kernel == "status":
            if inplace.active() or inplace.can_enable():
                print(self.inplace.status())
            st = self.session.status()
            if not st["running"]:
                lost = " (the last one died; its state is lost)" if st.get("state_lost") else ""
                print(f"sidecar: not running{lost}; the next %%dlprof starts one")
                return
            print(
                f"sidecar: running, kernel pid {st['kernel_pid']}, nsys pid {st['nsys_pid']}, "
                f"capture {st['capture']}, {st['captures']} captures, up {st['uptime_s']:.0f} s"
            )
            print(network_line(st))
        elif opts.kernel == "shutdown":
            had = self.session.shutdown()
            print("sidecar: shut down" if had else "sidecar: was not running")
        else:
            nsys_opts = opts.nsys_opts if opts.nsys_opts_given else self.session.nsys_opts
            isolate = (
                opts.isolate_network if opts.isolate_network_given else self.session.isolate_network
            )
            self.session.shutdown()
            self.session.ensure(nsys_opts, True, self._say, isolate_network=isolate)
            print("sidecar: restarted (fresh state)")

    def _show(self, result: run.RunResult, opts: opt.RunOptions) -> None:
        """Bind and display the result; then fail the cell if the profiled code did not end."""
        if opts.says("minimal"):
            for warning in result.warnings:
                self._warn(warning)
        if result.profile is not None:
            self.shell.user_ns[opts.name] = result.profile
        self.last_result = result
        if opts.says("detailed") and result.timings_s:
            steps = ", ".join(f"{k} {v:.2f} s" for k, v in result.timings_s.items())
            self._say(f"after the cell: {steps}")
        if opts.says("minimal"):
            text = run.describe(result, Path.cwd())
            print(text, file=sys.stdout if result.status == "ok" else sys.stderr, flush=True)
        if result.profile is not None and opts.says("minimal"):
            display(result.profile)
        if result.interrupted:
            raise CellFailed("interrupted: the capture was stopped; the profile covers what ran")
        if result.cell_error:
            raise CellFailed(f"the cell raised {result.cell_error}; the profile covers what ran")


def register(ipython: Any) -> None:
    ipython.register_magics(DlprofMagics)
