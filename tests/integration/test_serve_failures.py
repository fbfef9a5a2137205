"""Integration: `gpuwaste serve` when a source fails — the scan is counted as failed against the source that failed,
the schedule goes on, /healthz stays up, and no secret reaches the output."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwaste.bootstrap import local
from gpuwaste.commands.serve import Server, with_env_secrets
from gpuwaste.config import GpuWasteConfig
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.settings import ClusterConfig, KubernetesSettings, PrometheusSettings
from gpuwaste.sinks.prometheus_metrics import render_text
from tests.servers.kube_api import write_kubeconfig
from tests.servers.metrics_stack import kube_objects
from tests.servers.ports import free_port

if TYPE_CHECKING:
    from tests.servers.kube_api import KubeApiFactory

pytestmark = pytest.mark.integration


def _errors(server: Server) -> dict[str, float]:
    text = render_text(server.snapshot()).decode()
    return {s.labels["source"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "gpuwaste_scan_errors_total"}


def _server(tmp_path: Path, prometheus_url: str, kubeconfig: Path) -> Server:
    cc = ClusterConfig(name="demo", prometheus=PrometheusSettings(url=prometheus_url, max_retries=0, timeout_s=2),
                       kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)))
    cfg = GpuWasteConfig(clusters=[cc])
    return Server(local.live_sources(cc, cfg), cfg, cluster="demo", window_s=3600, state=tmp_path / "state.db",
                  interval_s=1)


@pytest.fixture(scope="module")
def demo_objects(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    rec = write_recording(generate_fleet(FleetSpec(layout="demo")), tmp_path_factory.mktemp("demo"), compress=False)
    return kube_objects(rec / "cluster.json")


def test_prometheus_down_counts_a_prometheus_error(tmp_path: Path, kube_api: KubeApiFactory, demo_objects) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a reachable Kubernetes API and a Prometheus URL nothing listens on
    pods, nodes, others = demo_objects
    kube = kube_api(pods, nodes, others, token="t")
    server = _server(tmp_path, f"http://127.0.0.1:{free_port()}", write_kubeconfig(tmp_path / "kc", kube.url, "t"))
    # WHEN two scans run
    results = [server.scan_once(), server.scan_once()]
    # THEN both failed, blamed on Prometheus, and nothing else
    assert results == [False, False]
    assert _errors(server) == {"prometheus": 2, "kubernetes": 0, "store": 0, "delivery": 0, "config": 0, "other": 0}


def test_kubernetes_down_counts_a_kubernetes_error(tmp_path: Path) -> None:
    # GIVEN a kubeconfig pointing at a port nothing listens on
    server = _server(tmp_path, f"http://127.0.0.1:{free_port()}",
                     write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{free_port()}", "t"))
    # WHEN a scan runs
    assert server.scan_once() is False
    # THEN it is blamed on Kubernetes (read first), not on Prometheus
    errors = _errors(server)
    assert errors["kubernetes"] == 1 and errors["prometheus"] == 0


def test_schedule_goes_on_after_failures_and_healthz_stays_up(tmp_path: Path) -> None:
    # GIVEN serve with both sources down, scanning every second
    server = _server(tmp_path, f"http://127.0.0.1:{free_port()}",
                     write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{free_port()}", "t"))
    port = free_port()
    thread = threading.Thread(target=server.run, kwargs={"host": "127.0.0.1", "port": port, "max_scans": 3})
    thread.start()
    try:
        # WHEN /healthz and /metrics are fetched while it runs
        deadline = time.monotonic() + 30
        body: dict[str, object] = {}
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    body = json.loads(response.read())
                if body.get("errors", {}).get("kubernetes", 0) >= 2:  # type: ignore[union-attr]
                    break
            except OSError:
                pass
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            metrics = response.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=2)
    finally:
        thread.join(timeout=60)
    # THEN the schedule kept scanning (failures counted), health is ok (the loop is alive), /metrics serves the
    # counters, and other paths are 404
    assert body["status"] == "ok" and body["last_success"] is None
    assert 'gpuwaste_scans_total{cluster="demo",outcome="failure"}' in metrics
    assert missing.value.code == 404
    assert not thread.is_alive()


def test_secrets_come_from_the_environment_and_never_from_the_config() -> None:
    # GIVEN a config without tokens and the Secret's environment variables
    cfg = GpuWasteConfig(clusters=[ClusterConfig(name="c", prometheus=PrometheusSettings(url="http://p:9090"))])
    env = {"GPUWASTE_SLACK_BOT_TOKEN": "xoxb-secret", "GPUWASTE_JIRA_API_TOKEN": "jira-secret",
           "GPUWASTE_PROMETHEUS_BEARER_TOKEN": "prom-secret", "GPUWASTE_SLACK_SIGNING_SECRET": ""}
    # WHEN they are applied
    out = with_env_secrets(cfg, env)
    # THEN each lands in its SecretStr field (bearer auth switched on), the original config is untouched, an empty
    # variable is ignored, and no secret shows in the config's text form
    assert out.delivery.slack.bot_token is not None and out.delivery.slack.bot_token.get_secret_value() == "xoxb-secret"
    assert out.delivery.jira.api_token is not None and out.delivery.jira.api_token.get_secret_value() == "jira-secret"
    auth = out.clusters[0].prometheus.auth  # type: ignore[union-attr]
    assert auth.kind == "bearer" and auth.bearer_token is not None and auth.bearer_token.get_secret_value() == "prom-secret"
    assert out.delivery.slack.signing_secret is None and cfg.delivery.slack.bot_token is None
    assert not any(s in out.model_dump_json() + repr(out) for s in ("xoxb-secret", "jira-secret", "prom-secret"))
