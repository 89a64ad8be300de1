"""The README's torch install: both routes are commands a user can paste (PyTorch's CPU index, and a
mirror or wheel folder without that host)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.split("#", 1)[0].strip() for b in blocks for line in b.splitlines()]


def test_both_torch_routes_are_commands():
    cmds = _commands()
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in cmds
    assert "pip install torch==2.13.0" in cmds  # plain PyPI or the configured mirror
    assert any(c.startswith("pip install --no-index --find-links") and c.endswith("torch==2.13.0") for c in cmds)
