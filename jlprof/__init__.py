"""jlprof: DLProf-style deep-learning profiling of Nsight Systems traces.

``jlprof.load(path)`` works in a plain script; ``%load_ext jlprof`` adds the notebook magics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jlprof.version import __version__

if TYPE_CHECKING:
    from jlprof.profile import Profile


def load(path: str, **options: Any) -> Profile:
    """Read an nsys export (``.sqlite``, ``.nsys-rep``, ``.qdrep``) or a jlprof database."""
    from jlprof.profile import load as _load

    return _load(path, **options)


def load_ranks(paths: Any, **options: Any) -> Any:
    """Analyse one nsys export per rank of a distributed job on Dask (``jlprof.distributed``)."""
    from jlprof.distributed import load_ranks as _load_ranks

    return _load_ranks(paths, **options)


def __getattr__(name: str) -> Any:
    """``jlprof.Profile``, imported on first use: ``import jlprof`` stays free of pandas."""
    if name == "Profile":
        from jlprof.profile import Profile

        return Profile
    raise AttributeError(f"module 'jlprof' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%dlprof``/``%dlprof``; imported lazily so scripts never pay for IPython."""
    from jlprof.magics import register

    register(ipython)


__all__ = ["Profile", "__version__", "load", "load_ipython_extension", "load_ranks"]
