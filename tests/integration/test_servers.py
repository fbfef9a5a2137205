"""Integration tests: each local test server speaks the wire format its real client library expects."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import boto3
import kubernetes
import pytest
import requests
from prometheus_api_client import PrometheusConnect
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import builtin_handlers
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from tests.servers.jira_api import SEARCH_GONE_MESSAGE, adf_text
from tests.servers.kube_api import EXPIRED_CONTINUE_MESSAGE, write_kubeconfig

if TYPE_CHECKING:
    from pathlib import Path

    from tests.servers.jira_api import FakeJira
    from tests.servers.kube_api import FakeKubeApi, KubeApiFactory
    from tests.servers.moto_server import MotoServer
    from tests.servers.prometheus import PrometheusFactory
    from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

TOKEN = "kube-test-token"
BASE_TS = 1704067200  # 2024-01-01T00:00:00Z, a multiple of the 2 h block range


def _pod(name: str, namespace: str, app: str, phase: str = "Running", node: str = "gpu-node-1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}, "uid": f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ],
        },
        "status": {"phase": phase},
    }


FIVE_PODS = [
    _pod("train-a", "ml", "train"),
    _pod("train-b", "ml", "train", phase="Pending", node=""),
    _pod("serve-a", "ml", "serve"),
    _pod("train-c", "research", "train"),
    _pod("notebook", "research", "jupyter"),
]
NODES = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1"}, "spec": {}}]


def _core_api(server: FakeKubeApi, token: str | None = TOKEN) -> kubernetes.client.CoreV1Api:
    config = kubernetes.client.Configuration(host=server.url)
    if token is not None:
        config.api_key = {"authorization": token}
        config.api_key_prefix = {"authorization": "Bearer"}
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))


def _meta(obj: Any) -> kubernetes.client.V1ObjectMeta:
    assert obj.metadata is not None
    meta: kubernetes.client.V1ObjectMeta = obj.metadata
    return meta


def _list_meta(obj: Any) -> kubernetes.client.V1ListMeta:
    assert obj.metadata is not None
    meta: kubernetes.client.V1ListMeta = obj.metadata
    return meta


def _status(exc: kubernetes.client.ApiException) -> dict[str, Any]:
    """The Kubernetes ``Status`` object an ApiException carries."""
    body: dict[str, Any] = json.loads(exc.body or "{}")
    return body


# -- fake kube-apiserver ---------------------------------------------------------------------------------
def test_fake_kube_api_filters_pods_by_label_and_field_selectors(kube_api: KubeApiFactory) -> None:
    # GIVEN five pods, three labelled app=train, one of those Pending
    server = kube_api(FIVE_PODS, NODES, token=TOKEN)
    api = _core_api(server)

    # WHEN the official client lists with a set-based label selector and a phase field selector
    running_train = api.list_pod_for_all_namespaces(
        label_selector="app in (train)", field_selector="status.phase=Running"
    )
    not_train = api.list_namespaced_pod("research", label_selector="app!=train,app")

    # THEN only the matching pods come back, typed, in (namespace, name) order
    assert [(_meta(p).namespace, _meta(p).name) for p in running_train.items] == [
        ("ml", "train-a"),
        ("research", "train-c"),
    ]
    spec = running_train.items[0].spec
    assert spec is not None and spec.containers[0].resources is not None
    assert spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    assert [_meta(p).name for p in not_train.items] == ["notebook"]
    query = server.requests[0].query
    assert query["labelSelector"] == "app in (train)"
    assert query["fieldSelector"] == "status.phase=Running"


def test_fake_kube_api_paginates_with_opaque_continue_tokens(kube_api: KubeApiFactory) -> None:
    # GIVEN five pods
    api = _core_api(kube_api(FIVE_PODS, NODES, token=TOKEN))

    # WHEN the client pages through them two at a time
    pages: list[kubernetes.client.V1PodList] = []
    token: str | None = None
    while True:
        page = api.list_pod_for_all_namespaces(limit=2, _continue=token)
        pages.append(page)
        token = _list_meta(page).var_continue
        if not token:
            break

    # THEN there are 3 pages of 2, 2 and 1 pods, and the tokens are not plain offsets
    assert [len(p.items) for p in pages] == [2, 2, 1]
    assert [_list_meta(p).remaining_item_count for p in pages] == [3, 1, None]
    assert len({_meta(pod).name for p in pages for pod in p.items}) == 5
    issued = [str(_list_meta(p).var_continue) for p in pages[:2]]
    assert all(not t.isdigit() for t in issued)


def test_fake_kube_api_expired_continue_token_raises_410(kube_api: KubeApiFactory) -> None:
    # GIVEN a first page and its continue token, then an etcd compaction
    server = kube_api(FIVE_PODS, NODES, token=TOKEN)
    api = _core_api(server)
    first = api.list_pod_for_all_namespaces(limit=2)
    server.expire_continue_tokens()

    # WHEN the client asks for the next page with the old token
    with pytest.raises(kubernetes.client.ApiException) as caught:
        api.list_pod_for_all_namespaces(limit=2, _continue=_list_meta(first).var_continue)

    # THEN it gets 410 Expired, and a fresh list (no token) still works
    assert caught.value.status == 410
    assert _status(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": EXPIRED_CONTINUE_MESSAGE,
        "reason": "Expired",
        "code": 410,
    }
    assert len(api.list_pod_for_all_namespaces(limit=2).items) == 2


def test_fake_kube_api_rejects_missing_token_with_401(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a server that requires a bearer token, and a kubeconfig carrying it
    server = kube_api(FIVE_PODS, NODES, token=TOKEN)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, TOKEN)

    # WHEN one client has no token and another loads the kubeconfig
    with pytest.raises(kubernetes.client.ApiException) as caught:
        _core_api(server, token=None).list_node()
    loaded = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    nodes = kubernetes.client.CoreV1Api(loaded).list_node()

    # THEN the first gets 401 and the second is authorised with "Bearer <token>"
    assert caught.value.status == 401
    assert _status(caught.value)["reason"] == "Unauthorized"
    assert [_meta(n).name for n in nodes.items] == ["gpu-node-1"]
    assert server.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"


def test_fake_kube_api_rejects_unsupported_field_selector_with_400(kube_api: KubeApiFactory) -> None:
    # GIVEN a running fake
    api = _core_api(kube_api(FIVE_PODS, NODES, token=TOKEN))

    # WHEN the client filters on a field a real apiserver does not index
    with pytest.raises(kubernetes.client.ApiException) as caught:
        api.list_pod_for_all_namespaces(field_selector="spec.priorityClassName=high")

    # THEN it is refused like a real cluster refuses it
    assert caught.value.status == 400
    assert _status(caught.value)["message"] == "field label not supported: spec.priorityClassName"


def test_fake_kube_api_serves_workloads_and_404s_missing_objects(kube_api: KubeApiFactory) -> None:
    # GIVEN a Job and a Deployment besides the pods
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "main", "image": "x:1"}]}}
    job = {
        "metadata": {"name": "train-job", "namespace": "ml"},
        "spec": {"template": template},
        "status": {"succeeded": 1},
    }
    deployment = {
        "metadata": {"name": "serve", "namespace": "ml"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": template},
    }
    server = kube_api(FIVE_PODS, NODES, {"jobs": [job], "deployments": [deployment]}, token=TOKEN)
    client = _core_api(server).api_client

    # WHEN the batch and apps APIs are read by name and a missing deployment is asked for
    found_job = kubernetes.client.BatchV1Api(client).read_namespaced_job("train-job", "ml")
    deployments = kubernetes.client.AppsV1Api(client).list_namespaced_deployment("ml")
    with pytest.raises(kubernetes.client.ApiException) as caught:
        kubernetes.client.AppsV1Api(client).read_namespaced_deployment("gone", "ml")

    # THEN the objects come back typed and the missing one is a NotFound Status
    assert found_job.status is not None and found_job.status.succeeded == 1
    assert [_meta(d).name for d in deployments.items] == ["serve"]
    assert caught.value.status == 404
    assert _status(caught.value)["message"] == 'deployments.apps "gone" not found'


def test_fake_kube_api_injected_failure_then_recovers(kube_api: KubeApiFactory) -> None:
    # GIVEN a fake told to fail the next request with 503
    server = kube_api(FIVE_PODS, NODES, token=TOKEN)
    server.fail_next(503)
    api = _core_api(server)

    # WHEN the client lists twice
    with pytest.raises(kubernetes.client.ApiException) as caught:
        api.list_node()
    second = api.list_node()

    # THEN the first call fails with a ServiceUnavailable Status and the second succeeds
    assert caught.value.status == 503
    assert _status(caught.value)["reason"] == "ServiceUnavailable"
    assert len(second.items) == 1


# -- fake Slack ------------------------------------------------------------------------------------------
def test_fake_slack_post_message_returns_channel_and_increasing_ts(slack_api: FakeSlack) -> None:
    # GIVEN a client with the right bot token
    client = WebClient(token=slack_api.token, base_url=slack_api.url)
    blocks = [{"type": "header", "text": {"type": "plain_text", "text": "Idle GPUs"}}]

    # WHEN it posts twice to a channel by name
    first = client.chat_postMessage(channel="#gpu-waste", text="3 idle GPUs", blocks=blocks)
    second = client.chat_postMessage(channel="gpu-waste", text="again")

    # THEN both land in the same channel id with increasing ts, and the calls are recorded
    assert first["channel"] == second["channel"] == slack_api.channel_id("gpu-waste")
    assert (first["ts"], second["ts"]) == ("1700000000.000100", "1700000000.000200")
    assert slack_api.calls[0] == (
        "chat.postMessage",
        {"channel": "#gpu-waste", "text": "3 idle GPUs", "blocks": blocks},
    )


def test_fake_slack_wrong_token_raises_invalid_auth(slack_api: FakeSlack) -> None:
    # GIVEN a client with a wrong token
    client = WebClient(token="xoxb-wrong", base_url=slack_api.url)

    # WHEN it posts
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel="#gpu-waste", text="hi")

    # THEN Slack's HTTP 200 ok=false invalid_auth surfaces as SlackApiError
    assert caught.value.response.status_code == 200
    assert caught.value.response["error"] == "invalid_auth"


def test_fake_slack_rate_limit_is_retried_by_handler(slack_api: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN one 429 queued and a client with the rate-limit retry handler (its sleep recorded, not slept)
    slack_api.fail_next("chat.postMessage", status=429, retry_after=0)
    sleeps: list[float] = []
    monkeypatch.setattr(builtin_handlers, "time", SimpleNamespace(sleep=sleeps.append))
    client = WebClient(token=slack_api.token, base_url=slack_api.url)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=1))

    # WHEN it posts a message
    response = client.chat_postMessage(channel="#gpu-waste", text="hi")

    # THEN it succeeds on the second HTTP call after one back-off
    assert response["ok"] is True
    assert [method for method, _ in slack_api.calls] == ["chat.postMessage", "chat.postMessage"]
    assert len(sleeps) == 1


def test_fake_slack_enforces_block_and_channel_limits(slack_api: FakeSlack) -> None:
    # GIVEN a client and a channel Slack does not know
    client = WebClient(token=slack_api.token, base_url=slack_api.url)
    slack_api.missing_channels.add("no-such-channel")
    too_many = [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}] * 51
    too_long = [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}]

    # WHEN it posts 51 blocks, a 3001-character section and to the missing channel
    errors = []
    for kwargs in (
        {"channel": "#ok", "text": "many", "blocks": too_many},
        {"channel": "#ok", "text": "long", "blocks": too_long},
        {"channel": "#no-such-channel", "text": "hi"},
    ):
        with pytest.raises(SlackApiError) as caught:
            client.chat_postMessage(**kwargs)
        errors.append(caught.value.response["error"])

    # THEN Slack's errors come back
    assert errors == ["invalid_blocks", "invalid_blocks", "channel_not_found"]


def test_fake_slack_supports_files_upload_v2(slack_api: FakeSlack) -> None:
    # GIVEN a client
    client = WebClient(token=slack_api.token, base_url=slack_api.url)

    # WHEN it uploads a CSV with files_upload_v2
    response = client.files_upload_v2(
        channel="C0123456789", content="pod,gpu\na,0\n", filename="idle.csv", title="Idle"
    )

    # THEN the three-step flow completes and the fake holds the content
    assert response["file"]["title"] == "Idle"
    assert [m for m, _ in slack_api.calls] == ["files.getUploadURLExternal", "files.completeUploadExternal"]
    (uploaded,) = slack_api.files.values()
    assert (uploaded.content, uploaded.channel_id, uploaded.completed) == (b"pod,gpu\na,0\n", "C0123456789", True)


# -- fake Jira -------------------------------------------------------------------------------------------
def test_fake_jira_creates_issue_and_finds_it_with_search_jql(jira_api: FakeJira) -> None:
    # GIVEN an authenticated session and a labelled issue with an ADF description
    session = requests.Session()
    session.auth = jira_api.auth
    fields: dict[str, Any] = {
        "project": {"key": "OPS"},
        "issuetype": {"name": "Task"},
        "summary": "Idle GPU in ml/train-a",
        "description": adf_text("GPU idle for 6 h"),
        "labels": ["gpuwaste", "gpuwaste-dedup-abc123"],
    }

    # WHEN it creates the issue and searches for open issues with the dedup label
    created = session.post(f"{jira_api.url}/rest/api/3/issue", json={"fields": fields}, timeout=5)
    jql = 'project = OPS AND labels = "gpuwaste-dedup-abc123" AND statusCategory != Done'
    found = session.post(
        f"{jira_api.url}/rest/api/3/search/jql", json={"jql": jql, "fields": ["summary"], "maxResults": 1}, timeout=5
    )
    jira_api.issues["OPS-1"].status = "Done"
    after_done = session.post(f"{jira_api.url}/rest/api/3/search/jql", json={"jql": jql}, timeout=5)

    # THEN it gets OPS-1, finds it while open, and no longer once Done
    assert created.status_code == 201
    assert created.json()["key"] == "OPS-1"
    assert found.json()["issues"][0]["key"] == "OPS-1"
    assert found.json()["issues"][0]["fields"] == {"summary": "Idle GPU in ml/train-a"}
    assert found.json()["isLast"] is True
    assert after_done.json() == {"issues": [], "isLast": True}


def test_fake_jira_retired_search_returns_410(jira_api: FakeJira) -> None:
    # GIVEN an authenticated client
    # WHEN it calls the search endpoint Jira Cloud removed
    response = requests.get(
        f"{jira_api.url}/rest/api/3/search", params={"jql": "project = OPS"}, auth=jira_api.auth, timeout=5
    )

    # THEN it gets 410 Gone pointing at /search/jql
    assert response.status_code == 410
    assert response.json()["errorMessages"] == [SEARCH_GONE_MESSAGE]


def test_fake_jira_rejects_string_description_and_bad_auth(jira_api: FakeJira) -> None:
    # GIVEN an issue whose description is a plain string (v2 style)
    fields: dict[str, Any] = {
        "project": {"key": "OPS"},
        "issuetype": {"name": "Task"},
        "summary": "s",
        "description": "plain",
    }

    # WHEN it is created with good and with bad credentials
    rejected = requests.post(f"{jira_api.url}/rest/api/3/issue", json={"fields": fields}, auth=jira_api.auth, timeout=5)
    unauthenticated = requests.post(
        f"{jira_api.url}/rest/api/3/issue", json={"fields": fields}, auth=("x", "y"), timeout=5
    )

    # THEN v3 refuses the non-ADF description with 400 and the bad credentials with 401
    assert rejected.status_code == 400
    assert set(rejected.json()["errors"]) == {"description"}
    assert unauthenticated.status_code == 401
    assert jira_api.issues == {}


# -- moto ------------------------------------------------------------------------------------------------
def test_moto_aws_fixture_points_boto3_at_a_clean_server(aws: MotoServer) -> None:
    # GIVEN the aws fixture's environment
    # WHEN boto3 creates and lists a queue without any endpoint argument
    sqs = boto3.client("sqs")
    sqs.create_queue(QueueName="findings")
    urls = sqs.list_queues()["QueueUrls"]

    # THEN the queue lives on the local moto server
    assert urls == [f"{aws.endpoint}/123456789012/findings"]


# -- Prometheus ------------------------------------------------------------------------------------------
def test_prometheus_server_answers_queries_over_backfilled_samples(
    prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    # GIVEN 2 series x 30 samples at a 15 s step from BASE_TS, as OpenMetrics
    lines = ["# HELP x synthetic gauge.", "# TYPE x gauge"]
    for gpu in ("0", "1"):
        lines += [f'x{{gpu="{gpu}"}} {i % 7} {BASE_TS + 15 * i}' for i in range(30)]
    openmetrics = tmp_path / "tiny.om"
    openmetrics.write_text("\n".join([*lines, "# EOF"]) + "\n")

    # WHEN Prometheus is backfilled from it and queried at the last sample
    server = prometheus_factory(openmetrics)
    client = PrometheusConnect(url=server.url, disable_ssl=True)
    last = BASE_TS + 15 * 29
    count = client.custom_query("count(x)", params={"time": last})
    samples = client.custom_query_range(
        'x{gpu="1"}',
        start_time=datetime.fromtimestamp(BASE_TS, UTC),
        end_time=datetime.fromtimestamp(last, UTC),
        step="15",
    )

    # THEN both series are seen and every sample is there
    assert count[0]["value"][1] == "2"
    assert len(samples[0]["values"]) == 30
