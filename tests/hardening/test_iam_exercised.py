"""IAM exercised, not only bounded: every AWS call every function makes over a day of the pipeline is allowed by that
function's policy in template.yaml — action and resource — and every grant the policy holds is used.

`test_least_privilege.py` / `tests/unit/test_template_permissions.py` check that the grants are not too wide and match
an audited table; moto enforces no IAM, so neither can see a grant that is missing in AWS. Here the real handlers run
over moto's server (`tests.lambda_stack`: the template's environment per function, botocore's `before-parameter-build`
event recording each call) through a day: a scan tick and each queue delivered (with one poison message per SQS queue,
so the dead-letter sends happen), the daily summary and its retry, a Slack button click and its replay, the daily FOCUS
export and its retry — with the export and the bill switched on (`FocusExportBucket`, `BillObject`), so the bill's
GetObject (price and export functions) and the export's PutObject are exercised too. Each recorded
call is evaluated against the function's statements as IAM does (SAM policy templates expanded, intrinsics and `!If`
resolved, `dynamodb:LeadingKeys` conditions applied).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from tests.hardening.conftest import Figures
from tests.integration.test_lambda_entry_points import (
    POISON,
    SCAN_TIME,
    config_document,
    interaction_event,
    stack_secrets,
)
from tests.lambda_events import load_event
from tests.lambda_stack import DeployedStack, _reset_composition_roots, allowed, deploy, iam_requests
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

#: (function, action, resource suffix) granted but not used by a day of the pipeline, each with why it stays.
UNUSED_ALLOWED: dict[tuple[str, str, str], str] = {
    ("DedupeFindingsFunction", "dynamodb:GetItem", "table/FindingsTable"):
        "store.get after a version conflict or a sent outbox (services/lifecycle.py): no conflict in a quiet day",
    ("NotifySlackFunction", "dynamodb:GetItem", "table/FindingsTable"):
        "store.get of a record the batch's read did not bring (services/notify.py _record)",
    ("NotifySlackFunction", "dynamodb:Query", "index/ByActivityDayShard"):
        "store.history: a RESOLVED alert's digest siblings — nothing resolves on the first day",
    ("SendDailySummaryFunction", "dynamodb:BatchGetItem", "table/FindingsTable"):
        "store.history's by-key read (store/dynamodb.py get_many): made only when the day index lists records for "
        "the summary's period; this day's summary event lists none",
}


@pytest.fixture
def day(aws: Any, slack_api: FakeSlack, jira_api: FakeJira, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Any) -> Iterator[DeployedStack]:
    """A day of the deployed pipeline, every function's calls recorded."""
    from tests.integration.test_focus_export_s3 import BILL_BUCKET, BILL_KEY, EXPORT_BUCKET, PREFIX, bill_bytes

    s3 = boto3.client("s3", region_name="us-east-1")
    for bucket in (EXPORT_BUCKET, BILL_BUCKET):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=BILL_BUCKET, Key=BILL_KEY, Body=bill_bytes(tmp_path, "40"))
    stack = deploy(monkeypatch, config=config_document(slack_api, jira_api), secrets=stack_secrets(slack_api, jira_api),
                   params={"FocusExportBucket": EXPORT_BUCKET, "FocusExportPrefix": PREFIX,
                           "BillObject": f"{BILL_BUCKET}/{BILL_KEY}"})
    stack.invoke("DispatchScansFunction", {**load_event("scheduled_scan"), "time": SCAN_TIME})
    for queue in ("ScanRequestsQueue", "FindingsQueue", "PricedQueue", "AlertsQueue", "TicketsQueue"):
        stack.send(queue, POISON)  # dead-lettered by its consumer: the DLQ grant is exercised
        stack.pump(queue)
    summary = load_event("scheduled_summary")
    stack.invoke("SendDailySummaryFunction", summary)
    stack.invoke("SendDailySummaryFunction", summary)  # the scheduler's retry
    items = stack.client("dynamodb").scan(TableName=stack.stack.table_name)["Items"]
    fingerprint = next(i["fingerprint"]["S"] for i in items if "#" not in i["fingerprint"]["S"])
    click = interaction_event(fingerprint, "snooze_1d", at=int(time.time()))
    stack.invoke("SlackInteractionsFunction", click)
    stack.invoke("SlackInteractionsFunction", click)  # a replay
    export = load_event("scheduled_export")
    stack.invoke("ExportFocusFunction", export)
    stack.invoke("ExportFocusFunction", export)  # the scheduler's retry
    yield stack
    _reset_composition_roots()


