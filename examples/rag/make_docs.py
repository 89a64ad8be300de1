"""Write the example's documents: a few short PDF reports (fpdf2), one topic each.

python make_docs.py docs        # writes docs/*.pdf
"""

from __future__ import annotations

import sys
from pathlib import Path

# One topic per document; every fact is written once, so an answer can be checked.
DOCUMENTS: dict[str, list[str]] = {
    "harbor_bridge": [
        "The Harbor Bridge opened to traffic in 1932 after eight years of construction.",
        "Its steel arch spans 503 metres and carries eight lanes of road and two rail tracks.",
        "Painting the bridge takes a crew of twelve people about ten years, then starts again.",
    ],
    "river_valley_farms": [
        "Farms in the river valley grow mostly apples, pears and cherries.",
        "The spring frost of 2019 destroyed almost half of the cherry blossoms.",
        "Most orchards now use drip irrigation fed from the northern reservoir.",
    ],
    "city_library": [
        "The central library holds about two million books and a large map collection.",
        "It is open from nine in the morning until eight in the evening, every day except Monday.",
        "Members can borrow up to fifteen books at a time for three weeks.",
    ],
    "solar_plant": [
        "The desert solar plant produces 580 megawatts at its peak in summer.",
        "Its mirrors are cleaned by robots every night to remove sand and dust.",
        "Molten salt tanks store heat so the plant keeps producing power for seven hours after sunset.",
    ],
    "mountain_railway": [
        "The mountain railway climbs 1,400 metres in forty minutes using a rack and pinion system.",
        "Trains run every thirty minutes in summer and every hour in winter.",
        "The line was electrified in 1955; before that it used steam locomotives.",
    ],
}


def write_pdf(path: Path, title: str, lines: list[str]) -> None:
    try:
        from fpdf import FPDF
    except ImportError:
        raise SystemExit(
            "error: make_docs.py needs fpdf2, part of the tools extra: pip install -e '.[tools]'"
        ) from None

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=14)
    pdf.cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=11)
    for line in lines:
        pdf.multi_cell(0, 7, line, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
    pdf.output(str(path))


def main(folder: str = "docs") -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in DOCUMENTS.items():
        write_pdf(out / f"{name}.pdf", name.replace("_", " ").title(), lines)
    print(f"wrote {len(DOCUMENTS)} PDFs to {out}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
