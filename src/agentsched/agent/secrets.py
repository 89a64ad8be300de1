"""Secrets out of every message: URL credentials and API keys, redacted in one place.

An endpoint URL may carry credentials (``http://user:SECRET@host/v1``) and a server's error body
may quote the API key it rejected. Every text the LLM reasoner emits (errors, log lines, the audit
trail, JSON output) goes through ``redact`` with the secrets it knows; the CLI applies it once more
to every error line, which removes URL credentials even where the key is not known.
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from agentsched.masking import (
    BARE_USERINFO,
    MASK,
    QUERY_SECRET,
    SECRET_KEYS,
    URL_KEYS,
    USERINFO,
    mask_secrets,
    path_secrets,
)

#: a secret shorter than this is not searched for in free text (masking every "k" would garble the
#: message, and such a key protects nothing); URL credentials are masked whatever their length
MIN_SECRET_CHARS = 4
#: placeholders that local servers accept as a key: not secrets
NOT_SECRETS = frozenset({"", "EMPTY", "none", "None", "sk-no-key-required"})


def url_secrets(url: str) -> tuple[str, ...]:
    """The values of ``url``'s secret query parameters and path segments, its user name
    and password (as written and percent-decoded), and the Basic-auth token a client sends for them
    (base64 of ``user:password``, which a server may echo), for ``redact``."""
    found = [q["value"] for q in QUERY_SECRET.finditer(url)] + path_secrets(url)
    query = [v for q in found for v in (q, urllib.parse.unquote(q))]
    m = USERINFO.search(url) or BARE_USERINFO.search(url)
    if m is None:
        return tuple(dict.fromkeys(query))
    out: list[str] = query
    for part in m["userinfo"].split(":", 1):
        out += [part, urllib.parse.unquote(part)]
    written = m["userinfo"] if ":" in m["userinfo"] else f"{m['userinfo']}:"
    out += [basic_token(url) or "", base64.b64encode(written.encode()).decode("ascii")]
    return tuple(dict.fromkeys(out))


def basic_token(url: str) -> str | None:
    """The Basic-auth token a client sends for the credentials in ``url`` (RFC 7617: base64 of
    ``user:password``, percent-decoded, UTF-8), or None when it has none."""
    m = USERINFO.search(url)
    if m is None:
        return None
    user, _, password = m["userinfo"].partition(":")
    text = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return base64.b64encode(text.encode()).decode("ascii")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with URL credentials, the value written after each secret key (``api_key=``, ``"api_key":``)
    and every occurrence of each of ``secrets`` replaced by ``***`` (secrets shorter than ``MIN_SECRET_CHARS`` and placeholder keys are left alone)."""
    out = mask_secrets(str(text))
    for s in sorted(
        {s for s in secrets if s and s not in NOT_SECRETS and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True
    ):  # longest first: a key that contains another is masked whole
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
        return {
            k: (MASK if k in SECRET_KEYS and v not in (None, "") else redact_options(v, keys)) for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_options(v, keys) for v in obj)
    if isinstance(obj, str):
        return redact(obj, keys)
    return obj
