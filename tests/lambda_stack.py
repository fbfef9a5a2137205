"""Test harness: template.yaml's functions run as Lambda runs them, over moto's server, with every AWS call they make
recorded and checked against that function's IAM policy in the template.

* **The stack** (`DeployedStack`): the template's queues and table in moto (`tests.aws_resources.create_stack`), the
  configuration document in SSM at the template's `CONFIG_PARAMETER_NAME`, the Slack / Jira secrets in Secrets
  Manager (their ARNs are the stack parameters `SlackSecretArn` / `JiraSecretArn`).
* **A function** is invoked by its logical id: its environment is the template's (`Globals.Function.Environment` and
  its own `Environment`, every `!Ref` / `!GetAtt` / `!Sub` / `!If` resolved against the stack), then
  `functions/<CodeUri>/app.py`'s `lambda_handler(event, context)` is called. A container stays warm between
  invocations of the same function; another function gets a cold one (every composition root's cache cleared).
* **Every AWS API call** a function makes is recorded through botocore's `before-parameter-build` event, registered on
  each client botocore creates (`botocore.session.Session.create_client` is wrapped: boto3's default session, the
  sessions Powertools' parameter providers make, all of them).
* **The IAM check** (`IamEvaluator`): each recorded call becomes the IAM requests it needs — action and resource
  ARN (table, `table/<t>/index/<i>` for a Query on an index, queue, parameter, secret, S3 object), with
  `dynamodb:LeadingKeys` as the condition context — as the AWS service authorisation reference documents them
  (SendMessageBatch is authorised by sqs:SendMessage; TransactWriteItems by the action of each of its items;
  BatchGetItem by dynamodb:BatchGetItem on each table). The function's policies are read from the template: inline
  statements and the SAM policy templates the template uses (expanded as SAM's policy_templates.json does; an unknown
  one fails), every intrinsic resolved and every `!If` decided by the template's conditions with the stack's
  parameter values. A request no Allow statement covers is a denial: the function would fail in AWS.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from functools import _lru_cache_wrapper
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
import botocore.session
import pytest

from tests.aws_resources import ROOT, Stack, create_stack, load_template
from tests.lambda_events import FakeLambdaContext, load_handler

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
PARTITION = "aws"

#: botocore signing name → IAM service prefix, where they differ
IAM_PREFIX = {"monitoring": "cloudwatch", "email": "ses"}

#: SAM policy templates the template may use, as SAM's policy_templates.json expands them: statements with
#: `<Param>` standing for the template parameter of that name.
SAM_POLICY_TEMPLATES: dict[str, list[dict[str, Any]]] = {
    "AWSSecretsManagerGetSecretValuePolicy": [
        {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": "<SecretArn>"}],
    "VPCAccessPolicy": [
        {"Effect": "Allow", "Action": ["ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
                                       "ec2:DescribeNetworkInterfaces", "ec2:DetachNetworkInterface"], "Resource": "*"}],
    "SQSSendMessagePolicy": [
        {"Effect": "Allow", "Action": ["sqs:SendMessage*"],
         "Resource": {"Fn::Sub": ["arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${queueName}",
                                  {"queueName": "<QueueName>"}]}}],
    "DynamoDBReadPolicy": [
        {"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:Scan", "dynamodb:Query", "dynamodb:BatchGetItem",
                                       "dynamodb:DescribeTable"],
         "Resource": [{"Fn::Sub": ["arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${tableName}",
                                   {"tableName": "<TableName>"}]},
                      {"Fn::Sub": ["arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${tableName}/index/*",
                                   {"tableName": "<TableName>"}]}]}],
}


# -- recorded calls --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ApiCall:
    """One AWS API call a function made: the function's logical id, the service's IAM prefix, the operation, its
    parameters (as the caller passed them to botocore)."""

    function: str
    service: str
    operation: str
    params: dict[str, Any]


@dataclass(frozen=True)
class IamRequest:
    """One authorisation request an API call makes: `action` on `resource`, with condition keys."""

    action: str
    resource: str
    context: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def describe(self) -> str:
        extra = "".join(f" [{k}={list(v)}]" for k, v in self.context)
        return f"{self.action} on {self.resource}{extra}"


class CallRecorder:
    """Records every botocore call made while `function` is set (see the module docstring)."""

    def __init__(self) -> None:
        self.function: str | None = None
        self.calls: list[ApiCall] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = botocore.session.Session.create_client
        recorder = self

        def create_client(session: Any, *args: Any, **kwargs: Any) -> Any:
            client = original(session, *args, **kwargs)
            client.meta.events.register("before-parameter-build", recorder._on_call)
            return client

        monkeypatch.setattr(botocore.session.Session, "create_client", create_client)

    def _on_call(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if self.function is None:
            return
        service = model.service_model
        prefix = service.signing_name or service.endpoint_prefix
        self.calls.append(ApiCall(self.function, IAM_PREFIX.get(prefix, prefix), model.name, json.loads(
            json.dumps(params, default=str))))

    def of(self, function: str) -> list[ApiCall]:
        return [c for c in self.calls if c.function == function]


# -- what a call needs ------------------------------------------------------------------------------------------------
def _table_arn(name: str) -> str:
    return name if name.startswith("arn:") else f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def _queue_arn(url: str) -> str:
    parts = urlparse(url).path.strip("/").split("/")
    account, name = (parts[0], parts[1]) if len(parts) >= 2 else (ACCOUNT, parts[-1])
    return f"arn:{PARTITION}:sqs:{REGION}:{account}:{name}"


def _leading_key(item_or_key: dict[str, Any] | None, partition_key: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not item_or_key or partition_key not in item_or_key:
        return ()
    value = item_or_key[partition_key]
    text = next(iter(value.values())) if isinstance(value, dict) else value
    return (("dynamodb:LeadingKeys", (str(text),)),)


#: SQS batch actions authorised by their single-message action (AWS service authorisation reference)
SQS_BATCH = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
             "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}
#: the IAM action of each kind of TransactWriteItems / TransactGetItems item
TRANSACT_ITEM = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem",
                 "Get": "GetItem"}


def iam_requests(call: ApiCall, *, secret_arns: dict[str, str], partition_key: str = "fingerprint") -> list[IamRequest]:
    """The authorisation requests `call` makes (action, resource ARN, condition context).

    Raises:
        AssertionError: an operation this mapping does not know (add it deliberately, from the AWS reference).
    """
    p, op, svc = call.params, call.operation, call.service
    if svc == "dynamodb":
        if op in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
            key = p.get("Key") if op != "PutItem" else p.get("Item")
            return [IamRequest(f"dynamodb:{op}", _table_arn(p["TableName"]), _leading_key(key, partition_key))]
        if op in ("Query", "Scan"):
            arn = _table_arn(p["TableName"]) + (f"/index/{p['IndexName']}" if p.get("IndexName") else "")
            return [IamRequest(f"dynamodb:{op}", arn)]
        if op in ("BatchGetItem", "BatchWriteItem"):
            out = []
            for table, spec in p["RequestItems"].items():
                keys = spec.get("Keys", []) if op == "BatchGetItem" else [
                    (w.get("PutRequest", {}).get("Item") or w.get("DeleteRequest", {}).get("Key")) for w in spec]
                out += [IamRequest(f"dynamodb:{op}", _table_arn(table), _leading_key(k, partition_key)) for k in keys]
            return out
        if op in ("TransactWriteItems", "TransactGetItems"):
            out = []
            for item in p["TransactItems"]:
                ((kind, spec),) = item.items()
                key = spec.get("Item") if kind == "Put" else spec.get("Key")
                out.append(IamRequest(f"dynamodb:{TRANSACT_ITEM[kind]}", _table_arn(spec["TableName"]),
                                      _leading_key(key, partition_key)))
            return out
        if op == "DescribeTable":
            return [IamRequest("dynamodb:DescribeTable", _table_arn(p["TableName"]))]
    if svc == "sqs":
        if op == "GetQueueUrl":
            return [IamRequest("sqs:GetQueueUrl", f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{p['QueueName']}")]
        return [IamRequest(f"sqs:{SQS_BATCH.get(op, op)}", _queue_arn(p["QueueUrl"]))]
    if svc == "ssm" and op in ("GetParameter", "GetParameters"):
        names = [p["Name"]] if op == "GetParameter" else p["Names"]
        return [IamRequest(f"ssm:{op}", f"arn:{PARTITION}:ssm:{REGION}:{ACCOUNT}:parameter/{n.lstrip('/')}") for n in names]
    if svc == "secretsmanager" and op in ("GetSecretValue", "DescribeSecret"):
        secret = p["SecretId"]
        return [IamRequest(f"secretsmanager:{op}", secret if secret.startswith("arn:") else secret_arns[secret])]
    if svc == "s3" and op in ("GetObject", "PutObject"):
        return [IamRequest(f"s3:{op}", f"arn:{PARTITION}:s3:::{p['Bucket']}/{p['Key']}")]
    if svc == "cloudwatch" and op == "PutMetricData":
        return [IamRequest("cloudwatch:PutMetricData", "*")]
    raise AssertionError(f"{call.function}: {svc}:{op} — no IAM mapping in tests/lambda_stack.py; add it from the AWS "
                         "service authorisation reference")


# -- the template, resolved -------------------------------------------------------------------------------------------
class Resolver:
    """CloudFormation intrinsics over one stack: Ref, Fn::GetAtt, Fn::Sub, Fn::If, Fn::Join, Fn::Equals, Fn::Not,
    Fn::And, Fn::Or, Fn::Select, Condition; pseudo parameters for moto's account and region."""

    def __init__(self, template: dict[str, Any], params: dict[str, Any], stack: Stack) -> None:
        self.template = template
        declared = template.get("Parameters", {})
        self.params = {k: params.get(k, v.get("Default", "")) for k, v in declared.items()}
        missing = [k for k, v in self.params.items() if v is None]
        assert not missing, f"stack parameters without a value: {missing}"
        self.stack = stack

    def ref(self, name: str) -> Any:
        pseudo = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": PARTITION,
                  "AWS::StackName": "gpuwaste-test", "AWS::URLSuffix": "amazonaws.com"}
        if name in pseudo:
            return pseudo[name]
        if name in self.params:
            value = self.params[name]
            kind = self.template["Parameters"][name].get("Type", "String")
            if kind == "CommaDelimitedList" and isinstance(value, str):
                return value.split(",") if value else [""]
            return value
        if name in self.stack.queue_urls:
            return self.stack.queue_urls[name]
        res = self.template["Resources"].get(name)
        if res is not None and res["Type"] == "AWS::DynamoDB::Table":
            return self.stack.table_name
        raise AssertionError(f"Ref {name}: not resolvable in the test stack")

    def get_att(self, name: str, attr: str) -> str:
        if name in self.stack.queue_arns:
            if attr == "Arn":
                return self.stack.queue_arns[name]
            if attr == "QueueName":
                return name
            if attr == "QueueUrl":
                return self.stack.queue_urls[name]
        res = self.template["Resources"].get(name)
        if res is not None and res["Type"] == "AWS::DynamoDB::Table" and attr == "Arn":
            return _table_arn(self.stack.table_name)
        raise AssertionError(f"GetAtt {name}.{attr}: not resolvable in the test stack")

    def condition(self, name: str) -> bool:
        return bool(self.value(self.template["Conditions"][name]))

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.value(n) for n in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Ref":
                return NO_VALUE if arg == "AWS::NoValue" else self.ref(arg)
            if key == "Fn::GetAtt":
                name, attr = arg.split(".", 1) if isinstance(arg, str) else arg
                return self.get_att(name, attr)
            if key == "Fn::Sub":
                return self.sub(arg)
            if key == "Fn::If":
                cond, yes, no = arg
                return self.value(yes if self.condition(cond) else no)
            if key == "Fn::Join":
                sep, items = arg
                return sep.join(str(v) for v in self.value(items))
            if key == "Fn::Equals":
                a, b = (self.value(x) for x in arg)
                return a == b
            if key == "Fn::Not":
                return not self.value(arg[0])
            if key == "Fn::And":
                return all(self.value(x) for x in arg)
            if key == "Fn::Or":
                return any(self.value(x) for x in arg)
            if key == "Fn::Select":
                index, items = arg
                return self.value(items)[int(self.value(index))]
            if key == "Condition":
                return self.condition(arg)
        out = {k: self.value(v) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}

    def sub(self, arg: Any) -> str:
        text, local = (arg, {}) if isinstance(arg, str) else (arg[0], {k: self.value(v) for k, v in arg[1].items()})

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in local:
                return str(local[name])
            if "." in name:
                res, attr = name.split(".", 1)
                return self.get_att(res, attr)
            return str(self.ref(name))

        return re.sub(r"\$\{([^}]+)\}", one, text)


