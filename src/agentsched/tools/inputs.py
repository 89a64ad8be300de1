"""Deterministic (seeded) inputs for the tools: sentences, images, audio, Apache logs, PDFs, a corpus.

No data set can be downloaded, so every input is generated here from an injected seed; the same
seed gives the same bytes on every machine. Generators that plant something a test can check
(the log counts, the PDF's text) return that ground truth too. numpy is imported lazily.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Common English words (all in BERT's uncased WordPiece vocabulary), so sentences tokenize to words.
_SUBJECTS = [
    "the analyst",
    "a customer",
    "the engineer",
    "our team",
    "the manager",
    "a student",
    "the doctor",
    "the reviewer",
    "a farmer",
    "the pilot",
    "the teacher",
    "a child",
]
_VERBS = [
    "reads",
    "writes",
    "checks",
    "likes",
    "hates",
    "buys",
    "sells",
    "builds",
    "opens",
    "cleans",
    "paints",
    "moves",
    "finds",
    "loses",
    "plans",
    "signs",
]
_ADJS = [
    "new",
    "old",
    "blue",
    "red",
    "large",
    "small",
    "quiet",
    "bright",
    "cheap",
    "strange",
    "useful",
    "broken",
    "simple",
    "green",
    "heavy",
    "fast",
]
_OBJECTS = [
    "report",
    "house",
    "car",
    "letter",
    "garden",
    "window",
    "contract",
    "book",
    "bridge",
    "machine",
    "market",
    "river",
    "map",
    "phone",
    "table",
    "song",
]
_TAILS = [
    "today",
    "again",
    "at night",
    "in the morning",
    "with care",
    "very slowly",
    "for the city",
    "before lunch",
    "after the storm",
    "without help",
]
_SENTIMENT = [
    "and it was wonderful",
    "and it was terrible",
    "which felt great",
    "which was awful",
    "and everyone was happy",
    "and nobody was pleased",
]


def sentence(rng: random.Random) -> str:
    return (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} the {rng.choice(_ADJS)} "
        f"{rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"
    )


def sentences(n: int, seed: int, *, sentiment: bool = False) -> list[str]:
    """``n`` short English sentences (optionally ending with an opinion)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = sentence(rng)
        out.append(f"{s} {rng.choice(_SENTIMENT)}" if sentiment else s)
    return out


def nli_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """(premise, hypothesis) pairs: the hypothesis reuses or changes the premise's object."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        subj, verb, adj, obj = (rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_ADJS), rng.choice(_OBJECTS))
        premise = f"{subj} {verb} the {adj} {obj} {rng.choice(_TAILS)}"
        hyp_obj = obj if rng.random() < 0.5 else rng.choice(_OBJECTS)
        out.append((premise, f"{subj} {verb} a {hyp_obj}"))
    return out


def query_passages(n: int, seed: int) -> tuple[str, list[str]]:
    """A query and ``n`` candidate passages for a reranker."""
    rng = random.Random(seed)
    query = f"who {rng.choice(_VERBS)} the {rng.choice(_ADJS)} {rng.choice(_OBJECTS)}"
    return query, [" ".join(sentence(rng) for _ in range(3)) for _ in range(n)]


def images(n: int, height: int, width: int, seed: int) -> Any:
    """``n`` RGB uint8 images (n, H, W, 3): smooth gradients with a bright rectangle each."""
    import numpy as np

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    out = np.empty((n, height, width, 3), dtype=np.uint8)
    for i in range(n):
        a, b, c = rng.uniform(0.2, 1.0, size=3)
        base = (
            np.stack(
                [a * xx / max(width - 1, 1), b * yy / max(height - 1, 1), c * (xx + yy) / max(width + height - 2, 1)],
                axis=-1,
            )
            * 200
        )
        y0, x0 = rng.integers(0, max(height // 2, 1)), rng.integers(0, max(width // 2, 1))
        base[y0 : y0 + height // 4 + 1, x0 : x0 + width // 4 + 1] = 250
        out[i] = np.clip(base + rng.normal(0, 4, size=base.shape), 0, 255).astype(np.uint8)
    return out


def text_line_image(text: str, height: int, width: int) -> Any:
    """A white image with one line of black text (OCR input), uint8 (H, W, 3)."""
    import numpy as np

    try:
        from PIL import Image, ImageDraw

        img = Image.new("RGB", (width, height), "white")
        ImageDraw.Draw(img).text((4, height // 2 - 6), text, fill="black")
        return np.asarray(img, dtype=np.uint8).copy()
    except ImportError:  # no Pillow: dark blocks where characters would be
        arr = np.full((height, width, 3), 255, dtype=np.uint8)
        for i, ch in enumerate(text[: max(width // 8 - 1, 0)]):
            if not ch.isspace():
                arr[height // 2 - 4 : height // 2 + 4, 4 + 8 * i : 10 + 8 * i] = 0
        return arr


def audio(seconds: float, sample_rate: int, seed: int, tones_hz: tuple[float, ...] = (440.0, 1000.0)) -> Any:
    """Synthetic speech-like audio: a sum of tones with a syllable envelope, plus noise (float32)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate), dtype=np.float64) / sample_rate
    sig = sum(np.sin(2 * np.pi * f * t) for f in tones_hz) / max(len(tones_hz), 1)
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t)  # ~4 syllables per second
    return (0.5 * envelope * sig + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)


