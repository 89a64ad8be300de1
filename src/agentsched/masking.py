"""Secrets and terminal control out of a text, for every message that quotes one: the patterns.

URL credentials (``http://user:SECRET@host``) and the value written after a secret key
(``api_key=sk-...``, ``"password": "..."``) are masked; characters a terminal would act on (ESC
sequences, bidirectional overrides, newlines) are escaped. Below every layer: ``errors.one_line``
quotes a foreign error (a tool's, a library's) through it, and ``agent/secrets.py`` adds the
secrets a reasoner knows by value.
"""

from __future__ import annotations

import re

MASK = "***"
#: scheme://userinfo@ anywhere in a text (userinfo: up to the last '@' before a '/', whitespace or
#: quote: a password may hold an '@', http://user:p@ss@host, and must not show its end)
USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]{0,31}://)(?P<userinfo>[^/\s'\"]+)@")
#: user:password@host without a scheme (a URL given without one, quoted back in an error): a token
#: holding a ':' before its last '@', at the start of a word (not a scheme's ``://``)
#: (the user part bounded, and tried only on words holding an '@' and a ':' (``redact_url``): on a long
#: run of its characters it was quadratic, seconds for a 100 KB error text)
BARE_USERINFO = re.compile(r"(?<![\w/.+*-])(?P<userinfo>[A-Za-z0-9._~%!$&+,;=-]{1,256}:[^/\s'\"]*)@(?=[\w\[])")
#: option keys whose value is a secret (also in free text: a tool's error may quote its connection
#: settings), and keys whose value is a URL that may carry credentials
SECRET_KEYS = frozenset(
    {"api_key", "apikey", "api-key", "x-api-key", "password", "passwd", "secret", "token", "access_token"}
)
#: a URL query parameter whose name says it holds a secret: ``?key=`` (Google), ``?api-key=`` (Azure),
#: ``&sig=`` (a signed URL), ``?access_token=``, ``?client_secret=``
#: ``?code=`` (Azure Functions' key) only as the whole name: ``status_code=`` is no secret
QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:(?:[\w.-]*[-_.])?(?:key|apikey|token|secret|password|passwd|pwd|sig|"
    r"signature|auth|authorization|credential|credentials)|code)=)"
    r"(?P<value>[^&#\s'\"),;\]>]+)",
    re.IGNORECASE,
)
#: a web URL's path segment after one named as a secret: ``https://host/key/SECRET/v1``, ``/token/SECRET``
#: (only in http(s)/ws(s) URLs, ``path_secrets``: a file path ``/proj/token/vocab.txt`` is no secret)
PATH_SECRET = re.compile(
    r"(?P<name>(?<=[\w\]])/(?:[\w.-]*[-_.])?(?:key|apikey|token|secret|password)/)"
    r"(?P<value>[^/?#\s'\"),;\]>]+)",
    re.IGNORECASE,
)
WEB_URL = re.compile(r"\b(?:https?|wss?)://[^\s'\"<>]+", re.IGNORECASE)
_WORD = re.compile(r"\S+")
URL_KEYS = frozenset({"base_url"})
#: a secret key's value written out in a text: an option quoted back in an error (JSON, a Python
#: dict's repr, KEY=VALUE), ``"api_key": "sk-..."``, ``'api_key': 12345``, ``api_key=sk-...``
_KEYED_SECRET = re.compile(
    r"""(?P<key>["']?\b(?:%s)["']?\s*[:=]\s*)(?:"[^"]*"|'[^']*'|[^"',})\]\s&#]+)"""
    % "|".join(sorted(SECRET_KEYS, key=len, reverse=True)),
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """``url`` (or any text) with each URL's userinfo (``user:password@``, with a scheme or without
    one) replaced by ``***@``, and the value of each secret query parameter (``QUERY_SECRET``) and
    path segment (``PATH_SECRET``) by ``***``; other URLs unchanged."""
    out = USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", url)
    out = QUERY_SECRET.sub(lambda m: f"{m['name']}{MASK}", out)
    out = WEB_URL.sub(lambda u: PATH_SECRET.sub(lambda m: f"{m['name']}{MASK}", u[0]), out)
    if "@" not in out:
        return out
    return _WORD.sub(lambda w: BARE_USERINFO.sub(f"{MASK}@", w[0]) if "@" in w[0] and ":" in w[0] else w[0], out)


def path_secrets(text: str) -> list[str]:
    """The values ``PATH_SECRET`` masks in the web URLs of ``text``."""
    return [m["value"] for u in WEB_URL.finditer(text) for m in PATH_SECRET.finditer(u[0])]


def mask_secrets(text: str) -> str:
    """``text`` with URL credentials and the value after each secret key masked."""
    return _KEYED_SECRET.sub(lambda m: f"{m['key']}{MASK}", redact_url(text))


def printable(text: str) -> str:
    """``text`` with each character a terminal would act on (ESC, bidirectional overrides, line
    breaks) written as its escape (``\\x1b``, ``\\u202e``)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