NO_VALUE: Any = type("NoValue", (), {"__repr__": lambda self: "AWS::NoValue"})()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def function_statements(resolver: Resolver, logical_id: str) -> list[dict[str, Any]]:
    """The Allow/Deny statements of a function's `Policies`, concrete (SAM templates expanded, intrinsics resolved).

    Raises:
        AssertionError: a managed policy or a SAM policy template this harness does not know.
    """
    props = resolver.template["Resources"][logical_id]["Properties"]
    out: list[dict[str, Any]] = []
    for raw in _list(props.get("Policies", [])):
        policy = resolver.value(raw)
        if policy is NO_VALUE:
            continue
        if isinstance(policy, str):
            raise AssertionError(f"{logical_id}: managed policy {policy!r} — review it and model it here")
        if "Statement" in policy:
            out += [s for s in _list(policy["Statement"]) if s is not NO_VALUE]
            continue
        for name, params in policy.items():
            expansion = SAM_POLICY_TEMPLATES.get(name)
            if expansion is None:
                raise AssertionError(f"{logical_id}: SAM policy template {name} — add its expansion from SAM's "
                                     "policy_templates.json")
            text = json.dumps(expansion)
            for param, value in (params or {}).items():
                text = text.replace(f'"<{param}>"', json.dumps(value))
            out += resolver.value(json.loads(text))
    return out


