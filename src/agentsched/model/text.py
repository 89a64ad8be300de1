"""Small wording helpers shared by every printed line and report."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 seed``, ``5 seeds``, ``0 seeds``; ``many`` for irregular plurals."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
