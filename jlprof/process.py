"""What the ``jlprof`` command sets for its own process, before any library loads.

Imported first by :mod:`jlprof.cli` (the command's process only: a notebook's kernel and a
library user's process keep their own settings).

Arrow's memory pool (mimalloc) gives the pages of freed buffers back to the system only
after a delay that it checks at its next allocation or free, so the pages of buffers a
kernel frees while it grows (a hash table's old slots, a builder's old buffers) stay
resident beside the new ones: at the 13.4M range texts of a 10M-kernel PyTorch run, the
read's text encoding peaked at 2002 MiB with no delay and 2061-2265 MiB with it (in two of
three runs the higher). mimalloc reads the delay from the environment when Arrow's library
loads, so it is set around that load (unless the environment gives one: that one is kept) and
taken out again: the programs the command starts (``jlprof ncu``'s) get the environment as it
was.
"""

from __future__ import annotations

import os

PURGE_DELAY = "MIMALLOC_PURGE_DELAY"  # mimalloc's option (milliseconds), read at load


def _load_arrow_without_purge_delay() -> None:
    given = os.environ.get(PURGE_DELAY)
    if given is None:
        os.environ[PURGE_DELAY] = "0"
    try:
        import pyarrow  # noqa: F401 - loads Arrow's mimalloc, which reads its options now
    except ImportError:  # the reader says what is missing, where it needs it
        pass
    finally:
        if given is None:
            os.environ.pop(PURGE_DELAY, None)


_load_arrow_without_purge_delay()
