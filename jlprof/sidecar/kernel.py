"""Entry point of the sidecar kernel process: ``python -m jlprof.sidecar.kernel -f CONN``.

nsys is started with ``TMPDIR`` pointing into the sidecar's private folder, so its capture files
are never readable by other users; the user's code must not notice, so the original ``TMPDIR``
is put back here before ipykernel starts.
"""

from __future__ import annotations

import os
import tempfile

ORIGINAL_TMPDIR = "JLPROF_SIDECAR_TMPDIR"


def main() -> None:
    original = os.environ.pop(ORIGINAL_TMPDIR, None)
    if original is not None:
        if original:
            os.environ["TMPDIR"] = original
        else:
            os.environ.pop("TMPDIR", None)
        tempfile.tempdir = None
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
