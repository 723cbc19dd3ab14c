"""Redaction of URLs and error text before they reach output or logs: one helper for AWS and Kubernetes.

Invariant: whatever passes through `redact_url`/`redact_text` keeps its shape
(scheme, host, path, parameter names) but never a userinfo part
(`https://user:password@host`), the value of a credential-bearing query
parameter (`?access_token=...`, `X-Amz-Signature=...`) or a bearer token.
This module imports nothing from gangscale (gangscale imports cloud_adapters,
never the other way round), so both sides use the same rules.
"""

from __future__ import annotations

import logging
import re

MASK = "***"

# Query parameters whose value is a credential (compared case-insensitively).
SECRET_PARAMS = (
    "access_token",
    "token",
    "id_token",
    "refresh_token",
    "client_secret",
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "key",
    "sig",
    "signature",
    "auth",
    "authorization",
    "code",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "awsaccesskeyid",
)

_USERINFO = re.compile(r"(?<=//)[^/@\s?#]*@")
_PARAM = re.compile(
    r"(?P<lead>[?&;](?:" + "|".join(re.escape(p) for p in SECRET_PARAMS) + r")=)[^&#\s'\":<>),;]*",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<lead>\b(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def redact_text(text: object) -> str:
    """`text` (a message quoting URLs, a header, an error) with every credential part replaced by ***."""
    s = "" if text is None else str(text)
    if not s:
        return s
    s = _USERINFO.sub(MASK + "@", s)
    s = _PARAM.sub(lambda m: m.group("lead") + MASK, s)
    return _BEARER.sub(lambda m: m.group("lead") + MASK, s)


def redact_url(url: str | None) -> str:
    """An endpoint URL without its user:password part or credential query values, fit for logs."""
    return redact_text(url) if url else ""


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the rendered message of every record it sees.

    Installed on third-party loggers (urllib3's retry warnings quote the
    request URL, the Kubernetes client logs an exec plugin's stderr) whose
    messages we do not build ourselves.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logged as it is
            return True
        clean = redact_text(message)
        if clean != message or record.args:
            record.msg, record.args = clean, ()
        return True


_FILTER = RedactingFilter()


def install_log_redaction(*logger_names: str) -> None:
    """Add the redacting filter to these loggers (idempotent)."""
    for name in logger_names:
        logger = logging.getLogger(name) if name else logging.getLogger()
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
