"""User-facing errors.

Everything jlprof raises for a problem the user can fix (a missing tool, a bad option, a file that
cannot be read) derives from :class:`JlprofError`, so the CLI and the magics can print the one-line
message instead of a traceback. Programming errors stay ordinary exceptions.
"""

from __future__ import annotations


class JlprofError(Exception):
    """Base of every error jlprof reports to a user (CLI exit 2, magic prints the message)."""


class InputError(JlprofError):
    """The input file is missing, not a database, or not an nsys export."""


class AnalysisError(JlprofError):
    """The options do not fit the profile (unknown key node, iteration range out of bounds)."""


class OptionError(JlprofError):
    """An option is malformed whatever the profile: wrong type, unknown report or format, empty
    list, a profile name that is not a plain file name. Raised before any trace is read."""


class OutputError(JlprofError):
    """An output file or folder cannot be written (read-only, not a folder, disk full)."""


__all__ = ["AnalysisError", "InputError", "JlprofError", "OptionError", "OutputError"]


class TorchUnavailable(JlprofError, ImportError):
    """PyTorch or the nvtx package is missing: a JlprofError for users, an ImportError for
    callers that treat annotation as optional (the notebook sidecar)."""