def _matches(pattern: str, value: str, *, case: bool) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


def _condition_holds(condition: dict[str, Any], request: IamRequest) -> bool:
    """The IAM condition operators this harness models; anything else does not hold (strict)."""
    context = dict(request.context)
    for operator, keys in condition.items():
        for key, expected in keys.items():
            wanted = [str(v) for v in _list(expected)]
            values = context.get(key)
            if operator in ("ForAllValues:StringLike", "ForAllValues:StringEquals"):
                like = operator.endswith("Like")
                if values is None or not all(any(_matches(w, v, case=True) if like else w == v for w in wanted)
                                             for v in values):
                    return False
            else:
                return False
    return True


def _covers(statement: dict[str, Any], request: IamRequest) -> bool:
    actions = [str(a) for a in _list(statement.get("Action", []))]
    resources = [str(r) for r in _list(statement.get("Resource", []))]
    return (any(_matches(a, request.action, case=False) for a in actions)
            and any(_matches(r, request.resource, case=True) for r in resources)
            and _condition_holds(statement.get("Condition", {}), request))


def allowed(statements: list[dict[str, Any]], request: IamRequest) -> bool:
    """IAM's identity-policy evaluation for one request: an explicit Deny wins, else any Allow, else denied."""
    if any(s.get("Effect") == "Deny" and _covers(s, request) for s in statements):
        return False
    return any(s.get("Effect", "Allow") == "Allow" and _covers(s, request) for s in statements)


