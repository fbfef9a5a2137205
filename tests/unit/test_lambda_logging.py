"""The Lambda functions log through one handler that writes to the stdout of the moment, so code that swaps stdout
after a function module was imported (a test runner, the CLI running the pipeline in-process) never logs into a closed
stream ("--- Logging error ---")."""

from __future__ import annotations

import io
import json
import logging
import sys

from aws_lambda_powertools import Logger

from gpuwaste.bootstrap.pipeline import LOG_HANDLER


def test_a_function_logger_follows_stdout_after_the_stream_it_started_with_is_closed(monkeypatch) -> None:
    # GIVEN a function's Powertools logger created while stdout was one stream, which is closed afterwards
    first = io.StringIO()
    monkeypatch.setattr(sys, "stdout", first)
    logger = Logger(service="gpuwaste-logtest", logger_handler=LOG_HANDLER)
    first.close()
    # WHEN stdout is another stream and the function logs (twice: a second Logger for the same service, as a second
    # function in the same process does, must reuse the configured handler)
    second = io.StringIO()
    monkeypatch.setattr(sys, "stdout", second)
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stderr", errors)
    logger.info("scan done", extra={"findings": 3})
    Logger(service="gpuwaste-logtest", logger_handler=LOG_HANDLER).info("again")
    # THEN both records are JSON lines on the current stdout and nothing reports a logging error
    lines = [json.loads(line) for line in second.getvalue().splitlines()]
    assert [(r["message"], r.get("findings")) for r in lines] == [("scan done", 3), ("again", None)]
    assert "Logging error" not in errors.getvalue()
    logging.getLogger("gpuwaste-logtest").handlers.clear()
