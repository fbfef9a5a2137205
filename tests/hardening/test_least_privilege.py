"""Least privilege, checked: IAM in template.yaml and Kubernetes RBAC in deploy/.

IAM: every statement a function gets — inline `Statement`s and the SAM policy templates, expanded from the
table below (the same actions and resources as SAM's `policy_templates.json`) — may not use a wildcard
action, and may use a wildcard resource only where listed in ``WILDCARD_ALLOW`` with the reason. Both
branches of every `!If` are checked. Unknown policy templates and managed-policy names fail the test, so
a new grant needs a deliberate entry here.

Kubernetes: every Role/ClusterRole in `deploy/*.yaml` grants only get/list/watch, never on Secrets,
never a subresource (pods/exec, pods/log, ...), and never a wildcard group, resource or verb; every
binding refers to a role defined in `deploy/`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.aws_resources import load_template
from tests.hardening.conftest import Figures

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# SAM policy templates the template may use: (actions, resource) per statement, as SAM expands them.
# "<param>" marks a resource built from the template's parameter (scoped to one named resource).
SAM_POLICY_TEMPLATES: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "SQSSendMessagePolicy": [(("sqs:SendMessage*",), "<QueueName>")],
    "SQSPollerPolicy": [(("sqs:ChangeMessageVisibility", "sqs:ChangeMessageVisibilityBatch", "sqs:DeleteMessage",
                          "sqs:DeleteMessageBatch", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"), "<QueueName>")],
    "SSMParameterReadPolicy": [(("ssm:DescribeParameters",), "*"),
                               (("ssm:GetParameters", "ssm:GetParameter", "ssm:GetParametersByPath"), "<ParameterName>")],
    "AWSSecretsManagerGetSecretValuePolicy": [(("secretsmanager:GetSecretValue",), "<SecretArn>")],
    "VPCAccessPolicy": [(("ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeNetworkInterfaces",
                          "ec2:DetachNetworkInterface"), "*")],
    "DynamoDBReadPolicy": [(("dynamodb:GetItem", "dynamodb:Scan", "dynamodb:Query", "dynamodb:BatchGetItem",
                             "dynamodb:DescribeTable"), "<TableName>")],
}

# Wildcards allowed, each with why: (policy source, action) → what may be a wildcard ("action" or "resource").
# Keep it short and deliberate: add an entry only with a reason.
WILDCARD_ALLOW: dict[tuple[str, str], str] = {
    # SAM's SSMParameterReadPolicy: DescribeParameters has no resource-level permissions in IAM.
    ("SSMParameterReadPolicy", "ssm:DescribeParameters"): "resource",
    # SAM's SQSSendMessagePolicy: SendMessage + SendMessageBatch (an action prefix), still on one queue ARN.
    ("SQSSendMessagePolicy", "sqs:SendMessage*"): "action",
    # Lambda in a VPC: ENI management cannot be scoped to a resource (as AWSLambdaVPCAccessExecutionRole).
    ("VPCAccessPolicy", "ec2:CreateNetworkInterface"): "resource",
    ("VPCAccessPolicy", "ec2:DeleteNetworkInterface"): "resource",
    ("VPCAccessPolicy", "ec2:DescribeNetworkInterfaces"): "resource",
    ("VPCAccessPolicy", "ec2:DetachNetworkInterface"): "resource",
}

# Resource patterns with a wildcard that stay inside the stack's own resources.
RESOURCE_PATTERN_ALLOW: dict[str, str] = {
    "${FindingsTable.Arn}/index/*": "the GSIs of the stack's own lifecycle table (Query on OpenByClusterShard/ByActivityDayShard)",
    "arn:${AWS::Partition}:s3:::${FocusExportBucket}/${FocusExportPrefix}*":
        "the daily FOCUS export's objects: keys cluster=<c>/day=<d>/focus.csv under the export prefix only (PutObject)",
}


def _resource_text(resource: Any) -> str:
    """The literal text of a resource (a string, or the template of an Fn::Sub); "" for other intrinsics."""
    if isinstance(resource, str):
        return resource
    if isinstance(resource, dict) and "Fn::Sub" in resource:
        sub = resource["Fn::Sub"]
        return sub if isinstance(sub, str) else str(sub[0])
    return ""


def _branches(value: Any) -> Iterator[Any]:
    """Every concrete value an `Fn::If` tree can take (both branches), skipping AWS::NoValue."""
    if isinstance(value, dict) and set(value) == {"Fn::If"}:
        _cond, yes, no = value["Fn::If"]
        yield from _branches(yes)
        yield from _branches(no)
    elif isinstance(value, dict) and value == {"Ref": "AWS::NoValue"}:
        return
    else:
        yield value


def _flat(value: Any) -> Iterator[Any]:
    """Every concrete resource of a Resource value: lists flattened, both branches of each Fn::If."""
    for branch in _branches(value):
        if isinstance(branch, list):
            for item in branch:
                yield from _flat(item)
        else:
            yield branch


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements(template: dict[str, Any]) -> Iterator[tuple[str, str, tuple[str, ...], list[Any]]]:
    """(resource id, policy source, actions, resources) for every IAM grant of every function and role."""
    for rid, res in template["Resources"].items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::Serverless::Function":
            for policy in _as_list(props.get("Policies", [])):
                for concrete in _branches(policy):
                    yield from _policy(rid, concrete)
        elif res["Type"] in ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            docs = [p.get("PolicyDocument", {}) for p in props.get("Policies", [])] + [props.get("PolicyDocument", {})]
            for doc in docs:
                for st in _as_list(doc.get("Statement", [])):
                    yield rid, "inline", tuple(_as_list(st.get("Action", []))), _as_list(st.get("Resource", []))
            for arn in props.get("ManagedPolicyArns", []):
                yield rid, f"managed:{arn}", ("<managed>",), ["<managed>"]


def _policy(rid: str, policy: Any) -> Iterator[tuple[str, str, tuple[str, ...], list[Any]]]:
    if isinstance(policy, str):  # a managed policy name or ARN: not allowed without review
        yield rid, f"managed:{policy}", ("<managed>",), ["<managed>"]
        return
    if not isinstance(policy, dict):
        yield rid, f"unknown:{policy!r}", ("<unknown>",), ["<unknown>"]
        return
    if "Statement" in policy:
        for st in _as_list(policy["Statement"]):
            for concrete in _branches(st):
                if concrete.get("Effect", "Allow") != "Allow":
                    continue
                resources = list(_flat(concrete.get("Resource", [])))
                yield rid, "inline", tuple(_as_list(concrete.get("Action", []))), resources
        return
    for name, params in policy.items():
        expansion = SAM_POLICY_TEMPLATES.get(name)
        if expansion is None:
            yield rid, f"unknown:{name}", ("<unknown policy template>",), ["<unknown>"]
            continue
        for actions, resource in expansion:
            if resource.startswith("<"):
                value = (params or {}).get(resource.strip("<>"))
                yield rid, name, actions, [value if value not in (None, "", "*") else "*"]
            else:
                yield rid, name, actions, [resource]


def violations(template: dict[str, Any]) -> list[str]:
    """Every grant that breaks least privilege (empty when the template is fine)."""
    found: list[str] = []
    for rid, source, actions, resources in statements(template):
        if source.startswith(("managed:", "unknown:")):
            found.append(f"{rid}: {source} is not reviewed (add it to SAM_POLICY_TEMPLATES with its expansion)")
            continue
        for action in actions:
            wild_action = "*" in str(action)
            wild_resource = any("*" in _resource_text(r) and _resource_text(r) not in RESOURCE_PATTERN_ALLOW
                                for r in resources)
            allowed = WILDCARD_ALLOW.get((source, action))
            if wild_action and allowed != "action":
                found.append(f"{rid}: wildcard action {action} ({source})")
            if wild_resource and allowed != "resource":
                found.append(f"{rid}: {action} on a wildcard resource {resources} ({source})")
    return found


def test_least_privilege_template_has_no_wildcard_outside_the_allow_list(figures: Figures) -> None:
    # GIVEN template.yaml, intrinsics in long form
    template = load_template()
    grants = list(statements(template))
    # WHEN every grant of every function (both branches of each !If) is checked
    found = violations(template)
    figures.notes["least privilege: IAM grants checked"] = str(len(grants))
    # THEN none uses a wildcard action or resource outside the commented allow-list
    assert grants, "the template grants something"
    assert found == []


@pytest.mark.parametrize("bad", [
    {"Statement": [{"Effect": "Allow", "Action": "dynamodb:*", "Resource": {"Fn::GetAtt": ["FindingsTable", "Arn"]}}]},
    {"Statement": [{"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": "*"}]},
    {"Statement": [{"Effect": "Allow", "Action": ["sqs:SendMessage"],
                    "Resource": [{"Fn::GetAtt": ["AlertsQueue", "Arn"]}, {"Fn::If": ["C", ["*"], {"Ref": "AWS::NoValue"}]}]}]},
    {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]},
    {"Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::*/*"}]},
    {"Statement": [{"Effect": "Allow", "Action": ["dynamodb:Query"], "Resource": {"Fn::Sub": "arn:aws:dynamodb:*:*:table/*"}}]},
    "AmazonDynamoDBFullAccess",
    {"S3CrudPolicy": {"BucketName": "x"}},
    {"SQSSendMessagePolicy": {"QueueName": "*"}},
    {"Fn::If": ["UseVpc", {"Statement": [{"Effect": "Allow", "Action": "iam:*", "Resource": "*"}]}, {"Ref": "AWS::NoValue"}]},
])
def test_least_privilege_checker_catches_a_wildcard_grant(bad: Any) -> None:
    # GIVEN the real template with one over-broad grant added to one function
    template = copy.deepcopy(load_template())
    function = next(r for r in template["Resources"].values() if r["Type"] == "AWS::Serverless::Function")
    function["Properties"].setdefault("Policies", []).append(bad)
    # WHEN checked / THEN the grant is reported
    assert violations(template)


def test_least_privilege_secrets_are_scoped_to_their_own_arns() -> None:
    # GIVEN the template
    template = load_template()
    # WHEN the secret reads are listed
    reads = [(rid, res) for rid, source, actions, res in statements(template) if "secretsmanager:GetSecretValue" in actions]
    # THEN each names one secret parameter, never a pattern, and only delivery/scan functions read secrets
    assert reads
    assert all(r == [{"Ref": name}] for _, r in reads for name in [r[0].get("Ref")] if isinstance(r[0], dict))
    assert all(isinstance(r[0], dict) and r[0].get("Ref", "").endswith("SecretArn") for _, r in reads)
    readers = {rid for rid, _ in reads}
    assert "DispatchScansFunction" not in readers and "PriceFindingsFunction" not in readers


def test_least_privilege_secrets_are_never_plain_parameters() -> None:
    # GIVEN the template's parameters
    params = load_template().get("Parameters", {})
    # WHEN their names are read
    suspicious = [n for n in params if any(w in n.lower() for w in ("token", "password", "signing"))
                  and not n.endswith("SecretArn")]
    # THEN secrets come in only as Secrets Manager ARNs
    assert suspicious == []


# -- Kubernetes RBAC --------------------------------------------------------------------------------------
READ_VERBS = {"get", "list", "watch"}


def rbac_documents(folder: Path = DEPLOY) -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) for every YAML document in deploy/."""
    docs = []
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                docs.append((path.name, doc))
    return docs


