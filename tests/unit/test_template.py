"""Template checks: cfn-lint, every reference resolves (incl. Globals and policy templates, cfn-lint's blind
spots), code exists for every function, least-privilege IAM, queues with DLQs and long enough visibility."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from gpuwaste.store.dynamodb import BY_ACTIVITY_DAY, OPEN_BY_CLUSTER
from tests.aws_resources import ROOT, TEMPLATE, load_template

PSEUDO = {"AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition", "AWS::Region",
          "AWS::StackId", "AWS::StackName", "AWS::URLSuffix"}
FUNCTIONS = {
    "DispatchScansFunction": "dispatch_scans", "ScanGpuWasteFunction": "scan_gpu_waste",
    "PriceFindingsFunction": "price_findings", "DedupeFindingsFunction": "dedupe_findings",
    "NotifySlackFunction": "notify_slack", "CreateTicketsFunction": "create_tickets",
    "SendDailySummaryFunction": "send_daily_summary", "SlackInteractionsFunction": "slack_interactions",
    "ExportFocusFunction": "export_focus",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def sam_generated(template: dict[str, Any]) -> set[str]:
    """Logical ids SAM adds: <Function>Role (no explicit Role), <Function>Url (FunctionUrlConfig)."""
    out: set[str] = set()
    for name, res in of_type(template, "AWS::Serverless::Function").items():
        out.add(f"{name}Role")
        if "FunctionUrlConfig" in res.get("Properties", {}):
            out.add(f"{name}Url")
    return out


def references(node: Any) -> tuple[set[str], set[str]]:
    """(Ref/GetAtt/Sub targets, Fn::If condition names) anywhere under `node`."""
    targets: set[str] = set()
    conditions: set[str] = set()

    def walk(n: Any) -> None:
        if isinstance(n, dict):
            for key, value in n.items():
                if key == "Ref" and isinstance(value, str):
                    targets.add(value)
                elif key == "Fn::GetAtt":
                    targets.add(value[0] if isinstance(value, list) else str(value).split(".")[0])
                elif key == "Fn::Sub":
                    text = value[0] if isinstance(value, list) else value
                    local = set(value[1]) if isinstance(value, list) and len(value) > 1 else set()
                    targets.update(m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text) if m.split(".")[0] not in local)
                elif key == "Fn::If":
                    conditions.add(value[0])
                elif key == "Condition" and isinstance(value, str):
                    conditions.add(value)
                walk(value)
        elif isinstance(n, list):
            for item in n:
                walk(item)

    walk(node)
    return targets, conditions


def unresolved(template: dict[str, Any]) -> list[str]:
    known = set(template["Resources"]) | set(template.get("Parameters", {})) | PSEUDO | sam_generated(template)
    targets, conditions = references({k: v for k, v in template.items() if k != "Conditions"})
    cond_targets, cond_conditions = references(template.get("Conditions", {}))
    bad = sorted(t for t in targets | cond_targets if t not in known)
    bad += sorted(f"condition {c}" for c in conditions | cond_conditions if c not in template.get("Conditions", {}))
    return bad


def test_template_passes_cfn_lint() -> None:
    # GIVEN the committed template
    from cfnlint.api import ManualArgs, lint_file

    # WHEN cfn-lint runs on it (offline)
    matches = lint_file(TEMPLATE, config=ManualArgs(regions=["us-east-1"]))
    # THEN there are no errors or warnings
    assert [f"{m.rule.id} {m.message} (line {m.linenumber})" for m in matches] == []


def test_template_every_reference_resolves(template: dict[str, Any]) -> None:
    # GIVEN the template, Globals and policy templates included (cfn-lint misses those)
    # WHEN every Ref, GetAtt, Sub variable and condition is collected
    bad = unresolved(template)
    # THEN each names a resource, parameter, pseudo parameter, SAM-generated resource or condition
    assert bad == []


def test_template_reference_check_catches_bad_refs_in_globals_and_policies() -> None:
    # GIVEN a template with a typo in Globals and in a policy template, the two places cfn-lint misses
    bad = {
        "Parameters": {}, "Conditions": {},
        "Globals": {"Function": {"Runtime": "python3.11", "Environment": {"Variables": {"T": {"Ref": "FindingsTabel"}}}}},
        "Resources": {"F": {"Type": "AWS::Serverless::Function", "Properties": {
            "Policies": [{"DynamoDBCrudPolicy": {"TableName": {"Ref": "DedupTabel"}}}]}}},
    }
    # WHEN the checker runs
    # THEN both typos are reported
    assert unresolved(bad) == ["DedupTabel", "FindingsTabel"]


def test_template_functions_have_code_and_handler(template: dict[str, Any]) -> None:
    # GIVEN the functions of the template
    functions = of_type(template, "AWS::Serverless::Function")
    handler = template["Globals"]["Function"]["Handler"]
    module, func = handler.split(".")
    # WHEN their CodeUri and Handler are resolved on disk
    problems = []
    for name, res in functions.items():
        props = res["Properties"]
        code = ROOT / props["CodeUri"]
        source = code / f"{module}.py"
        if not source.is_file():
            problems.append(f"{name}: {source} missing")
            continue
        defined = {n.name for n in ast.parse(source.read_text()).body if isinstance(n, ast.FunctionDef)}
        if props.get("Handler", handler).split(".")[1] not in defined:
            problems.append(f"{name}: {func} not defined in {source}")
    # THEN every function has its folder, app.py and lambda_handler, under the fixed names
    assert problems == []
    assert {n: Path(r["Properties"]["CodeUri"]).name for n, r in functions.items()} == FUNCTIONS


def test_template_globals_follow_the_house_shape(template: dict[str, Any]) -> None:
    # GIVEN Globals and the shared layer
    g = template["Globals"]["Function"]
    layer = template["Resources"]["SharedLayer"]
    # WHEN compared with the conventions (style.md "template shape")
    env = g["Environment"]["Variables"]
    # THEN one runtime matching the layer (built by shared/Makefile for that Python), arm64, tracing, the layer,
    # Powertools env
    makefile = (ROOT / "shared" / "Makefile").read_text()
    assert [g["Runtime"]] == layer["Properties"]["CompatibleRuntimes"] == ["python3.11"]
    assert layer["Metadata"]["BuildMethod"] == "makefile" and "\nbuild-SharedLayer:" in makefile
    assert "LAYER_PYTHON ?= 3.11\n" in makefile and "LAYER_PLATFORM ?= manylinux2014_aarch64\n" in makefile
    assert g["Architectures"] == ["arm64"] and g["Tracing"] == "Active"
    assert g["Layers"] == [{"Ref": "SharedLayer"}]
    assert {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_LOG_LEVEL", "CONFIG_PARAMETER_NAME"} <= set(env)
    assert layer["Properties"]["ContentUri"] == "shared/" and (ROOT / "shared" / "requirements.txt").is_file()


def _statements(policies: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in policies:
        if isinstance(p, dict) and "Fn::If" in p:
            out += _statements([x for x in p["Fn::If"][1:] if isinstance(x, dict) and "Ref" not in x])
        elif isinstance(p, dict) and "Statement" in p:
            out += p["Statement"]
    return out


def test_template_iam_has_no_wildcard_actions_or_resources(template: dict[str, Any]) -> None:
    # GIVEN every function's policies
    found = []
    for name, res in of_type(template, "AWS::Serverless::Function").items():
        policies = res["Properties"].get("Policies", [])
        assert isinstance(policies, list) and policies, f"{name} has no explicit policies"
        for st in _statements(policies):
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            found += [f"{name}: action {a}" for a in actions if "*" in a]
            found += [f"{name}: resource *" for r in resources if r == "*"]
        # AWS managed policy names (strings) would be broad: only SAM policy templates and statements
        found += [f"{name}: managed policy {p}" for p in policies if isinstance(p, str)]
    # WHEN checked
    # THEN no action has a wildcard and no resource is "*"
    assert found == []


def _timeout(template: dict[str, Any], function: str) -> int:
    props = template["Resources"][function]["Properties"]
    return int(props.get("Timeout", template["Globals"]["Function"]["Timeout"]))


def test_template_queues_have_dlq_and_visibility_six_times_consumer_timeout(template: dict[str, Any]) -> None:
    # GIVEN the queues and the SQS event sources
    queues = of_type(template, "AWS::SQS::Queue")
    consumers: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, res in of_type(template, "AWS::Serverless::Function").items():
        for event in res["Properties"].get("Events", {}).values():
            if event["Type"] == "SQS":
                consumers[event["Properties"]["Queue"]["Fn::GetAtt"][0]] = (name, event["Properties"])
    sources = {k: v for k, v in queues.items() if "RedrivePolicy" in v["Properties"]}
    dlqs = {v["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0] for v in sources.values()}
    # WHEN each source queue is checked against its consumer
    problems = []
    for name, res in sources.items():
        props = res["Properties"]
        if name not in consumers:
            problems.append(f"{name}: no consumer")
            continue
        fn, event = consumers[name]
        if int(props["VisibilityTimeout"]) < 6 * _timeout(template, fn):
            problems.append(f"{name}: VisibilityTimeout {props['VisibilityTimeout']} < 6 x {fn} Timeout")
        if event.get("FunctionResponseTypes") != ["ReportBatchItemFailures"] or "BatchSize" not in event:
            problems.append(f"{name}: event needs ReportBatchItemFailures and an explicit BatchSize")
        if not 1 <= int(props["RedrivePolicy"]["maxReceiveCount"]) <= 10:
            problems.append(f"{name}: maxReceiveCount out of range")
        dlq_retention = int(queues[props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]]["Properties"]["MessageRetentionPeriod"])
        if dlq_retention <= int(props["MessageRetentionPeriod"]):
            problems.append(f"{name}: DLQ must keep messages longer than the source")
    schedule_dlqs = {event["Properties"]["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
                     for res in of_type(template, "AWS::Serverless::Function").values()
                     for event in res["Properties"].get("Events", {}).values() if event["Type"] == "ScheduleV2"}
    # THEN every queue is a DLQ (of a queue or of the schedules) or a consumed source queue with a DLQ
    assert problems == []
    assert schedule_dlqs == {"SchedulesDlq"}
    assert set(queues) == set(sources) | dlqs | schedule_dlqs
    assert set(sources) == {"ScanRequestsQueue", "FindingsQueue", "PricedQueue", "AlertsQueue", "TicketsQueue"}


def test_template_table_matches_the_store(template: dict[str, Any]) -> None:
    # GIVEN the FindingsTable
    props = template["Resources"]["FindingsTable"]["Properties"]
    # WHEN its key, indexes and TTL are read
    indexes = {i["IndexName"] for i in props["GlobalSecondaryIndexes"]}
    # THEN they are what DynamoDbFindingStore queries, with TTL on expires_at
    assert props["KeySchema"] == [{"AttributeName": "fingerprint", "KeyType": "HASH"}]
    assert indexes == {OPEN_BY_CLUSTER, BY_ACTIVITY_DAY}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_template_secrets_are_arns_and_schedules_are_parameters(template: dict[str, Any]) -> None:
    # GIVEN the parameters and schedules
    params = template["Parameters"]
    schedules = [e["Properties"] for r in of_type(template, "AWS::Serverless::Function").values()
                 for e in r["Properties"].get("Events", {}).values() if e["Type"] == "ScheduleV2"]
    # WHEN checked
    # THEN secrets are referenced by Secrets Manager ARN (never a plain secret parameter) ...
    for name in ("SlackSecretArn", "JiraSecretArn", "PrometheusSecretArn"):
        assert "secretsmanager" in params[name]["AllowedPattern"]
    assert not [p for p in params if re.search(r"token|password", p, re.I)]
    # ... and the schedules come from parameters, switchable by SchedulesEnabled, with the tick's time as input
    assert {s["ScheduleExpression"]["Ref"] for s in schedules} == {"ScanSchedule", "SummarySchedule",
                                                                  "FocusExportSchedule"}
    assert params["ScanSchedule"]["Default"] == "rate(10 minutes)"
    assert all(s["State"]["Fn::If"][0] == "SchedulesOn" and "<aws.scheduler.scheduled-time>" in s["Input"] for s in schedules)


def test_template_outputs_cover_queues_table_and_functions(template: dict[str, Any]) -> None:
    # GIVEN the outputs
    referenced = {o["Value"].get("Ref") for o in template["Outputs"].values() if isinstance(o["Value"], dict)}
    # WHEN compared with the resources
    wanted = set(of_type(template, "AWS::SQS::Queue")) | set(of_type(template, "AWS::Serverless::Function")) | {"FindingsTable"}
    # THEN each queue, the table and each function has an output
    assert wanted - referenced == set()


def test_template_alarms_cover_every_function_every_queue_age_and_every_dlq(template: dict[str, Any]) -> None:
    # GIVEN the alarms
    alarms = of_type(template, "AWS::CloudWatch::Alarm").values()

    def watched(metric: str) -> set[str]:
        out = set()
        for a in alarms:
            p = a["Properties"]
            if p["MetricName"] == metric:
                value = p["Dimensions"][0]["Value"]
                out.add(value.get("Ref") or value.get("Fn::GetAtt", [""])[0])
        return out

    functions = set(of_type(template, "AWS::Serverless::Function"))
    queues = of_type(template, "AWS::SQS::Queue")
    main = {k for k, v in queues.items() if "RedrivePolicy" in v["Properties"]}
    # THEN every function has an Errors alarm, every main queue an age-of-oldest-message alarm, every DLQ a depth alarm
    assert watched("Errors") == functions
    assert watched("ApproximateAgeOfOldestMessage") == main
    assert watched("ApproximateNumberOfMessagesVisible") == set(queues) - main
    # ... and every alarm notifies the topic when one is given
    assert all(a["Properties"]["AlarmActions"]["Fn::If"][0] == "HasAlarmTopic" for a in alarms)


def test_template_interactions_url_has_reserved_concurrency_and_no_topic_is_a_visible_warning(
        template: dict[str, Any]) -> None:
    # GIVEN the Slack interactions function and the alarm topic parameter
    fn = template["Resources"]["SlackInteractionsFunction"]["Properties"]
    param = template["Parameters"]["AlarmTopicArn"]
    # THEN a flood is capped by reserved concurrency, and deploying without a topic says so (parameter and output)
    assert fn["ReservedConcurrentExecutions"] == {"Ref": "InteractionsConcurrency"}
    assert param["Description"].startswith("WARNING")
    assert template["Outputs"]["AlarmTopicWarning"]["Condition"] == "NoAlarmTopic"
