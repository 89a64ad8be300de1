"""report/style.py: one colour per policy, distinct however many policies a bench runs."""

from __future__ import annotations

from matplotlib import colormaps
from matplotlib.colors import to_hex

from agentsched.report import style


def test_policy_colours_are_distinct_for_any_number_of_policies():
    for n in (1, 10, 11, 20, 21, 60, 61, 200):
        colours = style.policy_colors(n)
        assert len(colours) == n and len(set(colours)) == n, n
    # the default bench runs 11 policies: the 11th used to cycle back to the 1st's C0
    assert len({style.policy_style(j, 11)["color"] for j in range(11)}) == 11


def test_up_to_ten_policies_keep_matplotlibs_tab10_and_more_only_add_colours():
    assert style.policy_colors(10) == [to_hex(c) for c in colormaps["tab10"].colors]
    assert style.policy_colors(25)[:10] == style.policy_colors(10)
