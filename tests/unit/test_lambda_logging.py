"""The Lambda functions log through one handler that writes to the process's standard output, looked up at each
record, so code that swaps `sys.stdout` after a function module was imported (a test runner, the CLI running the
pipeline in-process) neither makes them log into a closed stream ("--- Logging error ---") nor into its own output."""

from __future__ import annotations

import io
import json
import logging
import sys

from aws_lambda_powertools import Logger

from gpuwaste.bootstrap.pipeline import LOG_HANDLER


def test_a_function_logger_writes_to_the_process_stdout_whatever_sys_stdout_is(monkeypatch) -> None:
    # GIVEN the process's standard output, and a function's Powertools logger created while sys.stdout was another
    # stream, which is closed afterwards
    process_stdout = io.StringIO()
    monkeypatch.setattr(sys, "__stdout__", process_stdout)
    first = io.StringIO()
    monkeypatch.setattr(sys, "stdout", first)
    logger = Logger(service="gpuwaste-logtest", logger_handler=LOG_HANDLER)
    first.close()
    # WHEN sys.stdout is a third stream (a CLI's captured output) and the function logs (twice: a second Logger for
    # the same service, as a second function in the same process does, must reuse the configured handler)
    cli_output = io.StringIO()
    monkeypatch.setattr(sys, "stdout", cli_output)
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stderr", errors)
    logger.info("scan done", extra={"findings": 3})
    Logger(service="gpuwaste-logtest", logger_handler=LOG_HANDLER).info("again")
    # THEN both records are JSON lines on the process's standard output, none in the CLI's output, and nothing
    # reports a logging error
    lines = [json.loads(line) for line in process_stdout.getvalue().splitlines()]
    assert [(r["message"], r.get("findings")) for r in lines] == [("scan done", 3), ("again", None)]
    assert cli_output.getvalue() == "" and "Logging error" not in errors.getvalue()
    logging.getLogger("gpuwaste-logtest").handlers.clear()
