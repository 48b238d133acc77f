"""Stage progress of the ``jlprof`` command on the console (stderr).

Nothing shows for a run that ends within ``delay`` seconds (2 s): the common small trace stays
quiet. After that each stage is shown by name, with the elapsed time and its rank among the
known stages, one line per stage (the command's other messages go to the same stream, so a line
redrawn in place would be cut by them). stderr, because stdout carries the summary that scripts
read.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

DELAY_S = 2.0


class StageProgress:
    """Called with each stage's name as the work moves on, ``close()`` at the end; ``total``
    (the stages expected) grows if more come. ``echo`` instead hands every name on at once
    (``-v detailed`` prints its own lines); ``enabled=False`` shows nothing (quiet)."""

    def __init__(
        self,
        total: int,
        *,
        delay: float | None = None,
        stream: TextIO | None = None,
        echo: Callable[[str], None] | None = None,
        enabled: bool = True,
    ) -> None:
        self.total = total
        self.echo = echo
        self.enabled = enabled
        self.delay = DELAY_S if delay is None else delay
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.perf_counter()
        self.index = 0
        self.name = ""
        self.shown = 0

    def __call__(self, name: str) -> None:
        self.index += 1
        self.total = max(self.total, self.index)
        self.name = name
        if self.echo is not None:
            self.echo(name)
        elif self.enabled:
            self._show()

    def _show(self) -> None:
        elapsed = time.perf_counter() - self.t0
        if elapsed < self.delay:
            return
        line = f"[jlprof {elapsed:6.2f}s] {self.name} ({self.index}/{self.total})"
        self.stream.write(line + "\n")
        self.stream.flush()
        self.shown += 1

    def close(self) -> None:
        """The end: one last line when stages were shown, saying how long it all took."""
        if self.shown and self.echo is None and self.enabled:
            elapsed = time.perf_counter() - self.t0
            self.stream.write(f"[jlprof {elapsed:6.2f}s] done ({self.index} stages)\n")
            self.stream.flush()
