"""Test helper: create template.yaml's SQS queues and DynamoDB table in moto, from the template's own properties.

The queues keep their VisibilityTimeout, retention and RedrivePolicy (maxReceiveCount, DLQ resolved from
`!GetAtt XDlq.Arn`); the table keeps its keys, GSIs and TTL. Queue names are the logical IDs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """template.yaml as data; short-form intrinsics (!Ref, !GetAtt, !Sub, !If) become their long form."""
    from cfnlint.decode import decode

    template, matches = decode(str(path))
    if template is None:
        raise AssertionError(f"{path}: cannot parse: {matches}")
    return json.loads(json.dumps(template))  # plain dicts and strs (cfn-lint returns node subclasses)


@dataclass
class Stack:
    """What was created: logical id → queue URL / ARN, and the table name."""

    queue_urls: dict[str, str] = field(default_factory=dict)
    queue_arns: dict[str, str] = field(default_factory=dict)
    table_name: str = ""
    template: dict[str, Any] = field(default_factory=dict)


def _attributes(props: dict[str, Any], arns: dict[str, str]) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for key in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "MaximumMessageSize"):
        if key in props:
            attrs[key] = str(props[key])
    redrive = props.get("RedrivePolicy")
    if redrive:
        target = redrive["deadLetterTargetArn"]["Fn::GetAtt"]
        dlq = target[0] if isinstance(target, list) else target.split(".")[0]
        attrs["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": arns[dlq], "maxReceiveCount": int(redrive["maxReceiveCount"])})
    return attrs


def create_stack(sqs: Any, dynamodb: Any, *, path: Path = TEMPLATE, table_name: str = "FindingsTable") -> Stack:
    """Create every AWS::SQS::Queue (DLQs first) and the AWS::DynamoDB::Table of the template."""
    template = load_template(path)
    resources = template["Resources"]
    stack = Stack(template=template)
    queues = {k: v.get("Properties", {}) for k, v in resources.items() if v["Type"] == "AWS::SQS::Queue"}
    ordered = sorted(queues, key=lambda k: "RedrivePolicy" in queues[k])  # DLQs (no redrive) first
    for logical in ordered:
        url = sqs.create_queue(QueueName=logical, Attributes=_attributes(queues[logical], stack.queue_arns))["QueueUrl"]
        stack.queue_urls[logical] = url
        stack.queue_arns[logical] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    tables = [v["Properties"] for v in resources.values() if v["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == 1, "the template has one DynamoDB table"
    props = tables[0]
    kwargs: dict[str, Any] = {
        "TableName": table_name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    dynamodb.create_table(**kwargs)
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        dynamodb.update_time_to_live(TableName=table_name, TimeToLiveSpecification=ttl)
    stack.table_name = table_name
    return stack


__all__ = ["Stack", "create_stack", "load_template"]
