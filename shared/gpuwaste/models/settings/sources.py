"""Settings of the sources: dcgm-exporter label names, the cluster read, Prometheus, Kubernetes, the clusters, the scan
window.

Pure pydantic models (no SDK, no detector), imported by the source adapters; the composed document is
`gpuwaste.config.GpuWasteConfig`. The one environment read here is `_env_number`, the defaults of two Prometheus
limits for the commands that read no configuration file (`doctor`, `scan --prometheus`): it is made where the field
default is made, so a configuration document still overrides it, and a bad value is a `ConfigError` naming the
variable. The Lambda roots' environment is read by their pydantic-settings models (`bootstrap.pipeline`).
"""

from __future__ import annotations

import math
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuwaste.errors import ConfigError
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.settings.common import (
    ALLOW_LINK_LOCAL,
    DEFAULT_GPU_RESOURCES,
    Secret,
    _check_urls,
)
from gpuwaste.models.settings.delivery import RouteTarget


class TelemetryLabels(SettingsModel):
    """Label names of the dcgm-exporter series (they vary with exporter flags and scrape config).

    Attributes:
        pod_label: "auto" (use `exported_pod` when present, else `pod`), "pod" or "exported_pod".
        hostname_labels: tried in order; the exporter renamed `Hostname` to `hostname` in 2026 (B03).
        exporter_pod_pattern: regex for the exporter's own pod name, never a workload (B02).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    pod_label: str = Field("auto", pattern=r"^(auto|pod|exported_pod|pod_name)$")
    uuid_labels: tuple[str, ...] = ("UUID", "uuid")
    hostname_labels: tuple[str, ...] = ("Hostname", "hostname")
    gpu_instance_labels: tuple[str, ...] = ("GPU_I_ID", "gpu_i_id")
    mig_profile_labels: tuple[str, ...] = ("GPU_I_PROFILE", "gpu_i_profile")
    model_labels: tuple[str, ...] = ("modelName", "modelname")
    exporter_pod_pattern: str = r"dcgm-exporter"


class ClusterReadSettings(SettingsModel):
    """What counts as a GPU and as a GPU exporter when reading the cluster.

    Attributes:
        gpu_resource_names: resource names (glob patterns) that are GPUs (field guide B20).
        exporter_pod_pattern: regex matching dcgm-exporter pod names (resolves `Hostname` = pod name, B03).
        capacity_type_labels: node labels giving on-demand/spot, tried in order.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_resource_names: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    exporter_pod_pattern: str = r"dcgm-exporter"
    capacity_type_labels: tuple[str, ...] = (
        "karpenter.sh/capacity-type",
        "eks.amazonaws.com/capacityType",
        "node.kubernetes.io/capacity-type",
        "cloud.google.com/gke-spot",
        "cloud.google.com/gke-preemptible",
        "kubernetes.azure.com/scalesetpriority",
    )
    namespace: str | None = Field(None, description="only read this namespace's pods (None: all)")


class PrometheusAuth(BaseModel):
    """How to authenticate to Prometheus.

    Attributes:
        kind: "none", "bearer", "basic", or "sigv4" (Amazon Managed Service for Prometheus; signed
            with the caller's IAM credentials, service "aps").
        bearer_token / password: the secret itself (local use); in Lambda use the `*_secret_arn`
            fields, which the bootstrap resolves from Secrets Manager.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["none", "bearer", "basic", "sigv4"] = "none"
    bearer_token: Secret | None = None
    bearer_token_secret_arn: str | None = None
    username: str | None = None
    password: Secret | None = None
    password_secret_arn: str | None = None
    sigv4_region: str | None = None
    sigv4_service: str = "aps"

    @model_validator(mode="after")
    def _complete(self) -> PrometheusAuth:
        if self.kind == "bearer" and not (self.bearer_token or self.bearer_token_secret_arn):
            raise ValueError("kind 'bearer' needs bearer_token or bearer_token_secret_arn")
        if self.kind == "basic" and not (self.username and (self.password or self.password_secret_arn)):
            raise ValueError("kind 'basic' needs username and password (or password_secret_arn)")
        return self


def _env_number(name: str, default: float, low: float, high: float) -> float:
    """A default read from environment variable `name`: `default` when it is unset or empty.

    `gpuwaste doctor` and `scan --prometheus` read no configuration file, so these two defaults come from the
    environment; a value set there is read here, where the field's default is made, and nowhere else.

    Raises:
        ConfigError: it is set to anything but a number in [low, high] (a typo is an error, never a silent
            default): names the variable, the value and what is allowed.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text) if len(text) <= 20 else math.nan
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # NaN (not a number, or too long to be one) fails too
        raise ConfigError(f"environment: {name}={text[:20]!r} is not a number from {low:g} to {high:g}; unset it for "
                          f"the default ({default:g})")
    return value


