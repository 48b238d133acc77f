"""Progress while nsys finalises, imports and exports and while the engine analyses.

In a notebook (an ipykernel with ipywidgets) a bar; anywhere else one text line per step on
stdout (progress is information: JupyterLab paints stderr as an error). The widget is
displayed with fixed initial values, so saved notebooks stay comparable.
"""

from __future__ import annotations

import time
from typing import Any


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Progress:
    """``step("importing")`` advances; ``done(text)`` ends. Quiet does nothing at all."""

    def __init__(self, steps: list[str], *, quiet: bool = False, widget: bool | None = None):
        self.steps = steps
        self.quiet = quiet
        self.t0 = time.perf_counter()
        self.index = 0
        self._bar: Any = None
        self._label: Any = None
        use_widget = _in_notebook() if widget is None else widget
        if quiet or not use_widget:
            return
        try:
            import ipywidgets as w
            from IPython.display import display
        except ImportError:
            return
        self._bar = w.IntProgress(value=0, min=0, max=len(steps), description="jlprof")
        self._label = w.Label(value="")
        display(w.HBox([self._bar, self._label]))

    def step(self, name: str) -> None:
        if self.quiet:
            return
        if name in self.steps:
            self.index = self.steps.index(name)
        if self._bar is not None:
            self._bar.value = self.index
            self._label.value = f"{name}…"
        else:
            elapsed = time.perf_counter() - self.t0
            print(
                f"[jlprof {elapsed:5.1f}s] {name} ({self.index + 1}/{len(self.steps)})",
                flush=True,
            )

    def detail(self, text: str) -> None:
        """A sub-step of the current step ("writing iteration.csv") on the bar's label; the
        text form stays one line per step."""
        if self._bar is not None and not self.quiet:
            self._label.value = f"{self.steps[self.index]}: {text}…"

    def done(self, text: str) -> None:
        if self.quiet:
            return
        elapsed = time.perf_counter() - self.t0
        if self._bar is not None:
            self._bar.value = len(self.steps)
            self._bar.bar_style = "success" if "fail" not in text else "danger"
            self._label.value = f"{text} ({elapsed:.1f} s)"
        else:
            print(f"[jlprof {elapsed:5.1f}s] {text}", flush=True)
