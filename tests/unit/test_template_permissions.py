"""Permissions per function: template.yaml grants each function exactly the AWS calls its code path makes.

The table below is the audit in docs/deploy.md ("Permissions per function"), derived from the modules each
handler's composition root uses (bootstrap/* → store/dynamodb.py, queue/sqs.py, bootstrap/batch.py,
bootstrap/delivery.py, bootstrap/pipeline.py, sources/prometheus/). A function that lacks a needed grant,
or gains one (a wildcard action, another table index, another queue), fails here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuwaste.store.dynamodb import BY_ACTIVITY_DAY, OPEN_BY_CLUSTER
from tests.aws_resources import load_template

Grant = tuple[str, str]  # (IAM action, resource: a logical id, "<Table>/index/<name>", a parameter, or "*")

CONFIG: set[Grant] = {("ssm:GetParameter", "ConfigParameterName")}  # bootstrap/pipeline.read_config_text
ITEM: set[Grant] = {("dynamodb:GetItem", "FindingsTable"), ("dynamodb:PutItem", "FindingsTable")}  # get / put_new / update
#: get_many (BatchGetItem) and update_many (TransactWriteItems, authorised by PutItem): dedupe's and notify's batches
BATCH: set[Grant] = ITEM | {("dynamodb:BatchGetItem", "FindingsTable")}
VPC: set[Grant] = {(a, "*") for a in ("ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
                                      "ec2:DescribeNetworkInterfaces", "ec2:DetachNetworkInterface")}


#: the bill the price book reads (HasBill): GetObject of that one object (bootstrap/price.py)
BILL: set[Grant] = {("s3:GetObject", "Sub:arn:${AWS::Partition}:s3:::${BillObject}")}


#: the daily FOCUS export's objects: PutObject under the export prefix (sinks/s3_objects.py)
EXPORT: set[Grant] = {("s3:PutObject", "Sub:arn:${AWS::Partition}:s3:::${FocusExportBucket}/${FocusExportPrefix}*")}


def send(*queues: str) -> set[Grant]:
    """queue/sqs.py send_message_batch and bootstrap/batch.py send_message: both authorised by sqs:SendMessage."""
    return {("sqs:SendMessage", q) for q in queues}


def query(index: str) -> set[Grant]:
    return {("dynamodb:Query", f"FindingsTable/index/{index}")}


def secret(param: str) -> set[Grant]:
    return {("secretsmanager:GetSecretValue", param)}


# function → every grant it may hold (both branches of each !If: the conditional ones are marked in the docs)
EXPECTED: dict[str, set[Grant]] = {
    "DispatchScansFunction": CONFIG | send("ScanRequestsQueue"),
    "ScanGpuWasteFunction": CONFIG | send("FindingsQueue", "ScanRequestsDlq") | secret("PrometheusSecretArn")
    | {("aps:QueryMetrics", "PrometheusWorkspaceArn")} | VPC,
    "PriceFindingsFunction": CONFIG | send("PricedQueue", "FindingsDlq") | BILL,
    "DedupeFindingsFunction": CONFIG | send("AlertsQueue", "TicketsQueue", "PricedDlq") | BATCH | query(OPEN_BY_CLUSTER),
    "NotifySlackFunction": CONFIG | secret("SlackSecretArn") | secret("TeamsSecretArn") | secret("WebhookSecretArn")
    | send("AlertsDlq") | BATCH | query(BY_ACTIVITY_DAY),
    "CreateTicketsFunction": CONFIG | secret("JiraSecretArn") | secret("SlackSecretArn") | send("TicketsDlq") | ITEM | query(BY_ACTIVITY_DAY)
    | {("dynamodb:BatchGetItem", "FindingsTable")},  # history: keys from the index, then by key
    "SendDailySummaryFunction": CONFIG | secret("SlackSecretArn") | secret("TeamsSecretArn") | secret("WebhookSecretArn")
    | query(BY_ACTIVITY_DAY) | {("dynamodb:BatchGetItem", "FindingsTable")}  # history: keys from the index, then by key
    | {("dynamodb:PutItem", "FindingsTable")},  # PutItem: its once-records (once# keys only)
    "SlackInteractionsFunction": CONFIG | secret("SlackSecretArn") | secret("JiraSecretArn") | ITEM,
    # the daily FOCUS export (FocusExportOn): PutObject under the prefix only, the bill, and the scan's reads
    "ExportFocusFunction": CONFIG | BILL | EXPORT
    | secret("PrometheusSecretArn") | {("aps:QueryMetrics", "PrometheusWorkspaceArn")} | VPC,
}

# SAM policy templates the template uses, as SAM expands them (actions; the parameter naming the resource).
SAM_TEMPLATES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "AWSSecretsManagerGetSecretValuePolicy": (("secretsmanager:GetSecretValue",), "SecretArn"),
    "VPCAccessPolicy": (tuple(a for a, _ in sorted(VPC)), None),
}


def _resource(value: Any) -> str:
    """A resource as a short name: GetAtt X.Arn → X, Ref P → P, the SSM/index Subs → their names."""
    if isinstance(value, str):
        return value
    if "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        name, attr = (target.split(".", 1) if isinstance(target, str) else target)
        return name if attr == "Arn" else f"{name}.{attr}"
    if "Ref" in value:
        return str(value["Ref"])
    if "Fn::Sub" in value:
        text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
        if text.startswith("${FindingsTable.Arn}/index/"):
            return "FindingsTable/index/" + text.rsplit("/", 1)[1]
        if ":parameter/${ConfigParameterName}" in text and text.startswith("arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}"):
            return "ConfigParameterName"
        return f"Sub:{text}"
    return f"?{value!r}"


def _branches(value: Any) -> list[Any]:
    if isinstance(value, dict) and set(value) == {"Fn::If"}:
        _cond, yes, no = value["Fn::If"]
        return _branches(yes) + _branches(no)
    if value == {"Ref": "AWS::NoValue"}:
        return []
    return [value]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def grants(template: dict[str, Any]) -> dict[str, set[Grant]]:
    """function → (action, resource) for every Allow it may hold; unknown policy shapes show up as grants of '?'."""
    out: dict[str, set[Grant]] = {}
    for rid, res in template["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        found: set[Grant] = set()
        for policy in _list(res["Properties"].get("Policies", [])):
            for concrete in _branches(policy):
                if isinstance(concrete, str):
                    found.add(("?managed", concrete))
                elif "Statement" in concrete:
                    for st in _list(concrete["Statement"]):
                        for s in _branches(st):
                            if s.get("Effect", "Allow") != "Allow":
                                continue
                            found |= {(str(a), _resource(r)) for a in _list(s["Action"]) for r in _list(s["Resource"])}
                else:
                    for name, params in concrete.items():
                        actions, param = SAM_TEMPLATES.get(name, (("?" + name,), None))
                        target = _resource((params or {})[param]) if param else "*"
                        found |= {(a, target) for a in actions}
        out[rid] = found
    return out


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def test_template_permissions_match_the_audited_table(template: dict[str, Any]) -> None:
    # GIVEN the template's policies per function
    # WHEN expanded to (action, resource) grants
    found = grants(template)
    # THEN each function holds exactly the grants its code path needs (nothing missing, nothing extra)
    assert set(found) == set(EXPECTED)
    diff = {fn: {"missing": sorted(EXPECTED[fn] - found[fn]), "extra": sorted(found[fn] - EXPECTED[fn])}
            for fn in EXPECTED if found[fn] != EXPECTED[fn]}
    assert diff == {}


def test_template_permissions_have_no_wildcard_action_and_only_vpc_wildcard_resources(template: dict[str, Any]) -> None:
    # GIVEN every grant
    found = grants(template)
    # WHEN wildcards are looked for
    wild_actions = [(fn, a) for fn, gs in found.items() for a, _ in gs if "*" in a]
    wild_resources = [(fn, a, r) for fn, gs in found.items() for a, r in gs if "*" in r and (a, r) not in VPC | EXPORT]
    # THEN there are none (ENI management in a VPC cannot be scoped, as in AWSLambdaVPCAccessExecutionRole; the FOCUS
    # export writes keys of each cluster and day under its prefix, and nothing else)
    assert wild_actions == [] and wild_resources == []


@pytest.mark.parametrize("extra", [
    {"Statement": [{"Effect": "Allow", "Action": "dynamodb:*", "Resource": {"Fn::GetAtt": ["FindingsTable", "Arn"]}}]},
    {"Statement": [{"Effect": "Allow", "Action": ["dynamodb:Query"], "Resource": {"Fn::Sub": "${FindingsTable.Arn}/index/*"}}]},
    {"Statement": [{"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": {"Fn::GetAtt": ["AlertsQueue", "Arn"]}}]},
    {"SQSSendMessagePolicy": {"QueueName": {"Fn::GetAtt": ["AlertsQueue", "QueueName"]}}},
])
def test_template_permissions_check_catches_an_extra_grant(template: dict[str, Any], extra: Any) -> None:
    # GIVEN the template with one grant added to the price function
    changed = copy.deepcopy(template)
    changed["Resources"]["PriceFindingsFunction"]["Properties"]["Policies"].append(extra)
    # WHEN compared with the table / THEN the extra grant is seen
    assert grants(changed)["PriceFindingsFunction"] != EXPECTED["PriceFindingsFunction"]


def test_template_permissions_check_catches_a_missing_grant(template: dict[str, Any]) -> None:
    # GIVEN the template without the notify function's Query on the activity index (digest siblings)
    changed = copy.deepcopy(template)
    policies = changed["Resources"]["NotifySlackFunction"]["Properties"]["Policies"]
    changed["Resources"]["NotifySlackFunction"]["Properties"]["Policies"] = [
        p for p in policies if not (isinstance(p, dict) and "dynamodb:Query" in str(p))]
    # WHEN compared with the table
    missing = EXPECTED["NotifySlackFunction"] - grants(changed)["NotifySlackFunction"]
    # THEN the missing Query is reported
    assert missing == query(BY_ACTIVITY_DAY)


def test_template_permissions_alerts_batching_window_and_interaction_jira_env(template: dict[str, Any]) -> None:
    # GIVEN the notify and interactions functions
    res = template["Resources"]
    alerts = res["NotifySlackFunction"]["Properties"]["Events"]["Alerts"]["Properties"]
    env = res["SlackInteractionsFunction"]["Properties"]["Environment"]["Variables"]
    visibility = int(res["AlertsQueue"]["Properties"]["VisibilityTimeout"])
    # WHEN read / THEN one scan's alerts are batched into one digest, the queue stays invisible long enough,
    # and the "Create ticket" button can reach Jira's secret
    window = int(alerts["MaximumBatchingWindowInSeconds"])
    assert 1 <= window <= 60 and visibility >= 6 * 60 + window
    assert env["JIRA_SECRET_ARN"] == {"Ref": "JiraSecretArn"}