# -- the stack --------------------------------------------------------------------------------------------------------
def _reset_composition_roots() -> None:
    """A cold container: every cached factory of every bootstrap module, the pipeline's config/clients and Powertools'
    parameter providers (and their clients) forgotten."""
    from aws_lambda_powertools.utilities.parameters import base

    from gpuwaste.bootstrap import pipeline

    pipeline.reset()
    base.DEFAULT_PROVIDERS.clear()
    for name, module in list(sys.modules.items()):
        if name.startswith("gpuwaste.bootstrap.") and module is not None:
            for value in vars(module).values():
                if isinstance(value, _lru_cache_wrapper):
                    value.cache_clear()


@dataclass
class DeployedStack:
    """template.yaml in moto with its functions invocable by logical id; see the module docstring."""

    template: dict[str, Any]
    stack: Stack
    params: dict[str, Any]
    recorder: CallRecorder
    monkeypatch: pytest.MonkeyPatch
    secret_arns: dict[str, str] = field(default_factory=dict)
    clients: dict[str, Any] = field(default_factory=dict)
    warm: str | None = None
    path: Path = ROOT / "template.yaml"

    @property
    def resolver(self) -> Resolver:
        return Resolver(self.template, self.params, self.stack)

    def client(self, service: str) -> Any:
        if service not in self.clients:
            self.clients[service] = boto3.client(service, region_name=REGION)
        return self.clients[service]

    def url(self, queue: str) -> str:
        return self.stack.queue_urls[queue]

    def function_env(self, logical_id: str) -> dict[str, str]:
        """The function's environment as CloudFormation would set it (Globals, then the function's own)."""
        resolver = self.resolver
        glob = self.template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
        own = self.template["Resources"][logical_id]["Properties"].get("Environment", {}).get("Variables", {})
        return {k: str(v) for k, v in resolver.value({**glob, **own}).items()}

    def folder(self, logical_id: str) -> str:
        return str(self.template["Resources"][logical_id]["Properties"]["CodeUri"]).strip("/").split("/")[-1]

    def invoke(self, logical_id: str, event: dict[str, Any], context: Any = None) -> Any:
        """`lambda_handler(event, context)` of the function, in its template environment, its AWS calls recorded."""
        if self.warm != logical_id:
            for name in {n for f in self.functions() for n in self.function_env(f)}:
                self.monkeypatch.delenv(name, raising=False)
            for name, value in self.function_env(logical_id).items():
                self.monkeypatch.setenv(name, value)
            self.monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
            _reset_composition_roots()
            self.warm = logical_id
        handler = load_handler(self.folder(logical_id))
        self.recorder.function = logical_id
        try:
            return handler.lambda_handler(event, context or FakeLambdaContext())
        finally:
            self.recorder.function = None

    def functions(self) -> list[str]:
        """The functions the stack creates (a function whose `Condition` is false with these parameters is absent)."""
        resolver = self.resolver
        return [k for k, v in self.template["Resources"].items() if v["Type"] == "AWS::Serverless::Function"
                and (not v.get("Condition") or resolver.condition(v["Condition"]))]

    def statements(self, logical_id: str) -> list[dict[str, Any]]:
        return function_statements(self.resolver, logical_id)

    def denied(self, logical_id: str | None = None) -> list[str]:
        """Every recorded request the function's policy does not allow, as "<function>: <action> on <resource>"."""
        out: list[str] = []
        for function in [logical_id] if logical_id else self.functions():
            statements = self.statements(function)
            for call in self.recorder.of(function):
                for request in iam_requests(call, secret_arns=self.secret_arns):
                    line = f"{function}: {request.describe()} (from {call.service}:{call.operation})"
                    if not allowed(statements, request) and line not in out:
                        out.append(line)
        return out

    def exercised(self, logical_id: str) -> set[tuple[str, str]]:
        """(action, resource) of every request the function made."""
        return {(r.action, r.resource) for c in self.recorder.of(logical_id)
                for r in iam_requests(c, secret_arns=self.secret_arns)}

    # -- SQS as Lambda's event source mapping plays it ------------------------------------------------------------
    def record(self, queue: str, m: dict[str, Any]) -> dict[str, Any]:
        return {"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
                "attributes": m.get("Attributes", {}), "messageAttributes": {}, "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs", "eventSourceARN": self.stack.queue_arns[queue], "awsRegion": REGION}

    def consumer(self, queue: str) -> tuple[str, int]:
        """(the function whose SQS event reads `queue`, its BatchSize)."""
        for rid in self.functions():
            for ev in self.template["Resources"][rid]["Properties"].get("Events", {}).values():
                if ev["Type"] == "SQS" and self.resolver.value(ev["Properties"]["Queue"]) == self.stack.queue_arns[queue]:
                    return rid, int(ev["Properties"].get("BatchSize", 10))
        raise AssertionError(f"no function consumes {queue}")

    def pump(self, queue: str, *, max_rounds: int = 20) -> list[Any]:
        """Deliver `queue` to its consumer (batches of its BatchSize) until empty: delete what succeeded, make the
        reported failures visible again at once. Returns each invocation's response."""
        function, size = self.consumer(queue)
        sqs = self.client("sqs")
        responses = []
        for _ in range(max_rounds):
            got = sqs.receive_message(QueueUrl=self.url(queue), MaxNumberOfMessages=min(size, 10), WaitTimeSeconds=0,
                                      AttributeNames=["All"]).get("Messages", [])
            if not got:
                break
            response = self.invoke(function, {"Records": [self.record(queue, m) for m in got]})
            responses.append(response)
            failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
            done = [m for m in got if m["MessageId"] not in failed]
            if done:
                sqs.delete_message_batch(QueueUrl=self.url(queue), Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)])
            for m in got:
                if m["MessageId"] in failed:
                    sqs.change_message_visibility(QueueUrl=self.url(queue), ReceiptHandle=m["ReceiptHandle"],
                                                  VisibilityTimeout=0)
        return responses

    def drain(self, queue: str) -> list[dict[str, Any]]:
        """Every message on `queue` (received and deleted), with its message attributes."""
        sqs = self.client("sqs")
        out: list[dict[str, Any]] = []
        while True:
            got = sqs.receive_message(QueueUrl=self.url(queue), MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                      MessageAttributeNames=["All"]).get("Messages", [])
            if not got:
                return out
            out += got
            sqs.delete_message_batch(QueueUrl=self.url(queue), Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])

    def send(self, queue: str, *bodies: str) -> None:
        for body in bodies:
            self.client("sqs").send_message(QueueUrl=self.url(queue), MessageBody=body)


