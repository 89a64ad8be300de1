"""tests/slow.txt names tests that exist: a renamed or moved test would otherwise leave the slow list silently
and slow the default run down again (issue 48, item 8)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SLOW_LIST, is_listed_slow, slow_entries

ROOT = Path(__file__).resolve().parents[2]


def test_every_entry_of_the_slow_list_names_an_existing_test():
    missing = []
    for entry in sorted(slow_entries()):
        module, _, name = entry.partition("::")
        path = ROOT / module
        if not path.is_file():
            missing.append(entry)
            continue
        func = name.split("::")[-1].split("[", 1)[0]
        if func and not re.search(rf"^\s*(async )?def {re.escape(func)}\(", path.read_text(), re.M):
            missing.append(entry)
    assert SLOW_LIST.is_file() and not missing


def test_a_module_a_test_or_one_case_can_be_listed():
    entries = {"tests/a.py", "tests/b.py::test_x", "tests/c.py::test_y[1]"}
    assert is_listed_slow("tests/a.py::test_any[2]", entries)
    assert is_listed_slow("tests/b.py::test_x[k]", entries) and not is_listed_slow("tests/b.py::test_xy", entries)
    assert is_listed_slow("tests/c.py::test_y[1]", entries) and not is_listed_slow("tests/c.py::test_y[2]", entries)
