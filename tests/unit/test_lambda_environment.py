"""Each Lambda root reads its environment through its own model: a missing variable is a clear error, not a None."""

from __future__ import annotations

import pytest

from gpuwaste.bootstrap import pipeline
from gpuwaste.errors import ConfigError

ALL = ("FINDINGS_QUEUE_URL", "PRICED_QUEUE_URL", "ALERTS_QUEUE_URL", "TICKETS_QUEUE_URL", "SCAN_REQUESTS_QUEUE_URL",
       "FINDINGS_TABLE_NAME", "DEAD_LETTER_QUEUE_URL", "SLACK_SECRET_ARN")


@pytest.fixture(autouse=True)
def _bare_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALL:
        monkeypatch.delenv(name, raising=False)


def test_a_missing_required_variable_is_named_with_the_function_that_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the dedupe function's environment with ALERTS_QUEUE_URL set empty and FINDINGS_TABLE_NAME unset
    monkeypatch.setenv("ALERTS_QUEUE_URL", "")
    # WHEN it is read / THEN both are named, with the model that needs them
    with pytest.raises(ConfigError, match=r"ALERTS_QUEUE_URL, FINDINGS_TABLE_NAME not set \(DedupeEnvironment"):
        pipeline.environment(pipeline.DedupeEnvironment)


def test_the_environment_is_read_as_set_with_optional_fields_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the required variables of the dedupe function, and no TICKETS_QUEUE_URL (no Jira)
    monkeypatch.setenv("FINDINGS_TABLE_NAME", "gpuwaste-findings")
    monkeypatch.setenv("ALERTS_QUEUE_URL", "https://sqs.eu-west-1.amazonaws.com/1/alerts")
    # WHEN read
    env = pipeline.environment(pipeline.DedupeEnvironment)
    # THEN the values are as set, the optional ones empty, and the model is frozen
    assert (env.findings_table_name, env.alerts_queue_url, env.tickets_queue_url) == (
        "gpuwaste-findings", "https://sqs.eu-west-1.amazonaws.com/1/alerts", "")
    with pytest.raises(ValueError, match="frozen"):
        env.tickets_queue_url = "x"  # type: ignore[misc]


@pytest.mark.parametrize(("model", "variable"), [
    (pipeline.ScanEnvironment, "FINDINGS_QUEUE_URL"),
    (pipeline.PriceEnvironment, "PRICED_QUEUE_URL"),
    (pipeline.DispatchEnvironment, "SCAN_REQUESTS_QUEUE_URL"),
    (pipeline.DeliveryEnvironment, "FINDINGS_TABLE_NAME"),
])
def test_every_root_requires_its_own_variables(model: type[pipeline.RootEnvironment], variable: str) -> None:
    # GIVEN a bare environment / WHEN the root's model is read / THEN its required variable is named
    with pytest.raises(ConfigError, match=f"{variable} not set"):
        pipeline.environment(model)


def test_optional_variables_default_to_unset() -> None:
    # GIVEN a bare environment / WHEN the optional models are read / THEN they hold empty values (no error)
    assert pipeline.environment(pipeline.DeadLetterEnvironment).dead_letter_queue_url == ""
    assert pipeline.environment(pipeline.SecretArnEnvironment).slack_secret_arn == ""
