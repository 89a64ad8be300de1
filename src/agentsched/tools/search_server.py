"""A small search API on loopback, serving a seeded corpus to ``web_search``.

``GET /search?q=WORDS&k=N`` -> ``{"query": ..., "results": [{"title", "url", "snippet", "score"}]}``
ranked by how often the query's words occur in each document (title words count double).
One server per (corpus size, seed) per process, on 127.0.0.1 and an ephemeral port, in a daemon
thread; it never listens beyond loopback.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from agentsched.tools import inputs

_WORD = re.compile(r"[a-z0-9]+")


class SearchIndex:
    """Inverted index of a corpus: word -> {doc index: weight}."""

    def __init__(self, docs: list[dict[str, str]]) -> None:
        self.docs = docs  # the corpus, as generated
        self.postings: dict[str, Counter] = defaultdict(Counter)  # word -> doc -> weight
        for i, d in enumerate(docs):
            for w in _WORD.findall(d["title"].lower()):
                self.postings[w][i] += 2
            for w in _WORD.findall(d["text"].lower()):
                self.postings[w][i] += 1

    def search(self, query: str, k: int) -> list[dict]:
        scores: Counter = Counter()
        for w in set(_WORD.findall(query.lower())):
            scores.update(self.postings.get(w, {}))
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [
            {
                "title": self.docs[i]["title"],
                "url": self.docs[i]["url"],
                "snippet": self.docs[i]["text"][:160],
                "score": s,
            }
            for i, s in ranked
        ]


class SearchServer:
    """The HTTP server; ``url`` is its /search endpoint."""

    def __init__(self, n_docs: int, seed: int) -> None:
        index = SearchIndex(inputs.search_corpus(n_docs, seed))

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                u = urlparse(self.path)
                if u.path != "/search":
                    self.send_error(404)
                    return
                qs = parse_qs(u.query)
                query = qs.get("q", [""])[0]
                k = int(qs.get("k", ["10"])[0])
                body = json.dumps({"query": query, "results": index.search(query, k)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # quiet
                pass

        self.index = index  # the corpus index (tests compare against it)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/search"  # the endpoint
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="agentsched-search", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


_servers: dict[tuple[int, int], SearchServer] = {}
_lock = threading.Lock()


def shared_server(n_docs: int, seed: int) -> SearchServer:
    """The process's server for this corpus, started on first use."""
    with _lock:
        key = (n_docs, seed)
        if key not in _servers:
            _servers[key] = SearchServer(n_docs, seed)
        return _servers[key]
