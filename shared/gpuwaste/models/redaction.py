"""Models (pure): secrets taken out of log text, for every logger at every level.

Libraries log what they send: urllib3's request line (`"POST /services/T…/B…/<token> HTTP/1.1"`, a Teams Workflows
URL's `sig=` query parameter), botocore's SigV4 canonical request (`x-amz-security-token:…`, `Signature=…`,
`Credential=…`) and request headers (`'Authorization': b'Bearer …'`), kubernetes' and requests' header dumps. None of
that may reach a terminal, a log file or CloudWatch.

`install()` puts `redact` between every log call and every handler: a `LogRecord` factory rewrites each record's
message and exception text as it is made (any logger, any handler: the CLI's, the Lambda runtime's, Powertools',
a test's), and `RedactingFilter` — on the handlers the product owns — also rewrites the fields passed with
`extra={...}`. Both are installed once per process by each root: `gpuwaste.cli` and `gpuwaste.bootstrap.pipeline`.

Values end at a quote, a backslash (an escape in a JSON line) or white space, so a redacted JSON line stays JSON;
every repetition before a value is bounded, so a redaction takes time linear in the text (a megabyte body at DEBUG).
What is redacted (each value becomes `REDACTED`, the name before it stays, so a line still says what was there):
URL query parameters whose name holds sig/signature/token/code/key/secret/password/auth/credential/session; the
password of `user:password@` in a URL; the path of Slack webhook/response URLs (`/services/T…`, `/commands/T…`,
`/actions/T…`, `/triggers/T…`, `/workflows/T…`), Teams connector (`/webhookb2/…`) and Discord (`/api/webhooks/…`)
URLs; `Bearer`/`Basic`/`Token` credentials; Authorization, Cookie, `X-Amz-Security-Token`, `X-Api-Key`, signature
headers in `name: value` and `'name': b'value'` form; SigV4 `Credential=`/`Signature=`; Slack tokens (`xox?-…`,
`xapp-…`), AWS access key ids (`AKIA…`/`ASIA…`); JSON `"…token"`/`"…secret"`/`"…password"` values; and every
value handed to `register_secret` (configured secrets and webhook URLs, whose form no pattern can know).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

REDACTED = "REDACTED"
#: shortest registered secret redacted literally (shorter ones would also hit ordinary words)
MIN_SECRET_CHARS = 8
_VALUE_STOP = r"[^&#\s'\"<>\\]"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # user:password@host in a URL
    (re.compile(r"(?P<pre>(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,31}://[^\s/@:'\"\\]{0,256}:)[^\s/@'\"\\]{1,512}(?=@)", re.I), rf"\g<pre>{REDACTED}"),
    # query (or form) parameters named like a credential: ?sig=…, &token=…, &X-Amz-Security-Token=…, &code=…
    (re.compile(r"(?P<pre>[?&;][\w.-]{0,48}?(?:sig|token|code|key|secret|passw|pwd|auth|credential|session)[\w.-]{0,48}=)"
                rf"{_VALUE_STOP}+", re.I), rf"\g<pre>{REDACTED}"),
    # webhook URLs whose path is the credential (Slack, Teams connectors, Discord)
    (re.compile(r"(?P<pre>/(?:services|commands|actions|triggers|workflows)/)T[A-Z0-9]{2,}/[^\s'\"?#<>\\]+"),
     rf"\g<pre>{REDACTED}"),
    (re.compile(r"(?P<pre>/webhookb2/)[^\s'\"?#<>\\]+", re.I), rf"\g<pre>{REDACTED}"),
    (re.compile(r"(?P<pre>/api/webhooks/\d+/)[^\s'\"?#<>/\\]+", re.I), rf"\g<pre>{REDACTED}"),
    # header-shaped credentials: "Authorization: …", "'X-Amz-Security-Token': b'…'", "x-amz-security-token:…"
    (re.compile(r"(?P<pre>['\"]?\b(?:proxy-)?(?:authorization|cookie|set-cookie|x-amz-security-token|"
                r"x-amz-signature|x-api-key|x-auth-token|x-slack-signature|x-gpuwaste-signature|"
                r"x-hub-signature(?:-256)?)['\"]?\s*[:=]\s*b?['\"]?)[^'\"\r\n\\]+", re.I), rf"\g<pre>{REDACTED}"),
    # SigV4 parts wherever they are printed (canonical request, string to sign, presigned URLs)
    (re.compile(r"(?P<pre>\b(?:Credential|Signature)=)[^\s,&'\"\\]+"), rf"\g<pre>{REDACTED}"),
    (re.compile(r"(?P<pre>\bSignature:\s*)[0-9a-f]{16,}"), rf"\g<pre>{REDACTED}"),
    # scheme credentials (an Authorization value printed alone)
    (re.compile(r"(?P<pre>\b(?:Bearer|Basic|Token)\s+)[A-Za-z0-9._~+/=-]{6,}"), rf"\g<pre>{REDACTED}"),
    # token formats that are secrets by their shape
    (re.compile(r"\bxox[a-z]-[A-Za-z0-9-]+|\bxapp-[A-Za-z0-9-]+"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    # JSON / repr key-value pairs named like a credential (ARNs, which name a secret, stay)
    (re.compile(r"(?P<pre>['\"][\w-]{0,48}?(?:token|secret|password|passwd|signature|api[_-]?key)['\"]\s*:\s*['\"])"
                r"(?!arn:)[^'\"\\]+", re.I), rf"\g<pre>{REDACTED}"),
)

_lock = threading.Lock()
_registered: set[str] = set()
_literal: re.Pattern[str] | None = None


def register_secret(value: str | None) -> None:
    """Redact `value` literally from now on (a configured secret whose form no pattern knows).

    For a URL, its path-and-query is registered too (urllib3 logs the request line without the host). Values shorter
    than MIN_SECRET_CHARS are ignored.
    """
    global _literal
    if not value:
        return
    values = {value}
    if "://" in value:
        parts = urlsplit(value)
        tail = parts.path + (f"?{parts.query}" if parts.query else "")
        if len(parts.path.strip("/")) >= MIN_SECRET_CHARS or parts.query:
            values.add(tail)
    values = {v for v in values if len(v) >= MIN_SECRET_CHARS}
    with _lock:
        if values <= _registered:
            return
        _registered.update(values)
        _literal = re.compile("|".join(re.escape(v) for v in sorted(_registered, key=len, reverse=True)))


def redact(text: str) -> str:
    """`text` with every credential it holds replaced by REDACTED (see the module docstring for what is)."""
    if not text:
        return text
    literal = _literal
    if literal is not None:
        text = literal.sub(REDACTED, text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _redact_value(value: Any) -> Any:
    """`value` (an `extra` field) with its strings redacted; the same object when nothing in it changed."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
        clean = redact(text)
        return value if clean == text else clean
    if isinstance(value, dict):
        items = {k: _redact_value(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list | tuple):
        seq = [_redact_value(v) for v in value]
        return value if all(a is b for a, b in zip(seq, value, strict=True)) else seq
    return value


def _redact_record(record: logging.LogRecord, *, extras: bool) -> None:
    """Rewrite `record` in place: message (with its args), exception and stack text, and with `extras` the
    non-standard attributes (`extra={...}`) that are strings or containers."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed record (args not matching) is redacted as written
        message = f"{record.msg} {record.args!r}"
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and record.exc_info[0] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        clean_exc = redact(text)
        if clean_exc != text:
            # the traceback held a secret: keep only its redacted text. Standard formatters print `exc_text`;
            # structured ones (Powertools' JSON) get it as the `exception` / `exception_name` fields they write.
            name = record.exc_info[0].__name__
            record.exc_info, record.exc_text = None, clean_exc
            record.__dict__.setdefault("exception", clean_exc)
            record.__dict__.setdefault("exception_name", name)
    elif record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    if extras:
        for key, value in list(record.__dict__.items()):
            if key not in _STANDARD and not key.startswith("_") and isinstance(value, str | bytes | dict | list | tuple):
                record.__dict__[key] = _redact_value(value)


_STANDARD = frozenset(logging.LogRecord("n", logging.INFO, "p", 1, "m", (), None).__dict__) | {"message", "asctime"}


class RedactingFilter(logging.Filter):
    """A handler filter: redacts every record the handler emits (message, exception, `extra` fields); never drops."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact `record` in place and keep it."""
        _redact_record(record, extras=True)
        return True


_factory_installed: Callable[..., logging.LogRecord] | None = None


def _wrap_factory(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _redact_record(record, extras=False)
        return record

    return make


def install(*handlers: logging.Handler) -> None:
    """Redact every log record of the process from now on (idempotent): the record factory for every logger and
    handler, plus `RedactingFilter` on `handlers` (and the root logger's current handlers) for `extra` fields."""
    global _factory_installed
    with _lock:
        current = logging.getLogRecordFactory()
        if current is not _factory_installed:
            _factory_installed = _wrap_factory(current)
            logging.setLogRecordFactory(_factory_installed)
    for handler in (*handlers, *logging.getLogger().handlers):
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