#: The opt-in acting role (deploy/rbac-reclaim.yaml) and the only grants it may hold: (API group, resource) → verbs,
#: the calls of sinks/kube_actuator.py. It may be bound only namespace by namespace (RoleBinding).
ACTING_ROLE = "gpuwaste-reclaim"
ACTING_GRANTS: dict[tuple[str, str], set[str]] = {
    ("apps", "deployments/scale"): {"get", "patch"}, ("apps", "statefulsets/scale"): {"get", "patch"},
    ("batch", "jobs"): {"get", "patch"}, ("batch", "cronjobs"): {"get", "patch"},
    ("", "pods"): {"get", "delete"}, ("kubeflow.org", "notebooks"): {"get", "patch"},
}


def acting_violations(name: str, doc: dict[str, Any]) -> list[str]:
    """What the acting role grants beyond `ACTING_GRANTS` (no wildcard, no other resource, no other verb)."""
    found = []
    for rule in doc.get("rules") or []:
        where = f"{name}: {doc['kind']} {ACTING_ROLE}"
        if rule.get("nonResourceURLs"):
            found.append(f"{where}: nonResourceURLs {rule['nonResourceURLs']}")
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                extra = set(rule.get("verbs") or []) - ACTING_GRANTS.get((group, resource), set())
                if extra:
                    found.append(f"{where}: {sorted(extra)} on {group or 'core'}/{resource} beyond the reclaim calls")
    if doc.get("aggregationRule"):
        found.append(f"{name}: {ACTING_ROLE} aggregates other roles")
    return found


