"""Entry point of the sidecar kernel process: ``python -m jlprof.sidecar.kernel -f CONN``.

nsys is started with ``TMPDIR`` pointing into the sidecar's private folder, so its capture files
are never readable by other users; the user's code must not notice, so the original ``TMPDIR``
is put back here before ipykernel starts.

ipykernel also opens a localhost TCP port (the IOPub "pipe" that forwards output of forked child
processes) even when the kernel itself uses IPC. The sidecar must not listen on any TCP port, so
that pipe is switched off: output printed by forked workers goes to the sidecar's own stdout
(read by jlprof along with nsys's output, and quoted in error messages) instead of the notebook.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

ORIGINAL_TMPDIR = "JLPROF_SIDECAR_TMPDIR"
PARENT_PID = "JLPROF_SIDECAR_PARENT"


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
    from ipykernel import iostream, kernelapp

    plain_init = iostream.IOPubThread.__init__

    def init_without_tcp_pipe(self, socket, pipe=False, session=False):  # type: ignore[no-untyped-def]
        plain_init(self, socket, pipe=False, session=session)

    iostream.IOPubThread.__init__ = init_without_tcp_pipe  # type: ignore[method-assign]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