# ---- Apache logs ---------------------------------------------------------------------------
_METHODS = ["GET", "GET", "GET", "POST", "PUT", "DELETE"]
_PATHS = [
    "/",
    "/index.html",
    "/api/v1/items",
    "/api/v1/users",
    "/login",
    "/static/app.js",
    "/static/style.css",
    "/search",
    "/cart",
    "/checkout",
]
_STATUSES = [200] * 12 + [201, 204, 301, 304, 400, 401, 403, 404, 404, 500, 502, 503]
_AGENTS = ["Mozilla/5.0 (X11; Linux x86_64)", "curl/8.5.0", "Mozilla/5.0 (Windows NT 10.0)", "python-requests/2.32"]


@dataclass
class LogTruth:
    """What a correct analysis of generated Apache logs reports."""

    lines: int = 0  # lines generated
    malformed: int = 0  # lines that are not Apache combined format
    by_status: Counter = field(default_factory=Counter)  # HTTP status -> requests
    by_method: Counter = field(default_factory=Counter)  # HTTP method -> requests
    by_ip: Counter = field(default_factory=Counter)  # client -> requests
    bytes_total: int = 0  # sum of response sizes ("-" counts as 0)


def apache_logs(n: int, seed: int, *, malformed_every: int = 97) -> tuple[list[str], LogTruth]:
    """``n`` Apache combined-format lines (every ``malformed_every``-th is garbage) and the truth."""
    rng = random.Random(seed)
    ips = [f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}" for _ in range(50)]
    truth = LogTruth(lines=n)
    lines = []
    for i in range(n):
        if malformed_every and i % malformed_every == malformed_every - 1:
            lines.append(f"garbage line {i} without a request")
            truth.malformed += 1
            continue
        ip = ips[min(int(rng.expovariate(0.15)), len(ips) - 1)]  # a few heavy clients
        method, path, status = rng.choice(_METHODS), rng.choice(_PATHS), rng.choice(_STATUSES)
        size = rng.randrange(100, 50_000) if status not in (204, 304) else None
        day, hh, mm, ss = 1 + i * 28 // max(n, 1), rng.randrange(24), rng.randrange(60), rng.randrange(60)
        lines.append(
            f'{ip} - - [{day:02d}/Oct/2026:{hh:02d}:{mm:02d}:{ss:02d} +0000] "{method} {path} HTTP/1.1" '
            f'{status} {size if size is not None else "-"} "-" "{rng.choice(_AGENTS)}"'
        )
        truth.by_status[status] += 1
        truth.by_method[method] += 1
        truth.by_ip[ip] += 1
        truth.bytes_total += size or 0
    return lines, truth


# ---- PDF -----------------------------------------------------------------------------------
def pdf_document(pages: int, paragraphs_per_page: int, seed: int) -> tuple[bytes, list[str]]:
    """A PDF written locally with fpdf2, and the paragraphs it contains (one per line)."""
    from fpdf import FPDF

    rng = random.Random(seed)
    pdf = FPDF()
    pdf.set_auto_page_break(auto=False)
    written: list[str] = []
    for p in range(pages):
        pdf.add_page()
        pdf.set_font("Helvetica", size=11)
        pdf.cell(0, 10, f"Page {p + 1} report", new_x="LMARGIN", new_y="NEXT")
        for _ in range(paragraphs_per_page):
            line = sentence(rng)
            pdf.cell(0, 7, line, new_x="LMARGIN", new_y="NEXT")
            written.append(line)
    return bytes(pdf.output()), written


# ---- search corpus -------------------------------------------------------------------------
def search_corpus(n_docs: int, seed: int) -> list[dict[str, str]]:
    """Documents {id, title, url, text} served by the local search server."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        obj, adj = rng.choice(_OBJECTS), rng.choice(_ADJS)
        docs.append(
            {
                "id": str(i),
                "title": f"The {adj} {obj} guide {i}",
                "url": f"http://docs.local/{obj}/{i}",
                "text": " ".join(sentence(rng) for _ in range(3)),
            }
        )
    return docs


def search_queries(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(_ADJS)} {rng.choice(_OBJECTS)}" for _ in range(n)]