def rbac_violations(docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Every RBAC rule or binding that grants more than reading the scan's resources (or, for the opt-in acting
    role, more than the reclaim calls, or anywhere but namespace by namespace)."""
    found: list[str] = []
    roles = {d["metadata"]["name"] for _, d in docs if d.get("kind") in ("Role", "ClusterRole")}
    for name, doc in docs:
        kind = doc.get("kind")
        if kind in ("Role", "ClusterRole") and doc["metadata"]["name"] == ACTING_ROLE:
            found += acting_violations(name, doc)
        elif kind in ("Role", "ClusterRole"):
            if doc.get("aggregationRule"):
                found.append(f"{name}: {kind} {doc['metadata']['name']} aggregates other roles")
            for rule in doc.get("rules") or []:
                verbs = set(rule.get("verbs") or [])
                resources = set(rule.get("resources") or [])
                groups = set(rule.get("apiGroups") or [])
                where = f"{name}: {kind} {doc['metadata']['name']}"
                if verbs - READ_VERBS:
                    found.append(f"{where}: verbs {sorted(verbs - READ_VERBS)} beyond get/list/watch")
                if "*" in verbs | resources | groups:
                    found.append(f"{where}: wildcard in {rule}")
                if "secrets" in resources or "configmaps" in resources:
                    found.append(f"{where}: reads {sorted(resources & {'secrets', 'configmaps'})}")
                if any("/" in r for r in resources):
                    found.append(f"{where}: subresources {sorted(r for r in resources if '/' in r)}")
                if rule.get("nonResourceURLs"):
                    found.append(f"{where}: nonResourceURLs {rule['nonResourceURLs']}")
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = doc.get("roleRef", {}).get("name")
            if ref == ACTING_ROLE and kind == "ClusterRoleBinding":
                found.append(f"{name}: {ACTING_ROLE} bound cluster-wide; bind it per opted-in namespace (RoleBinding)")
            if ref not in roles:
                found.append(f"{name}: {kind} {doc['metadata']['name']} binds {ref!r}, a role not defined in deploy/")
    return found


def test_least_privilege_rbac_reads_only_and_never_secrets(figures: Figures) -> None:
    # GIVEN every YAML document in deploy/
    docs = rbac_documents()
    rules = [r for _, d in docs if d.get("kind") in ("Role", "ClusterRole") for r in d.get("rules") or []]
    figures.notes["least privilege: RBAC rules checked"] = str(len(rules))
    # WHEN the roles and bindings are checked
    # THEN only get/list/watch on the scan's resources, no Secrets, no subresources, no foreign roles
    assert rules, "deploy/ defines the scan's role"
    assert rbac_violations(docs) == []


@pytest.mark.parametrize("rule", [
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["list"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch", "list"]},
])
def test_least_privilege_rbac_checker_catches_an_extra_grant(rule: dict[str, Any]) -> None:
    # GIVEN deploy/'s documents with one more rule in the scan's ClusterRole
    docs = copy.deepcopy(rbac_documents())
    role = next(d for _, d in docs if d.get("kind") == "ClusterRole" and d["metadata"]["name"] != ACTING_ROLE)
    role["rules"].append(rule)
    # WHEN checked / THEN it is reported
    assert rbac_violations(docs)


def test_least_privilege_acting_role_is_separate_opt_in_and_only_the_reclaim_calls() -> None:
    # GIVEN deploy/'s documents
    docs = rbac_documents()
    acting = [(n, d) for n, d in docs if d.get("kind") in ("Role", "ClusterRole") and d["metadata"]["name"] == ACTING_ROLE]
    readers = [d for _, d in docs if d.get("kind") in ("Role", "ClusterRole") and d["metadata"]["name"] != ACTING_ROLE]
    # THEN the acting role lives in its own file, grants exactly the reclaim calls, and is bound per namespace only
    assert [n for n, _ in acting] == ["rbac-reclaim.yaml"]
    granted = {(g, r): set(rule["verbs"]) for _, d in acting for rule in d["rules"] for g in rule["apiGroups"]
               for r in rule["resources"]}
    assert granted == ACTING_GRANTS
    bindings = [d for _, d in docs if d.get("roleRef", {}).get("name") == ACTING_ROLE]
    assert bindings and {d["kind"] for d in bindings} == {"RoleBinding"}
    # AND the reader is still read-only (no write verb anywhere outside the acting role)
    assert readers and all(set(r["verbs"]) <= READ_VERBS for d in readers for r in d["rules"])


@pytest.mark.parametrize(("rule", "binding"), [
    ({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]}, None),  # the workload, not /scale
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}, None),
    ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["delete"]}, None),
    ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, None),
    ({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["update"]}, None),
    (None, "ClusterRoleBinding"),
])
def test_least_privilege_acting_role_checker_catches_an_extra_grant(rule: dict[str, Any] | None, binding: str | None) -> None:
    docs = copy.deepcopy(rbac_documents())
    if rule is not None:
        next(d for _, d in docs if d.get("kind") == "ClusterRole" and d["metadata"]["name"] == ACTING_ROLE)["rules"].append(rule)
    if binding is not None:
        docs.append(("extra.yaml", {"kind": binding, "metadata": {"name": "x"},
                                    "roleRef": {"kind": "ClusterRole", "name": ACTING_ROLE}}))
    assert rbac_violations(docs)


def test_least_privilege_rbac_binding_to_cluster_admin_is_caught() -> None:
    # GIVEN a binding to a role outside deploy/ (cluster-admin)
    docs = [*rbac_documents(), ("extra.yaml", {"kind": "ClusterRoleBinding", "metadata": {"name": "x"},
                                               "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}})]
    # WHEN checked / THEN it is reported
    assert any("cluster-admin" in v for v in rbac_violations(docs))


def test_least_privilege_slack_manifest_requests_only_the_scopes_used() -> None:
    # GIVEN the Slack app manifest of deploy/ (issue 5)
    manifests = [p for p in DEPLOY.glob("*slack*") if p.suffix in (".yaml", ".yml", ".json")]
    if not manifests:
        pytest.skip("no Slack app manifest in deploy/ yet")
    allowed = {"chat:write", "chat:write.public", "users:read", "users:read.email", "files:write", "channels:read",
               "channels:history", "groups:history"}  # history: SlackNotifier.find_posted (conversations.history)
    for path in manifests:
        doc = yaml.safe_load(path.read_text())
        scopes = set(((doc.get("oauth_config") or {}).get("scopes") or {}).get("bot") or [])
        # WHEN its bot scopes are read / THEN nothing beyond what the sinks call; no user scopes
        assert scopes and scopes <= allowed, f"{path.name}: {sorted(scopes - allowed)}"
        assert not ((doc.get("oauth_config") or {}).get("scopes") or {}).get("user")
