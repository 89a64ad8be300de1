"""Package data: card sets, the built-in scenarios, the paper's tables, the results.json schema."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=1)
def paper_tables() -> dict[str, Any]:
    """The paper's figures (a copy of shared/reference/paper_tables.json). Scoring and reports only:
    no policy may read it (it holds the paper's oracle mappings)."""
    return json.loads((resources.files("agentsched.data") / "paper_tables.json").read_text())