def test_every_call_of_a_day_is_allowed_and_every_grant_is_used(day: DeployedStack, figures: Figures) -> None:
    # GIVEN a day of the pipeline, every function's AWS calls recorded
    # WHEN each call is evaluated against its function's policy in template.yaml
    denied = day.denied()
    unused = []
    for function in day.functions():
        requests = [r for c in day.recorder.of(function) for r in iam_requests(c, secret_arns=day.secret_arns)]
        for n, statement in enumerate(day.statements(function)):
            for action in statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]:
                for resource in statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]:
                    one = {**statement, "Action": [action], "Resource": [resource]}
                    if not any(allowed([one], r) for r in requests) and not any(
                            (function, action) == k[:2] and resource.endswith(k[2]) for k in UNUSED_ALLOWED):
                        unused.append(f"{function}: statement {n}: {action} on {resource}")
    calls = len(day.recorder.calls)
    figures.notes["IAM exercised"] = (f"{calls} AWS calls over a day of the {len(day.functions())} functions; "
                                      f"{len(denied)} not allowed by "
                                      f"the function's policy; {len(unused)} grants unused")
    # THEN nothing is denied (a function would fail in AWS), and no grant goes unused (too wide, or untested)
    assert calls > 50 and all(day.recorder.of(f) for f in day.functions())
    assert denied == []
    assert unused == [], "\n".join(unused)


#: (function, a text of the policy statement to take out): grants whose removal the day's calls must show
REMOVALS = [
    ("DispatchScansFunction", "sqs:SendMessage"),
    ("ScanGpuWasteFunction", "ssm:GetParameter"),
    ("PriceFindingsFunction", "sqs:SendMessage"),
    ("DedupeFindingsFunction", "dynamodb:BatchGetItem"),
    ("DedupeFindingsFunction", "OpenByClusterShard"),
    ("NotifySlackFunction", "AWSSecretsManagerGetSecretValuePolicy"),
    ("CreateTicketsFunction", "AWSSecretsManagerGetSecretValuePolicy"),
    ("SendDailySummaryFunction", "dynamodb:PutItem"),
    ("SendDailySummaryFunction", "ByActivityDayShard"),
    ("SlackInteractionsFunction", "dynamodb:GetItem"),
    ("PriceFindingsFunction", "s3:GetObject"),
    ("ExportFocusFunction", "s3:GetObject"),
    ("ExportFocusFunction", "s3:PutObject"),
    ("ExportFocusFunction", "ssm:GetParameter"),
]


def _without(template: dict[str, Any], function: str, needle: str) -> dict[str, Any]:
    changed = copy.deepcopy(template)
    policies = changed["Resources"][function]["Properties"]["Policies"]
    kept = [p for p in policies if needle not in json.dumps(p)]
    assert len(kept) < len(policies), (function, needle)
    changed["Resources"][function]["Properties"]["Policies"] = kept
    return changed


def test_a_missing_grant_fails_the_check_with_the_call_that_needs_it(day: DeployedStack) -> None:
    template = day.template
    # GIVEN the day's calls, and create_tickets' policy as it was before the fix (no Query on ByActivityDay)
    day.template = _without(template, "CreateTicketsFunction", "dynamodb:Query")
    # WHEN evaluated / THEN the store.history Query every batch makes is denied, by name
    assert ("CreateTicketsFunction: dynamodb:Query on arn:aws:dynamodb:us-east-1:123456789012:table/FindingsTable/index/"
            "ByActivityDayShard (from dynamodb:Query)") in day.denied("CreateTicketsFunction")
    # AND taking out any other grant a function uses is seen too
    unseen = []
    for function, needle in REMOVALS:
        day.template = _without(template, function, needle)
        if not day.denied(function):
            unseen.append((function, needle))
    assert unseen == []
    # AND the summary's PutItem grant reaches its once-records only, never a finding record
    from tests.lambda_stack import ApiCall

    day.template = template
    statements = day.statements("SendDailySummaryFunction")

    def put(key: str) -> ApiCall:
        return ApiCall("SendDailySummaryFunction", "dynamodb", "PutItem",
                       {"TableName": day.stack.table_name, "Item": {"fingerprint": {"S": key}}})

    assert not any(allowed(statements, r) for r in iam_requests(put("0" * 64), secret_arns={}))
    assert all(allowed(statements, r) for r in iam_requests(put("once#summary#2024-01-02"), secret_arns={}))
