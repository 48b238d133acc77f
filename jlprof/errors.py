"""User-facing errors: one line naming the cause and the fix, never a traceback by default."""

from __future__ import annotations


class JlprofError(Exception):
    """Base of every error jlprof reports to a user (CLI exit 2, magic prints the message)."""


class InputError(JlprofError):
    """The input file is missing, not a database, or not an nsys export."""


class AnalysisError(JlprofError):
    """The options do not fit the profile (unknown key node, iteration range out of bounds)."""
