"""What the detectors report: which words spell a value, and of which entity type."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.contracts.messages import EntityType

__all__ = ["Span"]


@dataclass(frozen=True, slots=True, order=True)
class Span:
    """Words ``first..last`` (indices into the word list, inclusive) spell a value of
    ``entity``."""

    first: int
    last: int
    entity: EntityType
