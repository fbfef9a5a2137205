"""Bootstrap: what every Lambda composition root shares — env settings, the config document, AWS clients.

Nothing here runs at import time: each function's root calls these from its `functools.cache`d
factory on the first invoke (a bad config fails that invoke loudly, naming the field). The config
document comes from an SSM parameter (`CONFIG_PARAMETER_NAME`, via Powertools parameters with
`max_age`), an S3 object (`CONFIG_S3_URI`) or, for local runs and tests, a file (`CONFIG_FILE`).
Warm containers keep the services they built; a changed config is picked up by new containers.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuwaste.config import GpuWasteConfig, parse_config, read_config_bytes
from gpuwaste.errors import ConfigError
from gpuwaste.models import redaction
from gpuwaste.queue.sqs import SqsQueue

BOTO_CONFIG = BotoConfig(connect_timeout=5, read_timeout=20, retries={"max_attempts": 3, "mode": "standard"})

#: Markers of AWS responses that carry secret values (Secrets Manager, SSM SecureString).
SECRET_RESPONSE_MARKERS = (b"SecretString", b"SecretBinary", b"SecureString")
REDACTED_BODY = "Response body: <redacted: it carries a secret value>"


class SecretResponseFilter(logging.Filter):
    """Redacts botocore's DEBUG wire log of response bodies that carry secret values.

    `botocore.parsers` logs every response body at DEBUG; with the function's log level at DEBUG the
    GetSecretValue answers (Slack, Jira and Prometheus credentials) would reach CloudWatch. Other bodies
    are kept, so DEBUG stays useful.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep the record; replace its message when it is a response body holding a secret."""
        if record.getMessage().startswith("Response body"):
            body = record.args[0] if isinstance(record.args, tuple) and record.args else record.msg
            raw = body if isinstance(body, bytes) else str(body).encode()
            if any(marker in raw for marker in SECRET_RESPONSE_MARKERS):
                record.msg, record.args = REDACTED_BODY, ()
        return True


def redact_secret_responses() -> None:
    """Install `SecretResponseFilter` on botocore's wire logger (idempotent)."""
    wire = logging.getLogger("botocore.parsers")
    if not any(isinstance(f, SecretResponseFilter) for f in wire.filters):
        wire.addFilter(SecretResponseFilter())


def remember_secret_text(text: str) -> None:
    """Redact a secret read from Secrets Manager / SSM from every log line from now on: the text, and each string
    value when it is a JSON object (`{"bot_token": …, "url": …}`)."""
    redaction.register_secret(text)
    try:
        data = json.loads(text)
    except ValueError:
        return
    if isinstance(data, dict):
        for value in data.values():
            if isinstance(value, str):
                redaction.register_secret(value)


class StdoutHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The Lambda functions' log handler: writes each record to the process's standard output (`sys.__stdout__`,
    looked up when the record is emitted).

    Powertools' default handler binds `sys.stdout` as it is when the function's module is imported. Code that swaps
    `sys.stdout` (a test runner capturing one test's output, a CLI embedding the pipeline in one process) would then
    make the functions log into a stream that is closed by now ("--- Logging error ---"), or, bound to the current
    `sys.stdout`, into that code's own output. The process's standard output is never swapped; in Lambda it is the
    same stream as `sys.stdout`, so CloudWatch gets the same lines.
    Use the one instance, `LOG_HANDLER`: `Logger(logger_handler=LOG_HANDLER)` (Powertools configures a service's
    logger once per process and afterwards reads the handler a later `Logger(...)` was given, so every function
    in a process must pass the same handler).
    """

    @property
    def stream(self) -> Any:
        """The process's standard output (`sys.__stdout__`; `sys.stdout` where the interpreter has none)."""
        return sys.__stdout__ or sys.stdout

    @stream.setter
    def stream(self, _value: Any) -> None:
        """Ignored: the stream is always the process's standard output."""

    def format(self, record: logging.LogRecord) -> str:
        """The formatter's line (Powertools' JSON, its exception fields included) with every credential redacted."""
        return redaction.redact(super().format(record))


#: the handler every Lambda function's Powertools `Logger` writes through (see `StdoutHandler`)
LOG_HANDLER = StdoutHandler()


# Installing the log redaction is the one thing done at import: every composition root imports this module
# before any AWS call (its own, or Powertools' parameter reads), so no secret is ever logged — botocore's
# secret-bearing response bodies dropped whole, and every record of every logger redacted (models/redaction.py).
redact_secret_responses()
redaction.install(LOG_HANDLER)


class ConfigSourceSettings(BaseSettings):
    """Where the configuration document is (env vars, set by template.yaml).

    Attributes:
        config_parameter_name: SSM parameter holding the YAML/JSON document (CONFIG_PARAMETER_NAME).
        config_s3_uri: s3://bucket/key of the document (CONFIG_S3_URI), when not in SSM.
        config_file: a local file (CONFIG_FILE), for local runs and tests.
        config_max_age_s: how long Powertools caches the SSM value (CONFIG_MAX_AGE_S).
    """

    model_config = SettingsConfigDict(extra="ignore")

    config_parameter_name: str | None = None
    config_s3_uri: str | None = None
    config_file: str | None = None
    config_max_age_s: int = Field(300, ge=0)


#: A Lambda root's environment model (`environment`).
EnvironmentT = TypeVar("EnvironmentT", bound="RootEnvironment")


class RootEnvironment(BaseSettings):
    """Base of each Lambda root's environment model: one field per variable template.yaml sets for that function
    (the field name in lower case); a required field has no default, an optional one defaults to "" (unset)."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)


class ScanEnvironment(RootEnvironment):
    """scan_gpu_waste: FINDINGS_QUEUE_URL (the scan's findings), DEAD_LETTER_QUEUE_URL (optional)."""

    findings_queue_url: str = Field(min_length=1)
    dead_letter_queue_url: str = ""


class BillEnvironment(RootEnvironment):
    """BILL_S3_URI: s3://bucket/key of a CUR 2.0 or FOCUS bill (CSV or .csv.gz) whose effective instance-hour rates
    price the pipeline ("" = list prices and the config's rate card); BILL_MAX_AGE_S: how long a warm container keeps
    the bill before reading it again (the export refreshes daily)."""

    bill_s3_uri: str = ""
    bill_max_age_s: int = Field(3600, ge=60, le=86400)


class PriceEnvironment(BillEnvironment):
    """price_findings: PRICED_QUEUE_URL (priced findings), DEAD_LETTER_QUEUE_URL (optional), and the bill
    (`BillEnvironment`)."""

    priced_queue_url: str = Field(min_length=1)
    dead_letter_queue_url: str = ""


class ExportEnvironment(BillEnvironment):
    """export_focus: FOCUS_EXPORT_BUCKET and FOCUS_EXPORT_PREFIX (where the day's objects go), FOCUS_EXPORT_ACCOUNT
    (BillingAccountId of the rows; "" = the cluster), and the bill (`BillEnvironment`)."""

    focus_export_bucket: str = Field(min_length=1)
    focus_export_prefix: str = ""
    focus_export_account: str = ""


class DedupeEnvironment(RootEnvironment):
    """dedupe_findings: FINDINGS_TABLE_NAME (the lifecycle), ALERTS_QUEUE_URL; TICKETS_QUEUE_URL is empty without
    Jira; DEAD_LETTER_QUEUE_URL (optional)."""

    findings_table_name: str = Field(min_length=1)
    alerts_queue_url: str = Field(min_length=1)
    tickets_queue_url: str = ""
    dead_letter_queue_url: str = ""


class DispatchEnvironment(RootEnvironment):
    """dispatch_scans: SCAN_REQUESTS_QUEUE_URL (one request per cluster)."""

    scan_requests_queue_url: str = Field(min_length=1)


class DeliveryEnvironment(RootEnvironment):
    """notify_slack, create_tickets, send_daily_summary, slack_interactions: FINDINGS_TABLE_NAME (records, delivery
    ledger), and the Secrets Manager ARNs that win over the configuration's (each optional): SLACK_SECRET_ARN,
    JIRA_SECRET_ARN, TEAMS_SECRET_ARN, WEBHOOK_SECRET_ARN; DEAD_LETTER_QUEUE_URL (optional)."""

    findings_table_name: str = Field(min_length=1)
    slack_secret_arn: str = ""
    jira_secret_arn: str = ""
    teams_secret_arn: str = ""
    webhook_secret_arn: str = ""
    dead_letter_queue_url: str = ""


class SecretArnEnvironment(RootEnvironment):
    """The Secrets Manager ARNs of the chat and ticket sinks, each optional (the subset of `DeliveryEnvironment`
    read where the table is not needed)."""

    slack_secret_arn: str = ""
    jira_secret_arn: str = ""
    teams_secret_arn: str = ""
    webhook_secret_arn: str = ""


class DeadLetterEnvironment(RootEnvironment):
    """DEAD_LETTER_QUEUE_URL: the function's own dead-letter queue (optional: without it a bad record is left to the
    queue's redrive policy)."""

    dead_letter_queue_url: str = ""


def environment(model: type[EnvironmentT]) -> EnvironmentT:
    """The function's environment as `model` reads it (read each call: the variables are the function's own).

    Raises:
        ConfigError: a required variable is not set or empty, or one is invalid: names every such variable and
            the model (the function) that needs it.
    """
    try:
        return model()
    except ValidationError as exc:
        missing = sorted({str(e["loc"][0]).upper() for e in exc.errors() if e["type"] in ("missing", "string_too_short")})
        bad = [f"{str(e['loc'][0]).upper()}: {e['msg']}" for e in exc.errors()
               if e["type"] not in ("missing", "string_too_short")]
        parts = ([f"{', '.join(missing)} not set"] if missing else []) + bad
        raise ConfigError(f"environment: {'; '.join(parts)} ({model.__name__}; template.yaml sets these for the "
                          "function)") from exc


class SystemClock:
    """`ports.Clock` over the system time (UTC)."""

    def now(self) -> datetime:
        """The current time, tz-aware UTC."""
        return datetime.now(tz=UTC)


def read_config_text(source: ConfigSourceSettings) -> tuple[str, str]:
    """(document text, where it came from).

    Raises:
        ConfigError: no source is set, or it cannot be read.
    """
    if source.config_file:
        try:
            return read_config_bytes(Path(source.config_file)).decode("utf-8"), source.config_file
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source.config_file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if source.config_parameter_name:
        from aws_lambda_powertools.utilities import parameters

        try:
            value = parameters.get_parameter(source.config_parameter_name, max_age=source.config_max_age_s)
        except parameters.exceptions.GetParameterError as exc:
            raise ConfigError(f"ssm:{source.config_parameter_name}: cannot read configuration: {exc}") from exc
        return str(value), f"ssm:{source.config_parameter_name}"
    if source.config_s3_uri:
        uri = urlparse(source.config_s3_uri)
        if uri.scheme != "s3" or not uri.netloc or not uri.path.strip("/"):
            raise ConfigError(f"CONFIG_S3_URI: expected s3://bucket/key, got {source.config_s3_uri!r}")
        try:
            body = client("s3").get_object(Bucket=uri.netloc, Key=uri.path.lstrip("/"))["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise ConfigError(f"{source.config_s3_uri}: cannot read configuration: {exc}") from exc
        try:
            return body.decode("utf-8"), source.config_s3_uri
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source.config_s3_uri}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    raise ConfigError("environment: set CONFIG_PARAMETER_NAME (SSM), CONFIG_S3_URI or CONFIG_FILE to the configuration document")


@cache
def config() -> GpuWasteConfig:
    """The validated configuration document (once per container).

    Raises:
        ConfigError: it cannot be read or is invalid (names the field path).
    """
    text, where = read_config_text(ConfigSourceSettings())
    return parse_config(text, source=where)


@cache
def client(service: str) -> Any:
    """A boto3 client with explicit timeouts and bounded retries (honours AWS_ENDPOINT_URL)."""
    return boto3.client(service, config=BOTO_CONFIG)


#: Queues whose messages stay one per SQS message (their consumers read single messages).
UNPACKED_QUEUES = frozenset({"tickets_queue_url", "scan_requests_queue_url"})


def queue(env_name: str, url: str) -> SqsQueue:
    """The SQS queue at `url`, the value of the root's environment field `env_name` (e.g. "findings_queue_url",
    from `environment(ScanEnvironment)`): the name says whether its messages are packed (`UNPACKED_QUEUES`)."""
    # the tickets queue's consumer (create_tickets) reads one request per message; the others carry packed batches
    return SqsQueue(client=client("sqs"), queue_url=url, pack=env_name not in UNPACKED_QUEUES)


def reset() -> None:
    """Forget cached config, clients and Powertools parameter caches (tests; never needed in Lambda)."""
    from aws_lambda_powertools.utilities import parameters

    parameters.clear_caches()  # type: ignore[no-untyped-call]  # Powertools leaves it unannotated
    config.cache_clear()
    client.cache_clear()


__all__ = ["BillEnvironment", "ConfigSourceSettings", "DeadLetterEnvironment", "DedupeEnvironment", "DeliveryEnvironment",
           "DispatchEnvironment", "ExportEnvironment", "PriceEnvironment", "RootEnvironment", "ScanEnvironment", "SecretArnEnvironment", "SystemClock", "client",
           "config", "environment", "queue", "read_config_text", "reset"]