def deploy(monkeypatch: pytest.MonkeyPatch, *, config: str, secrets: dict[str, str], params: dict[str, Any] | None = None,
           template_path: Path | None = None) -> DeployedStack:
    """Create the stack in moto (already reset, env pointing at it): queues, table, the config document in SSM,
    `secrets` (stack parameter name → secret string) in Secrets Manager; install the call recorder."""
    recorder = CallRecorder()
    recorder.install(monkeypatch)
    path = template_path or ROOT / "template.yaml"
    sqs, ddb = boto3.client("sqs", region_name=REGION), boto3.client("dynamodb", region_name=REGION)
    stack = create_stack(sqs, ddb, path=path)
    template = load_template(path)
    values: dict[str, Any] = dict(params or {})
    arns: dict[str, str] = {}
    sm = boto3.client("secretsmanager", region_name=REGION)
    for param, text in secrets.items():
        created = sm.create_secret(Name=f"gpuwaste/{param}", SecretString=text)
        values[param], arns[f"gpuwaste/{param}"] = created["ARN"], created["ARN"]
    deployed = DeployedStack(template=template, stack=stack, params=values, recorder=recorder, monkeypatch=monkeypatch,
                             secret_arns=arns, path=path)
    parameter = deployed.resolver.value(template["Globals"]["Function"]["Environment"]["Variables"]["CONFIG_PARAMETER_NAME"])
    boto3.client("ssm", region_name=REGION).put_parameter(Name=parameter, Type="String", Value=config, Overwrite=True)
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    return deployed


__all__ = ["ACCOUNT", "ApiCall", "CallRecorder", "DeployedStack", "IamRequest", "REGION", "Resolver", "allowed", "deploy",
           "function_statements", "iam_requests"]