class PrometheusSettings(BaseModel):
    """Where and how to query Prometheus.

    Attributes:
        url: base URL (e.g. https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-…/ for AMP).
        timeout_s: per-request timeout (seconds). max_retries: bounded retries on timeouts and 5xx.
        max_series: refuse a result larger than this (a fleet-sized guard against a runaway query).
        max_answer_mb: refuse an answer larger than this many MB (10^6 bytes), counted both as received and after
            gzip/deflate decoding, before it is decoded as JSON. The default 256 is 3× the largest answer of a
            10,004-GPU scan (up to ~85 MB on the raw plan; 8.8 MB on the recording-rules plan, bench/RESULTS.md):
            about 30,000 GPUs per Prometheus without the recording rules, several times that with them.
        answer_deadline_s: one answer, headers and body, must be complete within this many seconds of its request —
            a Prometheus (or proxy) that sends its headers and then a byte every few seconds never trips the per-read
            `timeout_s` (a watchdog shuts the connection down at the deadline; between body reads it is checked too,
            each read waiting at most what is left of it). The default 120 s is 4× `timeout_s` and ~100×
            the slowest query of the 10,004-GPU bench plan (1.25 s, bench/RESULTS.md), below the 300 s scan Lambda
            timeout.
        The environment variables GPUWASTE_PROMETHEUS_MAX_ANSWER_MB and GPUWASTE_PROMETHEUS_ANSWER_DEADLINE_S set
        the defaults of these two (for `gpuwaste doctor` and `scan --prometheus`, which read no configuration file);
        a value that is not a number in the field's range is a `ConfigError` naming the variable.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://")
    auth: PrometheusAuth = Field(default_factory=PrometheusAuth)
    timeout_s: float = Field(30.0, gt=0, le=300)
    max_retries: int = Field(2, ge=0, le=10)
    verify_tls: bool = True
    headers: dict[str, str] = Field(default_factory=dict)
    max_series: int = Field(500_000, gt=0)
    max_answer_mb: float = Field(default_factory=lambda: _env_number("GPUWASTE_PROMETHEUS_MAX_ANSWER_MB", 256.0, 0.01, 8192),
                                 ge=0.01, le=8192, json_schema_extra={"default": 256.0})
    answer_deadline_s: float = Field(default_factory=lambda: _env_number("GPUWASTE_PROMETHEUS_ANSWER_DEADLINE_S", 120.0, 0.1, 3600),
                                     gt=0, le=3600, json_schema_extra={"default": 120.0})
    concurrency: int = Field(4, ge=1, le=16)
    matchers: dict[str, str] = Field(
        default_factory=dict,
        description="extra label matchers added to every query, e.g. {cluster: prod-a} for a Prometheus shared by clusters",
    )
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_url(self) -> PrometheusSettings:
        _check_urls(self, {"url": self.url})
        return self


class KubernetesSettings(BaseModel):
    """How to reach the Kubernetes API.

    Attributes:
        mode: "kubeconfig" (a file and context), "in-cluster" (service account), or "eks" (a bearer
            token generated from the caller's IAM credentials for `eks_cluster_name`).
        server / ca_data: the API endpoint and base64 CA for "eks" mode (from `aws eks describe-cluster`).
        page_size: items per list call (`limit`); lists continue until done.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["kubeconfig", "in-cluster", "eks"] = "kubeconfig"
    kubeconfig: str | None = None
    context: str | None = None
    eks_cluster_name: str | None = None
    eks_region: str | None = None
    server: str | None = None
    ca_data: str | None = None
    verify_tls: bool = True
    page_size: int = Field(500, ge=1, le=5000)
    timeout_s: float = Field(30.0, gt=0, le=300)

    @model_validator(mode="after")
    def _eks_complete(self) -> KubernetesSettings:
        if self.mode == "eks" and not (self.eks_cluster_name and self.server):
            raise ValueError("mode 'eks' needs eks_cluster_name and server")
        return self


class ClusterConfig(BaseModel):
    """One cluster to scan.

    Attributes:
        cluster_state: where pods, nodes and owners come from. "kube-state-metrics": the KSM series of the same
            Prometheus (no Kubernetes access needed; AMP with SigV4 is enough); "kubernetes": the API only;
            "both": the API for what exists now and KSM for the window's history; "auto" (default): "both"
            when Kubernetes access is configured (an existing kubeconfig, in-cluster service account, or "eks"
            mode), else "kube-state-metrics".
        platform_owner: who owns the cluster's nodes (team, chat channel, Jira project...): findings about node
            capacity nobody requested, and findings nothing else routes, go to them (never to "nobody"). Without it
            they go to `delivery.platform_owner`, else the default channel with a line saying what to set.
        scan_shards: how many shards one scan of this cluster is split into (workload-closed node sets, each its own
            scan request and scan function invocation: `services.shards`); 1 (the default) scans the cluster whole.
            Size it from the cluster's GPUs with the sizing table of docs/deploy.md (one shard per ~10,000 GPUs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    prometheus: PrometheusSettings | None = None
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    cluster_state: Literal["auto", "kubernetes", "kube-state-metrics", "both"] = "auto"
    labels: TelemetryLabels = Field(default_factory=TelemetryLabels)
    read: ClusterReadSettings = Field(default_factory=ClusterReadSettings)
    recording: str | None = Field(
        None, description="scan this recording directory instead of live sources (offline runs, tests, the demo)"
    )
    platform_owner: RouteTarget | None = None
    scan_shards: int = Field(1, ge=1, le=64, description="shards one scan of this cluster is split into (1: whole)")


class ScanSettings(BaseModel):
    """The scan window, and how a tick's scans are paced (`services.dispatch.pace`).

    Attributes:
        window_s: look-back of each scan (seconds); 3600 by default.
        scrape_interval_s: expected seconds between DCGM samples (dcgm-exporter collects every 30 s).
        dispatch_spread_s: each scan request of a tick starts a stable pseudo-random 0 … this many seconds late
            (SQS DelaySeconds; a hash of the scan id and shard), so clusters are not all queried at the same instant;
            0: all at once. The scans still evaluate at the tick's time.
        scans_per_endpoint: the query budget of one Prometheus endpoint (its URL): at most this many scans (shards)
            reading it start together; the others start in later waves `wave_s` apart. 0: no budget.
        wave_s: seconds between two waves of one endpoint (size it to the slowest shard's wall, docs/deploy.md).
            Waves end at SQS's 900-second delay: scans past it start with the last wave (logged).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: int = Field(3600, ge=600, le=7 * 86400)
    scrape_interval_s: float = Field(30.0, gt=0, le=600)
    dispatch_spread_s: int = Field(0, ge=0, le=900)
    scans_per_endpoint: int = Field(0, ge=0, le=1000)
    wave_s: int = Field(60, ge=1, le=900)
