"""profile: an --out that is not a regular file, and an empty --tools list, fail in one line."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_profile_out_must_be_a_regular_file(cli):
    code, out, err = cli("profile", "--out", "/dev/full", "--tools", "groupby", "--runs", "1")
    assert code != 0 and out == ""
    assert err.splitlines() == ["error: --out: /dev/full is not a regular file"]


def test_profile_tools_selecting_nothing_is_one_line(cli, tmp_path):
    code, out, err = cli("profile", "--out", str(tmp_path / "c.json"), "--tools", ",")
    assert code != 0 and out == ""
    assert err.splitlines() == ["error: --tools ',' selects no tools (give 'all' or a comma list, e.g. clip,groupby)"]
    assert not (tmp_path / "c.json").exists()
