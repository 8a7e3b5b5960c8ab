"""The in-memory head of the embedded engine (architecture §1.2a): open row-hours."""

from tsd.head.head import Head, HeadRow, HeadRuns, HeadSnapshot, Taken

__all__ = ["Head", "HeadRow", "HeadRuns", "HeadSnapshot", "Taken"]
