"""Stages 3 and 4: iterations from the key node, then the per-iteration cube and range queries."""
