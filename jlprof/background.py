"""Work in a thread of its own while the caller goes on (two cores do two things): a file
written while the engine computes, the next window read while the last is written. The
caller can stop the work within one write (:class:`Checked`), and the work's errors are
raised in the caller's thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, Generic, TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """Raised inside a background write (:class:`InThread`) once its caller gave up on it."""


class InThread(Generic[T]):
    """``work(check)`` in a thread of its own, started now, while the caller goes on (a file
    written while the engine computes: two cores do two things).

    ``work`` calls ``check()`` between writes; after :meth:`cancel` (the caller failed or was
    interrupted) it raises :class:`Cancelled`, so the work stops within one write and its
    temporary file goes (:func:`jlprof.outputs.written`). :meth:`wait` joins and returns the
    result or raises the work's own exception in the caller's thread. A daemon thread: a
    process that exits never waits for it.
    """

    def __init__(self, work: Callable[[Callable[[], None]], T], name: str) -> None:
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._value: T | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[Callable[[], None]], T]) -> None:
        try:
            self._value = work(self.check)
        except BaseException as exc:  # re-raised by wait(), in the caller's thread
            self._error = exc

    def check(self) -> None:
        """Raise :class:`Cancelled` once the caller cancelled (called by the work)."""
        if self._stop.is_set():
            raise Cancelled

    def wait(self) -> T:
        """The work's result, once it ended; its exception if it raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def cancel(self) -> None:
        """Stop the work at its next ``check()`` and wait for it; its error is dropped."""
        self._stop.set()
        self._thread.join()


class Fed(Generic[T]):
    """``work(items, check)`` in a thread of its own (:class:`InThread`), ``items`` yielding
    what the caller :meth:`put`s, in order, through a queue of ``depth``: the caller makes
    the next item (reads and correlates the next window) while the thread handles the last
    (writes it). :meth:`close` ends the items and returns the work's result; the work's error
    is raised in the caller at its next :meth:`put` or at :meth:`close`."""

    _END = object()

    def __init__(
        self,
        work: Callable[[Iterator[Any], Callable[[], None]], T],
        name: str,
        depth: int = 1,
    ) -> None:
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.job: InThread[T] = InThread(lambda check: work(self._items(check), check), name)

    def _items(self, check: Callable[[], None]) -> Iterator[Any]:
        while True:
            try:
                item = self._q.get(timeout=0.2)
            except queue.Empty:
                check()
                continue
            if item is self._END:
                return
            check()
            yield item

    def put(self, item: Any) -> None:
        """Hand ``item`` to the work (waits while the queue is full)."""
        while True:
            try:
                self._q.put(item, timeout=0.2)
                return
            except queue.Full:
                if not self.job._thread.is_alive():  # the work ended: never wait for it
                    self.job.wait()  # raises its error
                    raise RuntimeError(f"{self.job._thread.name} ended before its items") from None

    def end(self) -> None:
        """No more items; the work goes on with those it has (:attr:`job` waits for it)."""
        self.put(self._END)

    def close(self) -> T:
        """No more items: the work's result, once it has handled them all."""
        self.end()
        return self.job.wait()

    def cancel(self) -> None:
        """Stop the work (:meth:`InThread.cancel`)."""
        self.job.cancel()


class Checked:
    """A file whose every ``write`` first calls ``check`` (:meth:`InThread.check`); everything
    else is the file's."""

    def __init__(self, f: IO[bytes], check: Callable[[], None]) -> None:
        self._f, self._check = f, check

    def write(self, data: Any) -> int:
        self._check()
        return self._f.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


__all__ = ["Cancelled", "Checked", "Fed", "InThread"]
