"""Test stack: a real Prometheus that holds the demo fleet's DCGM telemetry *and* scrapes `gpuwaste serve`.

1. the demo fleet is generated ending a little after now (so the live scans read fresh samples) and backfilled
   into Prometheus (:class:`~tests.servers.prometheus.PrometheusServer`);
2. the fleet's cluster objects are served by the fake kube-apiserver;
3. `gpuwaste serve` runs as a subprocess (the real command) against both, delivering to the fake Slack;
4. Prometheus gets a scrape job for it (config rewritten, then SIGHUP: Prometheus reloads on SIGHUP) and the
   alert rules of ``deploy/prometheus-alerts.yaml`` are loaded next to it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.servers.ports import free_port
from tests.servers.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus-alerts.yaml"
SCRAPE_INTERVAL_S = 1


def demo_eval_time(now: datetime | None = None) -> datetime:
    """The demo fleet's end: now, down to the 30-s sample grid (serve's scans, seconds later, read fresh samples).

    Never in the future: Prometheus refuses scraped samples older than the newest backfilled block's end, so a
    fleet ending after now would keep serve's metrics out until then.
    """
    now = now or datetime.now(tz=UTC)
    return now.replace(second=0 if now.second < 30 else 30, microsecond=0)


def kube_objects(cluster_json: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Pods, nodes and the other objects (by resource plural) of a `kubectl get -o json` List."""
    items = json.loads(cluster_json.read_text())["items"]
    plural = {"ReplicaSet": "replicasets", "Deployment": "deployments", "Namespace": "namespaces", "Job": "jobs",
              "CronJob": "cronjobs", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets"}
    pods = [i for i in items if i["kind"] == "Pod"]
    nodes = [i for i in items if i["kind"] == "Node"]
    others: dict[str, list[dict[str, Any]]] = {}
    for i in items:
        if i["kind"] in plural:
            others.setdefault(plural[i["kind"]], []).append(i)
    return pods, nodes, others


class ScrapingPrometheus(PrometheusServer):
    """A backfilled Prometheus that also scrapes targets and evaluates rule files (set after start, via SIGHUP)."""

    def configure(self, *, targets: list[str], rule_files: list[Path] = (), evaluation_interval_s: int = 1) -> None:
        rules = "".join(f"  - {p}\n" for p in rule_files)
        config = (
            f"global:\n  scrape_interval: {SCRAPE_INTERVAL_S}s\n  evaluation_interval: {evaluation_interval_s}s\n"
            + (f"rule_files:\n{rules}" if rule_files else "")
            + "scrape_configs:\n  - job_name: gpuwaste\n    static_configs:\n"
            + f"      - targets: {json.dumps(targets)}\n"
        )
        (self.workdir / "prom.yml").write_text(config)
        assert self._process is not None
        self._process.send_signal(signal.SIGHUP)

    def query(self, expr: str, at: datetime | float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (at `at`, default now)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = str(at.timestamp() if isinstance(at, datetime) else at)
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]["result"]  # type: ignore[no-any-return]

    def query_range(self, expr: str, start: datetime, end: datetime, step_s: int) -> list[dict[str, Any]]:
        params = {"query": expr, "start": str(start.timestamp()), "end": str(end.timestamp()), "step": str(step_s)}
        url = f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]["result"]  # type: ignore[no-any-return]

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def wait_for(self, expr: str, *, timeout_s: float = 60.0, what: str = "") -> list[dict[str, Any]]:
        """Poll until the query returns something; fail with the serve log when it never does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"{what or expr}: nothing after {timeout_s:.0f} s")


@dataclass
class ServeProcess:
    """`gpuwaste serve` as a subprocess on a free loopback port."""

    argv: list[str]
    env: dict[str, str]
    workdir: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServeProcess:
        self.port = free_port()
        self.stdout = (self.workdir / "serve.out").open("wb")
        self.stderr = (self.workdir / "serve.err").open("wb")
        self.process = subprocess.Popen([*self.argv, "--host", "127.0.0.1", "--port", str(self.port)],
                                        stdout=self.stdout, stderr=self.stderr, env=self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gpuwaste serve exited rc={self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"gpuwaste serve not listening after 60 s:\n{self.log()}")

    def log(self) -> str:
        for f in (self.stdout, self.stderr):
            f.flush()
        return ((self.workdir / "serve.err").read_text(errors="replace")[-4000:]
                + (self.workdir / "serve.out").read_text(errors="replace")[-4000:])

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.stdout.close()
        self.stderr.close()
        return self.process.returncode


def gpuwaste_argv() -> list[str]:
    """The installed `gpuwaste` console script of this interpreter, else `python -c` on the entry point."""
    script = Path(sys.executable).parent / "gpuwaste"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from gpuwaste.cli import run; run()"]


__all__ = ["ALERTS", "ScrapingPrometheus", "ServeProcess", "demo_eval_time", "gpuwaste_argv", "kube_objects"]
