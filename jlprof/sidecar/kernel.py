"""Entry point of the sidecar kernel process: ``python -m jlprof.sidecar.kernel -f CONN``.

nsys is started with ``TMPDIR`` pointing into the sidecar's private folder, so its capture files
are never readable by other users; the user's code must not notice, so the original ``TMPDIR``
is put back here before ipykernel starts.

The profiled code's output reaches the cell as in a plain kernel, child processes' included:

- ipykernel's IOPub "pipe", through which forked children (``multiprocessing``, DataLoader
  workers) send what they print to the kernel, is a localhost TCP port in ipykernel; the sidecar
  listens on no TCP port, so here it is an IPC socket in the sidecar's private folder.
- Output written to the file descriptors 1 and 2 (``subprocess.run(["echo", ...])``, C
  libraries, spawned workers) is captured by ipykernel's OutStream (``capture_fd_output``), here
  always: ipykernel turns it off when ``PYTEST_CURRENT_TEST`` is set, which a notebook kernel
  started by a test inherits. It is also echoed to the sidecar's own stdout, which jlprof keeps
  with nsys's output for error messages.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

ORIGINAL_TMPDIR = "JLPROF_SIDECAR_TMPDIR"
PARENT_PID = "JLPROF_SIDECAR_PARENT"
PIPE = "JLPROF_SIDECAR_PIPE"
"""The ``ipc://`` address of the fork pipe (in the sidecar's private folder)."""


def _watch_parent(pid: int, every_s: float = 1.0) -> None:
    """End this kernel when the notebook kernel that owns it is gone (even killed with -9).

    ipykernel's own parent poller watches its direct parent, which here is nsys: it would keep
    an orphaned sidecar alive forever. Exiting lets nsys write what it has and exit too.
    """

    def alive() -> bool:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def run() -> None:
        while alive():
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=run, name="jlprof-parent-watch", daemon=True).start()


def _pipe_over_ipc(thread_class, address: str) -> None:  # type: ignore[no-untyped-def]
    """ipykernel's fork pipe bound to ``address`` (ipc://) instead of a localhost TCP port; off
    when no address is given (then forked children's output is lost, never a TCP port)."""
    plain_init = thread_class.__init__

    def init(self, socket, pipe=False, session=False):  # type: ignore[no-untyped-def]
        plain_init(self, socket, pipe=False, session=session)
        if pipe and address:
            import zmq
            from zmq.eventloop.zmqstream import ZMQStream

            self._pipe_uuid = os.urandom(16)
            pipe_in = self.socket.context.socket(zmq.PULL)
            pipe_in.linger = 0
            pipe_in.bind(address)
            self._pipe_in = ZMQStream(pipe_in, self.io_loop)
            self._pipe_in.on_recv(self._handle_pipe_msg)
            self._pipe_flag = True

    def pipe_out(self):  # type: ignore[no-untyped-def]
        import zmq

        ctx = zmq.Context()  # a new context after the fork, as ipykernel's own
        out = ctx.socket(zmq.PUSH)
        out.linger = 3000
        out.connect(address)
        return ctx, out

    thread_class.__init__ = init
    thread_class._setup_pipe_out = pipe_out


def _always_capture_fds(stream_class) -> None:  # type: ignore[no-untyped-def]
    """OutStream's fd capture on even under pytest (see the module's docstring)."""
    plain_init = stream_class.__init__

    def init(self, *args, watchfd=True, **kwargs):  # type: ignore[no-untyped-def]
        plain_init(self, *args, watchfd="force" if watchfd else False, **kwargs)

    stream_class.__init__ = init


def main() -> None:
    parent = os.environ.pop(PARENT_PID, "")
    if parent.isdigit():
        _watch_parent(int(parent))
    original = os.environ.pop(ORIGINAL_TMPDIR, None)
    if original is not None:
        if original:
            os.environ["TMPDIR"] = original
        else:
            os.environ.pop("TMPDIR", None)
        tempfile.tempdir = None
    # stdbuf (used to read nsys's output line by line) preloads itself: not for user programs
    os.environ.pop("_STDBUF_O", None)
    preload = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p]
    kept = [p for p in preload if not p.endswith("libstdbuf.so")]
    if kept != preload:
        os.environ["LD_PRELOAD"] = ":".join(kept)
    pipe = os.environ.pop(PIPE, "")
    from ipykernel import iostream, kernelapp

    _pipe_over_ipc(iostream.IOPubThread, pipe)
    _always_capture_fds(iostream.OutStream)
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
