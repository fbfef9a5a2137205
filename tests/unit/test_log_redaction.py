"""Log redaction (models/redaction.py): what the real libraries log at DEBUG — urllib3's request line, botocore's
SigV4 canonical request and request headers, requests' auth headers — never reaches a handler with a credential,
whichever logger made the record and whichever handler writes it (a foreign one, the CLI's, Powertools')."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest
from aws_lambda_powertools import Logger

from gpuwaste.bootstrap.pipeline import LOG_HANDLER
from gpuwaste.models import redaction

SIG = "CANARYsigQ1w2e3r4t5y6"
PATH_TOKEN = "CANARYpathTokenA1B2C3D4"
SESSION = "CANARY-session-FQoGZXIvYXdzE"
BEARER = "CANARY-bearer-9f8e7d"


class Keep(logging.Handler):
    """A foreign handler (not the product's): keeps each formatted line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def kept() -> Iterator[Keep]:
    redaction.install()
    handler = Keep()
    root = logging.getLogger()
    old = root.level
    # a CLI test earlier in the session may have quieted urllib3 (cli_support sets it to ERROR without --verbose)
    libraries = [logging.getLogger(name) for name in ("urllib3", "urllib3.connectionpool", "botocore")]
    saved = [(lg.level, lg.disabled, lg.propagate) for lg in libraries]
    for lg in libraries:
        lg.setLevel(logging.NOTSET)
        lg.disabled, lg.propagate = False, True
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(old)
    for lg, (level, disabled, propagate) in zip(libraries, saved, strict=True):
        lg.setLevel(level)
        lg.disabled, lg.propagate = disabled, propagate


@pytest.fixture
def local_server() -> Iterator[str]:
    class Ok(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.mark.loopback
def test_redaction_urllib3_request_line_of_webhook_urls_keeps_no_token(kept: Keep, local_server: str) -> None:
    # GIVEN a Teams Workflows URL (secret `sig`), a Slack-incoming-webhook-shaped path and a bearer header
    import requests

    urls = [f"{local_server}/workflows/abc/triggers/manual/paths/invoke?api-version=1&sv=1.0&sig={SIG}",
            f"{local_server}/services/T0AAA/B0BBB/{PATH_TOKEN}"]
    # WHEN requests/urllib3 post to them with DEBUG logging on
    for url in urls:
        requests.post(url, json={}, headers={"Authorization": f"Bearer {BEARER}"}, timeout=5)
    # THEN urllib3 logged its request lines, and none holds the credentials
    lines = [line for line in kept.lines if "POST /" in line]
    assert len(lines) == 2
    assert not any(secret in line for line in kept.lines for secret in (SIG, PATH_TOKEN, BEARER))
    assert any("sig=REDACTED" in line for line in lines) and any("/services/REDACTED" in line for line in lines)


def test_redaction_botocore_sigv4_canonical_request_and_headers_keep_no_session_token(kept: Keep) -> None:
    # GIVEN temporary AWS credentials with a session token
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="GET", url="http://127.0.0.1:9/api/v1/query?query=up", headers={})
    # WHEN botocore signs a request at DEBUG (it logs the canonical request, the string to sign and the signature)
    SigV4Auth(Credentials("ASIACANARYKEY0000001", "CANARYsecretKey", SESSION), "aps", "us-east-1").add_auth(request)
    logging.getLogger("botocore.endpoint").debug("Sending http request: %s", request.prepare())
    # THEN the canonical request was logged, without the session token, the access key or the signature
    text = "\n".join(kept.lines)
    assert "CanonicalRequest" in text and "x-amz-security-token:REDACTED" in text
    signature = str(request.headers["Authorization"]).rsplit("Signature=", 1)[1]
    for secret in (SESSION, "ASIACANARYKEY0000001", "CANARYsecretKey", signature):
        assert secret not in text


def test_redaction_covers_args_extras_and_tracebacks_of_any_logger(kept: Keep) -> None:
    # GIVEN a product handler's filter, and records carrying secrets in args, in `extra` and in an exception
    own = Keep()
    own.addFilter(redaction.RedactingFilter())
    log = logging.getLogger("some.library")
    log.addHandler(own)
    try:
        # WHEN they are logged
        log.debug("calling %s", f"https://x.example/hook?token={PATH_TOKEN}")
        log.info("posted", extra={"target": f"https://u:{BEARER}@x.example/"})
        try:
            raise ValueError(f"refused: Authorization: Bearer {BEARER}")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(own)
    # THEN neither the foreign handler (message, traceback) nor the product's (also `extra`) sees a credential
    assert len(kept.lines) == 3 and "token=REDACTED" in kept.lines[0] and "Traceback" in kept.lines[2]
    assert not any(s in line for line in kept.lines + own.lines for s in (PATH_TOKEN, BEARER))


def test_redaction_registered_secret_of_unknown_form_is_removed_literally(kept: Keep) -> None:
    # GIVEN a configured webhook URL whose token no pattern knows (a path segment of a relay)
    redaction.register_secret("https://relay.example/in/CANARYrelayPathXyZ12345")
    # WHEN urllib3-style lines name its path
    logging.getLogger("urllib3.connectionpool").debug('%s "%s %s HTTP/1.1" 200 0', "https://relay.example:443",
                                                      "POST", "/in/CANARYrelayPathXyZ12345")
    # THEN the path is gone
    assert kept.lines and "CANARYrelayPathXyZ12345" not in kept.lines[-1]


def test_redaction_powertools_logger_json_lines_keep_no_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a function's Powertools logger on the functions' handler
    out = io.StringIO()
    monkeypatch.setattr(sys, "__stdout__", out)
    logger = Logger(service="gpuwaste-redaction-test", logger_handler=LOG_HANDLER)
    # WHEN it logs a credential in a message, an extra field and an exception
    logger.info({"url": f"https://x.example/?sig={SIG}"})
    logger.info("posting", extra={"webhook": f"https://hooks.example/services/T0A/B0B/{PATH_TOKEN}"})
    try:
        raise RuntimeError(f"x-amz-security-token:{SESSION}")
    except RuntimeError:
        logger.exception("failed")
    logging.getLogger("gpuwaste-redaction-test").handlers.clear()
    # THEN every JSON line is intact and free of the credentials
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 3 and lines[2]["exception_name"] == "RuntimeError"
    assert not any(s in out.getvalue() for s in (SIG, PATH_TOKEN, SESSION))


@pytest.mark.parametrize(("line", "kept_text"), [
    ('GET /api/v1/query?query=up&time=1 HTTP/1.1', "query=up&time=1"),
    ("Starting new HTTP connection (1): 127.0.0.1:9090", "127.0.0.1:9090"),
    ("bearer_token_secret_arn: arn:aws:secretsmanager:us-east-1:1:secret:x", "arn:aws:secretsmanager"),
])
def test_redaction_leaves_ordinary_text_alone(line: str, kept_text: str) -> None:
    # GIVEN a line without credentials WHEN redacted THEN it is unchanged
    assert redaction.redact(line) == line and kept_text in line


@pytest.mark.parametrize("unit", ["a.", "a-", "&a_", '"w-', "a:", "Bearer ", "/services/T", "?x"])
def test_redaction_time_is_linear_in_the_text(unit: str) -> None:
    # GIVEN a 200 kB line made of a pattern's prefix repeated (what a megabyte body at DEBUG could hold)
    import time

    line = unit * (200_000 // len(unit))
    # WHEN redacted
    started = time.perf_counter()
    redaction.redact(line)
    # THEN it takes well under a second per 200 kB (a quadratic pattern took 3 s for 20 kB of "a.")
    assert time.perf_counter() - started < 2.0
