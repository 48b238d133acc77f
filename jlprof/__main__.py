"""``python -m jlprof`` runs the command line."""

from jlprof.cli import entry

entry()
