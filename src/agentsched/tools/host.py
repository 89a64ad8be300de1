"""Host-only tools (no GPU implementation): web_search, log_analyzer, pdf_parser.

A GPU placement of these runs the same host code (the paper's "neutral" tools). They need
neither torch nor transformers.
"""

from __future__ import annotations

import io
import json
import os
import re
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any

from agentsched.tools import inputs
from agentsched.tools.base import Size, Tool, ToolError

_PAGE_RE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")  # a PDF page object (not /Pages, the tree)
SEARCH_URL_ENV = "AGENTSCHED_SEARCH_URL"  # point web_search at a real API (GET ?q=...&k=...)


class WebSearch(Tool):
    """One HTTP GET to a search API per call; returns the parsed JSON results.

    The endpoint is ``url=`` or $AGENTSCHED_SEARCH_URL, else a seeded corpus served on loopback.
    Queries cycle through a seeded list so consecutive calls differ but runs repeat.
    """

    name = "web_search"
    size_param = "k"
    size_unit = "results"
    family = "host"
    has_gpu = False
    SIZES = {
        Size.PAPER: {"corpus_docs": 20_000, "k": 10, "queries": 32, "timeout_s": 10.0},
        Size.SMALL: {"corpus_docs": 200, "k": 5, "queries": 8, "timeout_s": 10.0},
    }

    def __init__(self, size: str | Size = Size.SMALL, *, seed: int = 0, url: str | None = None, **options: Any) -> None:
        super().__init__(size, seed=seed, **options)
        self.url = url or os.environ.get(SEARCH_URL_ENV) or None  # None: the local server
        self.server = None  # the loopback server when no URL is given

    def _load(self, device: str) -> None:
        p = self.params
        if self.url is None:
            from agentsched.tools.search_server import shared_server

            self.server = shared_server(p["corpus_docs"], self.sub_seed("corpus"))
        self._m_url = self.url or self.server.url
        self._m_queries = inputs.search_queries(p["queries"], self.sub_seed("queries"))
        self._m_next = 0

    def _call(self) -> dict[str, Any]:
        q = self._m_queries[self._m_next % len(self._m_queries)]
        self._m_next += 1
        sep = "&" if "?" in self._m_url else "?"
        url = f"{self._m_url}{sep}{urllib.parse.urlencode({'q': q, 'k': self.params['k']})}"
        try:
            with urllib.request.urlopen(url, timeout=self.params["timeout_s"]) as resp:
                return json.loads(resp.read().decode())
        except OSError as e:
            raise ToolError(f"web_search: GET {self._m_url} failed: {e}") from None


# Apache combined log format
_APACHE = re.compile(
    r'^(?P<ip>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<path>\S+) (?P<proto>[^"]+)" '
    r'(?P<status>\d{3}) (?P<bytes>\d+|-)(?: "(?P<referer>[^"]*)" "(?P<agent>[^"]*)")?$'
)


def analyze_log(text: str, top: int = 5) -> dict[str, Any]:
    """Parse Apache combined-format lines; count by status, method, client, path; sum bytes."""
    by_status: Counter = Counter()
    by_method: Counter = Counter()
    by_ip: Counter = Counter()
    by_path: Counter = Counter()
    lines = malformed = bytes_total = 0
    for line in text.splitlines():
        if not line:
            continue
        lines += 1
        m = _APACHE.match(line)
        if m is None:
            malformed += 1
            continue
        status = int(m["status"])
        by_status[status] += 1
        by_method[m["method"]] += 1
        by_ip[m["ip"]] += 1
        by_path[m["path"]] += 1
        if m["bytes"] != "-":
            bytes_total += int(m["bytes"])
    parsed = lines - malformed
    errors = sum(n for s, n in by_status.items() if s >= 500)
    return {
        "lines": lines,  # non-empty lines read
        "parsed": parsed,  # lines in Apache format
        "malformed": malformed,  # lines skipped
        "by_status": dict(by_status),  # status -> requests
        "by_method": dict(by_method),  # method -> requests
        "bytes_total": bytes_total,  # sum of response sizes
        "unique_ips": len(by_ip),  # distinct clients
        "top_ips": by_ip.most_common(top),  # busiest clients
        "top_paths": by_path.most_common(top),  # most requested paths
        "error_rate": errors / parsed if parsed else 0.0,  # share of 5xx responses
    }


