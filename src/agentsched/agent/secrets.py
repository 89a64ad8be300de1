"""Secrets out of every message: URL credentials and API keys, redacted in one place.

An endpoint URL may carry credentials (``http://user:SECRET@host/v1``) and a server's error body
may quote the API key it rejected. Every text the LLM reasoner emits (errors, log lines, the audit
trail, JSON output) goes through ``redact`` with the secrets it knows; the CLI applies it once more
to every error line, which removes URL credentials even where the key is not known.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
#: a secret shorter than this is not searched for in free text (masking every "k" would garble the
#: message, and such a key protects nothing); URL credentials are masked whatever their length
MIN_SECRET_CHARS = 4
#: placeholders that local servers accept as a key: not secrets
NOT_SECRETS = frozenset({"", "EMPTY", "none", "None", "sk-no-key-required"})
#: scheme://userinfo@ anywhere in a text (userinfo: up to the last '@' before a '/', whitespace or
#: quote: a password may hold an '@', http://user:p@ss@host, and must not show its end)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s'\"]+)@")
#: user:password@host without a scheme (a URL given without one, quoted back in an error): a token
#: holding a ':' before its last '@', at the start of a word (not a scheme's ``://``)
_BARE_USERINFO = re.compile(r"(?<![\w/.+*-])(?P<userinfo>[A-Za-z0-9._~%!$&+,;=-]+:[^/\s'\"]*)@(?=[\w\[])")
#: option keys whose value is a secret, and keys whose value is a URL that may carry credentials
SECRET_KEYS = frozenset({"api_key"})
URL_KEYS = frozenset({"base_url"})
#: a secret key's value written out in a text: an option quoted back in an error (JSON, a Python
#: dict's repr, KEY=VALUE), ``"api_key": "sk-..."``, ``'api_key': 12345``, ``api_key=sk-...``
_KEYED_SECRET = re.compile(r"""(?P<key>["']?\b(?:%s)["']?\s*[:=]\s*)(?:"[^"]*"|'[^']*'|[^"',}\s]+)"""
                           % "|".join(SECRET_KEYS))


def redact_url(url: str) -> str:
    """``url`` (or any text) with each URL's userinfo (``user:password@``, with a scheme or without
    one) replaced by ``***@``; other URLs unchanged."""
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", url)
    return _BARE_USERINFO.sub(f"{MASK}@", out)


def url_secrets(url: str) -> tuple[str, ...]:
    """The user name and password of ``url`` (as written and percent-decoded), and the Basic-auth token
    a client sends for them (base64 of ``user:password``, which a server may echo), for ``redact``."""
    m = _USERINFO.search(url) or _BARE_USERINFO.search(url)
    if m is None:
        return ()
    out: list[str] = []
    for part in m["userinfo"].split(":", 1):
        out += [part, urllib.parse.unquote(part)]
    written = m["userinfo"] if ":" in m["userinfo"] else f'{m["userinfo"]}:'
    out += [basic_token(url) or "", base64.b64encode(written.encode()).decode("ascii")]
    return tuple(dict.fromkeys(out))


def basic_token(url: str) -> str | None:
    """The Basic-auth token a client sends for the credentials in ``url`` (RFC 7617: base64 of
    ``user:password``, percent-decoded, UTF-8), or None when it has none."""
    m = _USERINFO.search(url)
    if m is None:
        return None
    user, _, password = m["userinfo"].partition(":")
    text = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return base64.b64encode(text.encode()).decode("ascii")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with URL credentials, the value written after each secret key (``api_key=``, ``"api_key":``)
    and every occurrence of each of ``secrets`` replaced by ``***`` (secrets shorter than ``MIN_SECRET_CHARS`` and placeholder keys are left alone)."""
    out = _KEYED_SECRET.sub(lambda m: f"{m['key']}{MASK}", redact_url(str(text)))
    for s in sorted({s for s in secrets if s and s not in NOT_SECRETS and len(s) >= MIN_SECRET_CHARS},
                    key=len, reverse=True):  # longest first: a key that contains another is masked whole
        out = out.replace(s, MASK)
    return out


def redact_options(obj: Any, secrets: Iterable[str | None] = ()) -> Any:
    """A copy of an options tree (dicts, lists) safe to write out: ``api_key`` values masked,
    ``base_url`` values and every other string redacted."""
    keys = list(secrets)
    if isinstance(obj, Mapping):
        found = [str(v) for k, v in obj.items() if k in SECRET_KEYS and v]
        found += [s for k, v in obj.items() if k in URL_KEYS and isinstance(v, str) for s in url_secrets(v)]
        keys += found
        return {k: (MASK if k in SECRET_KEYS and v not in (None, "") else redact_options(v, keys))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_options(v, keys) for v in obj)
    if isinstance(obj, str):
        return redact(obj, keys)
    return obj
