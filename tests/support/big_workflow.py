"""A workflow too large for ucb1 (its arm cap of 4,096 mappings), for the bench's skip tests."""

from __future__ import annotations

from pathlib import Path

import yaml

TINY = str(Path(__file__).parent.parent / "data" / "workflows" / "tiny.yaml")
CAP_LINE = (
    "policy ucb1: big has 6561 mappings (3^8), over the arm cap of 4096; use a policy that does not enumerate mappings"
)


def write_big(folder: Path) -> str:
    """Eight three-way tasks, as `agentsched generate --tasks 8 --space three_way` writes: 3^8 = 6561
    mappings, over ucb1's arm cap, within the oracle's."""
    path = folder / "big.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "big",
                "cards": "a5500",
                "decision_space": "three_way",
                "edges": [],
                "tasks": {f"T{i}": "groupby" for i in range(8)},
            }
        )
    )
    return str(path)
