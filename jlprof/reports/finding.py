"""What an expert-system detector returns (guide §10.10), shared by every detector module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Finding:
    detector: str
    problem: str
    recommendation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    action: dict[str, Any] | None = None
