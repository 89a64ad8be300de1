"""What every plot shares: the Agg backend, one line/marker style per policy, and labels that the
font can draw (user text such as workflow or tool names may hold characters the font lacks, which
matplotlib draws as empty boxes with a warning, or ``$`` that it would read as math)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

# one (linestyle, marker) per policy index, repeating: colour alone does not tell lines apart on top
# of each other or in greyscale
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (6, 2, 1, 2)))
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">")


def plt() -> Any:
    """matplotlib.pyplot on the Agg backend (imported lazily: the core does not need matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def policy_colors(n: int) -> list[str]:
    """``n`` distinct colours, the j-th for the j-th policy of a run; every plot of one report takes
    them from here, so a policy has one colour throughout. Up to 10 policies: matplotlib's tab10 (its
    default C0-C9, but fixed: not whatever a matplotlibrc cycles); up to 60: then tab20b, tab20c and
    tab20's light shades; beyond: n hues evenly around the colour wheel. (Cycling C0-C9 gave the 11th
    policy of the default bench, agent-plan-cold, all-gpu's blue.)"""
    from matplotlib import colormaps
    from matplotlib.colors import hsv_to_rgb, to_hex

    palette = [to_hex(c) for c in colormaps["tab10"].colors]
    # then tab20b and tab20c (hues of their own before tab20's light shades of the first ten: a pale
    # blue beside the first policy's blue read as the same policy)
    palette += [to_hex(c) for name in ("tab20b", "tab20c") for c in colormaps[name].colors]
    palette += [to_hex(c) for c in colormaps["tab20"].colors[1::2]]  # the light shade of each tab10 colour
    if n <= len(palette):
        return palette[:n]
    # distinct as hex for n up to 846 (8 bits a channel); no bench runs that many policies
    return [to_hex(hsv_to_rgb((j / n, 0.65, 0.85))) for j in range(n)]


def policy_style(j: int, n: int) -> dict[str, Any]:
    """Line style of the j-th of n policies: its colour (``policy_colors``), dash pattern, marker, and
    a width that shrinks with j (drawn above the earlier ones), so lines lying on one another stay visible."""
    return {
        "color": policy_colors(n)[j],
        "linestyle": LINESTYLES[j % len(LINESTYLES)],
        "marker": MARKERS[j % len(MARKERS)],
        "linewidth": 1.0 + 2.2 * (n - 1 - j) / max(1, n - 1),
        "markersize": 3.5,
        "zorder": 2 + j,
    }


@lru_cache(maxsize=1)
def _covered() -> frozenset[int]:
    """Code points the default font can draw."""
    from matplotlib import font_manager, rcParams
    from matplotlib.ft2font import FT2Font

    path = font_manager.findfont(font_manager.FontProperties(family=rcParams["font.family"]))
    return frozenset(FT2Font(path).get_charmap())


def safe_label(text: str) -> str:
    """``text`` with every character the font lacks written as ``\\uXXXX`` and ``$`` escaped, so
    matplotlib draws it as it is, without a glyph warning or math mode."""
    covered = _covered()
    out = []
    for ch in str(text):
        if ch == "$":
            out.append(r"\$")
        elif ch == "\n" or ord(ch) in covered:
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "".join(out)
