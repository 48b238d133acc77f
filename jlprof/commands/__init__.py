"""``jlprof`` sub-commands beside DLProf's command line (``jlprof diff``, ``ncu``, ``prof``); each
in its own module, dispatched on the first word by :func:`jlprof.cli.main`."""

from __future__ import annotations

import sys
from collections.abc import Callable

from jlprof.errors import JlprofError


def guarded(prog: str, body: Callable[[], int], *, reraise: bool = False) -> int:
    """``body()``'s exit status; a user's error (a jlprof error, a file the system refused) is
    one line ``PROG: error: ...`` and exit 2, an interrupt exit 130, as DLProf's command does.
    ``reraise``: jlprof errors keep their traceback (``-v diagnostic``)."""
    try:
        return body()
    except JlprofError as exc:
        if reraise:
            raise
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{prog}: error: {exc.filename or 'a file'}: {exc.strerror or exc}; check "
              "the path and its permissions.", file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
