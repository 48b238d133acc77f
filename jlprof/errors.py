"""User-facing errors.

Everything jlprof raises for a problem the user can fix (a missing tool, a bad option, a file that
cannot be read) derives from :class:`JlprofError`, so the CLI and the magics can print the one-line
message instead of a traceback. Programming errors stay ordinary exceptions.
"""

from __future__ import annotations


class JlprofError(Exception):
    """A problem the user can fix; the one-line message says what went wrong and how to fix it."""


__all__ = ["JlprofError"]