class LogAnalyzer(Tool):
    """Summarise an Apache access log (generated, seeded) -> ``analyze_log``'s dict."""

    name = "log_analyzer"
    size_param = "lines"
    size_unit = "lines"
    family = "host"
    has_gpu = False
    SIZES = {
        Size.PAPER: {"lines": 100_000},
        Size.SMALL: {"lines": 2_000},
    }

    def _load(self, device: str) -> None:
        lines, truth = inputs.apache_logs(self.params["lines"], self.sub_seed("inputs"))
        self.truth = truth  # what the summary must report
        self._m_text = "\n".join(lines) + "\n"

    input_keys = frozenset({"log"})  # invocation argument: the log text to summarise

    def _call(self) -> dict[str, Any]:
        return analyze_log(self._m_text)

    def _size_of(self, given: dict[str, Any]) -> float:
        text = given["log"]
        return float(text.count("\n") + (0 if not text or text.endswith("\n") else 1)) if isinstance(text, str) else 0.0

    def sized_inputs(self, size: float) -> dict[str, Any]:
        lines, _ = inputs.apache_logs(max(1, round(size)), self.sub_seed("sized", str(round(size))))
        return {"log": "\n".join(lines) + "\n"}

    def _call_with(self, given: dict[str, Any]) -> dict[str, Any]:
        text = given["log"]
        if not isinstance(text, str):
            raise ToolError(f"log_analyzer: input 'log' must be text, got {type(text).__name__}")
        return analyze_log(text)


class PdfParser(Tool):
    """Extract the text of a PDF written locally (fpdf2) with pypdf -> {"pages", "text"}."""

    name = "pdf_parser"
    size_param = "pages"
    size_unit = "pages"
    family = "host"
    has_gpu = False
    SIZES = {
        Size.PAPER: {"pages": 4, "paragraphs_per_page": 30},
        Size.SMALL: {"pages": 2, "paragraphs_per_page": 5},
    }

    def _load(self, device: str) -> None:
        try:
            data, written = inputs.pdf_document(
                self.params["pages"], self.params["paragraphs_per_page"], self.sub_seed("inputs")
            )
        except ImportError as e:
            raise ToolError(f"pdf_parser needs fpdf2 (the tools extra): {e}") from None
        self.written = written  # the lines the PDF contains
        self._m_pdf = data

    input_keys = frozenset({"pdf"})  # invocation argument: the PDF's bytes

    def _call(self) -> dict[str, Any]:
        return _extract(self._m_pdf)

    def _size_of(self, given: dict[str, Any]) -> float:
        data = given["pdf"]
        if not isinstance(data, (bytes, bytearray)):
            return 0.0
        # page objects, counted without parsing (a size is computed before placement, so it must be cheap)
        return float(max(1, len(_PAGE_RE.findall(data))))

    def sized_inputs(self, size: float) -> dict[str, Any]:
        try:
            data, _ = inputs.pdf_document(
                max(1, round(size)), self.params["paragraphs_per_page"], self.sub_seed("sized", str(round(size)))
            )
        except ImportError as e:
            raise ToolError(f"pdf_parser needs fpdf2 (the tools extra): {e}") from None
        return {"pdf": data}

    def _call_with(self, given: dict[str, Any]) -> dict[str, Any]:
        data = given["pdf"]
        if not isinstance(data, (bytes, bytearray)):
            raise ToolError(f"pdf_parser: input 'pdf' must be bytes, got {type(data).__name__}")
        return _extract(bytes(data))


def _extract(data: bytes) -> dict[str, Any]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    return {"pages": len(reader.pages), "text": "\n".join(p.extract_text() or "" for p in reader.pages)}


TOOLS = [WebSearch, LogAnalyzer, PdfParser]
