"""Settings: the one validated configuration document (clusters, labels, thresholds, pricing, routing).

Loaded from YAML/JSON (a file, an SSM parameter or an S3 object — the bootstrap fetches the text) and
validated once; errors name the field path and what is allowed. `gpuwaste config-schema` prints the
JSON Schema exported from these models. Secrets are held as `SecretStr` or referenced by Secrets
Manager ARN, never logged.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
import re
import socket
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.errors import ConfigError, InputFormatError
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.redaction import register_secret
from gpuwaste.pricing.catalog import PriceOverrides

#: The largest USD/day a threshold may be set to (a million dollars a day; "never" is not a number).
MAX_USD_PER_DAY = Decimal(1_000_000)

DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")


#: Host names of cloud instance-metadata services (credentials live there): refused as a destination unless the
#: section allows link-local URLs. Their addresses (169.254.169.254, fd00:ec2::254, …) are refused as link-local.
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal", "metadata.azure.internal", "metadata.tencentyun.com"})
#: Metadata services outside the link-local ranges (Alibaba Cloud, Oracle Cloud's legacy address).
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("192.0.0.192"),
                                ipaddress.ip_address("fd00:ec2::254")})


def _host_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an IP address, also in the forms C's inet_aton reads (`2852039166`, `0xa9fea9fe`, `0251.0376…`);
    None for a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[0-9a-fA-FxX.]+", host) or not re.search(r"\d", host):
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def outbound_url_problem(url: str, *, allow_link_local: bool = False, secret: bool = False) -> str | None:
    """Why `url` may not be a destination gpuwaste sends to or links to; None when it may.

    Refused: a scheme other than http/https (`file://`, `gopher://`, `javascript:`), no host, and — unless
    `allow_link_local` — link-local hosts (169.254.0.0/16, fe80::/10, in any notation) and cloud metadata services
    (METADATA_HOSTS, METADATA_ADDRESSES), the usual server-side request forgery targets. Loopback and private
    networks (a Prometheus in the cluster, a local test server) are allowed. With `secret` the reason does not
    name the host. A host given as `{placeholder}` (a link template) is not checked.
    """
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {parts.scheme or '(none)'!r} is not http or https"
    if not host:
        return "the URL has no host"
    if allow_link_local or "{" in host:
        return None
    address = _host_address(host)
    metadata = host in METADATA_HOSTS or address in METADATA_ADDRESSES or str(address) == "169.254.169.254"
    if metadata or (address is not None and address.is_link_local):
        what = "a cloud metadata service" if metadata else "a link-local address"
        return (f"host {'(hidden: the URL is a secret)' if secret else host} is {what}; set "
                f"allow_link_local_urls: true in this section if it is really meant")
    return None


def _check_urls(section: BaseModel, urls: dict[str, str | None], *, secret: bool = False) -> None:
    """Raise ValueError naming the first field of `urls` (field path → URL) that `outbound_url_problem` refuses."""
    allow = bool(getattr(section, "allow_link_local_urls", False))
    for where, url in urls.items():
        if url is None:
            continue
        problem = outbound_url_problem(url, allow_link_local=allow, secret=secret)
        if problem:
            raise ValueError(f"{where}: {problem}")


def _remember_secret(value: SecretStr) -> SecretStr:
    register_secret(value.get_secret_value())  # redacted from every log line from now on (models/redaction.py)
    return value


#: A secret in the configuration: masked in repr/JSON (SecretStr) and redacted literally from every log line.
Secret = Annotated[SecretStr, AfterValidator(_remember_secret)]
#: Opt-in per section for link-local / metadata-service destinations (refused by default: SSRF).
ALLOW_LINK_LOCAL = Field(False, description="allow this section's URLs to point at link-local addresses or cloud "
                                             "metadata services (169.254.0.0/16, fd00:ec2::254, "
                                             "metadata.google.internal…), refused by default")


class TelemetryLabels(SettingsModel):
    """Label names of the dcgm-exporter series (they vary with exporter flags and scrape config).

    Attributes:
        pod_label: "auto" (use `exported_pod` when present, else `pod`), "pod" or "exported_pod".
        hostname_labels: tried in order; the exporter renamed `Hostname` to `hostname` in 2026 (B03).
        exporter_pod_pattern: regex for the exporter's own pod name, never a workload (B02).
    """

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

    model_config = ConfigDict(extra="forbid")

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
    """A default read from the environment (`gpuwaste doctor` and `scan --prometheus` have no configuration file);
    `default` when unset, not a number, or outside [low, high]."""
    text = os.environ.get(name, "").strip()
    try:
        value = float(text) if text and len(text) <= 20 else default
    except ValueError:
        return default
    return value if low <= value <= high else default


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
        the defaults of these two (for `gpuwaste doctor` and `scan --prometheus`, which read no configuration file).
    """

    model_config = ConfigDict(extra="forbid")

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

    model_config = ConfigDict(extra="forbid")

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

    model_config = ConfigDict(extra="forbid")

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

    model_config = ConfigDict(extra="forbid")

    window_s: int = Field(3600, ge=600, le=7 * 86400)
    scrape_interval_s: float = Field(30.0, gt=0, le=600)
    dispatch_spread_s: int = Field(0, ge=0, le=900)
    scans_per_endpoint: int = Field(0, ge=0, le=1000)
    wave_s: int = Field(60, ge=1, le=900)


class LifecycleSettings(BaseModel):
    """When the finding lifecycle (dedupe) tells an owner, opens a ticket, and calls waste resolved.

    Attributes:
        worse_share: re-alert an open finding when its USD/day rose by at least this share (0.25 = 25 %)
            over the cost last alerted.
        reminder_after: re-alert an open, unacknowledged finding when the last alert is this old.
        ticket_after: request a ticket (once) for a finding open this long...
        ticket_usd_per_day: ...or costing at least this much USD/day.
        ticket_min_observed_s: never request a ticket for a finding resting on fewer observed seconds than this
            (`Finding.observed_s`): a short window sees a bursty workload's quiet phase, not its pattern.
        resolve_after_missed_scans: consecutive scans of its cluster without the finding → resolved.
        retention_days: records expire (store TTL) this many days after their last change.
        min_usd_per_day: findings priced below this USD/day are tracked but never alerted.
        alert_data_quality: also alert data-quality findings (default: tracked only).
        heartbeat: when set (e.g. 1 h; 0, the default, writes every sighting), a sighting that changes nothing but
            the record's times (same cost, nothing to tell) is not written unless the last written sighting is this
            old — and never when it is half the finding's evidence window old, so the next written sighting's
            evidence still covers the skipped ones and the money ledger has no gap. The store's write cost then
            follows the findings that change, not the fleet. Trade-off: the stored `last_seen` lags by up to that
            window, so a scan completion delivered out of order (older than an unwritten sighting, after it) can
            count a missed scan the sighting would have made stale; the next written sighting resets the count.
    """

    model_config = ConfigDict(extra="forbid")

    worse_share: Decimal = Field(Decimal("0.25"), gt=0, le=100)
    reminder_after: timedelta = Field(timedelta(hours=24), gt=timedelta(0))
    ticket_after: timedelta = Field(timedelta(days=3), gt=timedelta(0))
    ticket_usd_per_day: Decimal = Field(Decimal(100), ge=0, le=MAX_USD_PER_DAY)
    ticket_min_observed_s: int = Field(1800, ge=0)
    resolve_after_missed_scans: int = Field(3, ge=1, le=1000)
    retention_days: int = Field(30, ge=1, le=3650)
    min_usd_per_day: Decimal = Field(Decimal(0), ge=0, le=MAX_USD_PER_DAY)
    alert_data_quality: bool = False
    heartbeat: timedelta = Field(timedelta(0), ge=timedelta(0), le=timedelta(days=1))


class RouteTarget(BaseModel):
    """Where one namespace's or team's findings go (every field optional; unset fields fall through).

    Attributes:
        team: the owning team's name (used for the team map and the summary).
        slack_channel: channel name (`#ml-train`) or id (`C0123…`).
        slack_user_email: an owner to mention (looked up with `users.lookupByEmail`).
        jira_project: Jira project key for tickets (e.g. `MLOPS`).
        jira_labels / jira_components: added to tickets of this route.
        teams_webhook: the name of a Microsoft Teams Workflows webhook in `delivery.msteams.webhooks` (a reference: the
            URL is a secret and never appears here).
    """

    model_config = ConfigDict(extra="forbid")

    team: str | None = None
    slack_channel: str | None = None
    slack_user_email: str | None = None
    teams_webhook: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    jira_project: str | None = Field(None, pattern=r"^[A-Z][A-Z0-9_]{1,9}$")
    jira_labels: tuple[str, ...] = ()
    jira_components: tuple[str, ...] = ()


class RoutingKeys(BaseModel):
    """Annotation/label keys read on workloads (pods) and namespaces, workload first."""

    model_config = ConfigDict(extra="forbid")

    team: str = "gpuwaste.io/team"
    slack_channel: str = "gpuwaste.io/slack-channel"
    slack_user: str = "gpuwaste.io/slack-user"
    jira_project: str = "gpuwaste.io/jira-project"
    snooze_until: str = "gpuwaste.io/snooze-until"


class LinkTemplates(BaseModel):
    """URL templates for links on alerts; placeholders {cluster} {namespace} {workload} {pod} {node} {kind}.

    Values are URL-quoted before substitution. Unset templates add no link.
    """

    model_config = ConfigDict(extra="forbid")

    prometheus: str | None = Field(None, pattern=r"^https?://")
    grafana: str | None = Field(None, pattern=r"^https?://")
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_urls(self) -> LinkTemplates:
        _check_urls(self, {"prometheus": self.prometheus, "grafana": self.grafana})
        return self


class SlackSettings(BaseModel):
    """Slack Web API access (bot token) and interactivity (signing secret).

    Attributes:
        bot_token / signing_secret: the secrets themselves (local use); in Lambda set the `*_secret_arn`
            fields instead (Secrets Manager; the secret holds `{"bot_token": …, "signing_secret": …}`).
        base_url: Web API base URL (tests point it at a local server).
        timeout_s: per-request timeout (seconds).
        rate_limit_retries / server_error_retries: in-process retries (429 honours `Retry-After`) before a
            delivery fails and is retried through the queue.
        max_retry_after_s: outside Lambda, a 429 whose `Retry-After` is longer than this is not waited out: the
            delivery is deferred (it stays in the outbox; `gpuwaste run` exits 4). The default 60 s covers Slack's
            per-minute rate-limit tiers; inside Lambda the invocation's time left is the cap instead.
        workspace_url: e.g. https://acme.slack.com; Jira tickets then link to the finding's Slack thread.
    """

    model_config = ConfigDict(extra="forbid")

    bot_token: Secret | None = None
    signing_secret: Secret | None = None
    secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    base_url: str = Field("https://slack.com/api/", pattern=r"^https?://")
    timeout_s: float = Field(10.0, gt=0, le=60)
    rate_limit_retries: int = Field(3, ge=0, le=10)
    max_retry_after_s: float = Field(
        60.0, ge=0, le=3600,
        description="outside Lambda, the longest Retry-After waited in-process; a longer one defers the delivery (it stays "
                    "in the outbox, the run exits 4)")
    server_error_retries: int = Field(1, ge=0, le=5)
    request_max_age_s: int = Field(300, ge=30, le=900)
    workspace_url: str | None = Field(None, pattern=r"^https://")
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_urls(self) -> SlackSettings:
        _check_urls(self, {"base_url": self.base_url, "workspace_url": self.workspace_url})
        return self


class TeamsSettings(BaseModel):
    """Microsoft Teams through Workflows webhooks (the "Send webhook alerts to a channel" template, or a flow with
    the "When a Teams webhook request is received" trigger): Adaptive Cards posted to a channel.

    Attributes:
        webhooks: webhook name → URL (local use). The URLs are secrets (anyone holding one can post): in Lambda set
            `secret_arn` instead (a Secrets Manager JSON object of name → URL). Routes name a webhook
            (`teams_webhook`), never its URL.
        default_webhook: the webhook used when no team/namespace route names one, and for the daily summary.
            None: Teams delivery is off.
        timeout_s: per-request timeout (seconds).
        rate_limit_retries / server_error_retries: in-process retries of a 429 (honouring `Retry-After`) and of a
            5xx before the delivery fails and is retried through the queue.
        max_payload_bytes: the size a message body is kept under (Teams refuses messages over ~28 KB).
    """

    model_config = ConfigDict(extra="forbid")

    webhooks: dict[str, Secret] = Field(default_factory=dict)
    secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    default_webhook: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    timeout_s: float = Field(10.0, gt=0, le=60)
    rate_limit_retries: int = Field(3, ge=0, le=10)
    max_retry_after_s: float = Field(
        60.0, ge=0, le=3600,
        description="outside Lambda, the longest Retry-After waited in-process; a longer one defers the delivery (it stays "
                    "in the outbox, the run exits 4)")
    server_error_retries: int = Field(1, ge=0, le=5)
    max_payload_bytes: int = Field(27_000, ge=2_000, le=28_000)
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @property
    def enabled(self) -> bool:
        """Teams delivery is on (a default webhook is named)."""
        return self.default_webhook is not None

    @model_validator(mode="after")
    def _names_known(self) -> TeamsSettings:
        _check_urls(self, {f"webhooks.{name}": url.get_secret_value() for name, url in self.webhooks.items()},
                    secret=True)
        if self.default_webhook and self.webhooks and self.secret_arn is None \
                and self.default_webhook not in self.webhooks:
            raise ValueError(f"default_webhook {self.default_webhook!r} is not in webhooks "
                             f"(known: {', '.join(sorted(self.webhooks))})")
        return self


class WebhookSettings(BaseModel):
    """A generic JSON webhook (PagerDuty Events through a relay, Opsgenie, an internal bus): one signed JSON event per
    finding and action, documented in docs/delivery.md.

    Attributes:
        url / signing_secret: the endpoint and the HMAC-SHA256 key (local use); in Lambda set `secret_arn` (a JSON
            object `{"url": …, "signing_secret": …}`). The URL may hold a token: it is never logged.
        timeout_s, rate_limit_retries, server_error_retries: as for Teams.
        max_payload_bytes: events over this size drop their evidence list first (receivers cap bodies, e.g. 512 KB).
    """

    model_config = ConfigDict(extra="forbid")

    url: Secret | None = None
    signing_secret: Secret | None = None
    secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    timeout_s: float = Field(10.0, gt=0, le=60)
    rate_limit_retries: int = Field(3, ge=0, le=10)
    max_retry_after_s: float = Field(
        60.0, ge=0, le=3600,
        description="outside Lambda, the longest Retry-After waited in-process; a longer one defers the delivery (it stays "
                    "in the outbox, the run exits 4)")
    server_error_retries: int = Field(1, ge=0, le=5)
    max_payload_bytes: int = Field(256_000, ge=4_000, le=5_000_000)
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_url(self) -> WebhookSettings:
        _check_urls(self, {"url": self.url.get_secret_value() if self.url else None}, secret=True)
        return self

    @property
    def enabled(self) -> bool:
        """The webhook sink is on (a URL or a secret holding one is configured)."""
        return self.url is not None or self.secret_arn is not None


class JiraSettings(BaseModel):
    """Jira Cloud REST v3 access and ticket shape.

    Attributes:
        base_url: the site, e.g. https://example.atlassian.net (None: tickets are off).
        api_token / api_token_secret_arn: the Atlassian API token (Basic auth with `email`).
        default_project: project key when routing names none (None: no ticket without a routed project).
        resolve_transition: transition id or name applied when a finding resolves (None: comment only).
        set_priority: send a priority from USD/day (Highest ≥ $500, High ≥ $100, Medium ≥ $20, else Low); turn it off
            for projects whose create screen has no priority field.
        max_per_run / max_per_team: tickets opened per run, and per team per run; the overflow of a team is folded
            into one ticket listing its findings.
        quiet_start_days: for this many days after the first ticket request the caps are `quiet_start_per_run` /
            1 per team, so a first run on a large fleet opens a handful of tickets, not dozens (0: off).
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, pattern=r"^https?://")
    email: str | None = None
    api_token: Secret | None = None
    api_token_secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:")
    default_project: str | None = Field(None, pattern=r"^[A-Z][A-Z0-9_]{1,9}$")
    issue_type: str = "Task"
    labels: tuple[str, ...] = ("gpuwaste",)
    components: tuple[str, ...] = ()
    resolve_transition: str | None = None
    timeout_s: float = Field(15.0, gt=0, le=60)
    set_priority: bool = True
    max_per_run: int = Field(10, ge=1, le=1000)
    max_per_team: int = Field(3, ge=1, le=1000)
    quiet_start_days: int = Field(7, ge=0, le=90)
    quiet_start_per_run: int = Field(3, ge=1, le=1000)
    allow_link_local_urls: bool = ALLOW_LINK_LOCAL

    @model_validator(mode="after")
    def _safe_url(self) -> JiraSettings:
        _check_urls(self, {"base_url": self.base_url})
        return self


class DeliverySettings(BaseModel):
    """How owners hear about findings: routing, Slack, Microsoft Teams (`msteams`), a JSON webhook, Jira, the daily
    summary. Every configured chat sink gets every alert.

    Attributes:
        default_channel: the channel used when nothing routes a finding elsewhere.
        namespaces / teams: namespace → route and team → route maps (the config fallback after annotations).
        digest_threshold: this many NEW findings for one route in one scan (or more) become one digest.
        summary_channel: where the daily summary goes (None: the default channel).
        summary_top: how many top offenders the summary lists.
        platform_owner: the owner of every cluster's nodes unless the cluster names its own
            (`clusters[].platform_owner`): node-level findings (capacity nobody requested) and findings nothing else
            routes go there. platform_owners: cluster name → owner, filled from `clusters[].platform_owner` when the
            configuration loads (set it there).
    """

    model_config = ConfigDict(extra="forbid")

    default_channel: str = Field("#gpu-waste", min_length=1)
    namespaces: dict[str, RouteTarget] = Field(default_factory=dict)
    teams: dict[str, RouteTarget] = Field(default_factory=dict)
    keys: RoutingKeys = Field(default_factory=RoutingKeys)
    links: LinkTemplates = Field(default_factory=LinkTemplates)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    msteams: TeamsSettings = Field(default_factory=TeamsSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    jira: JiraSettings = Field(default_factory=JiraSettings)
    digest_threshold: int = Field(2, ge=1, le=1000)
    summary_channel: str | None = None
    summary_top: int = Field(10, ge=1, le=50)
    platform_owner: RouteTarget | None = None
    platform_owners: dict[str, RouteTarget] = Field(default_factory=dict)


class ServeSettings(BaseModel):
    """`gpuwaste serve`: the scan schedule and the metrics endpoint (docs/metrics.md).

    Attributes:
        interval_s: seconds between scans (each scan runs the whole local chain, as `gpuwaste run`).
        window_s: look-back of each scan (seconds); None: `scan.window_s`.
        host, port: where `/metrics` and `/healthz` listen (0.0.0.0 inside a cluster).
        state: the SQLite lifecycle store kept between scans (and restarts, on a persistent volume).
        top_workloads: workloads per namespace with their own series; the rest are summed into workload "other".
        savings_credit_days: days a resolved finding's saved USD/day counts towards realised savings.
        team_budgets_usd_per_day: waste budget per team (USD/day), exposed as gpuwaste_team_budget_usd_per_day for
            the GpuWasteTeamOverBudget alert; default_team_budget_usd_per_day applies to every other team with waste
            (None: no budget for them).
    """

    model_config = ConfigDict(extra="forbid")

    interval_s: int = Field(600, ge=1, le=86400)
    window_s: int | None = Field(None, ge=600, le=7 * 86400)
    host: str = "127.0.0.1"
    port: int = Field(9402, ge=1, le=65535)
    state: str = ".gpuwaste/state.db"
    top_workloads: int = Field(10, ge=1, le=1000)
    savings_credit_days: int = Field(30, ge=1, le=365)
    team_budgets_usd_per_day: dict[str, Decimal] = Field(default_factory=dict)
    default_team_budget_usd_per_day: Decimal | None = Field(None, ge=0)


class GpuWasteConfig(BaseModel):
    """The whole configuration document."""

    model_config = ConfigDict(extra="forbid")

    clusters: list[ClusterConfig] = Field(default_factory=list)
    scan: ScanSettings = Field(default_factory=ScanSettings)
    detectors: DetectorSettings = Field(default_factory=DetectorSettings)
    pricing: PriceOverrides = Field(default_factory=PriceOverrides)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    extra: dict[str, Any] = Field(default_factory=dict, description="free-form settings of later stages")

    @model_validator(mode="after")
    def _platform_owners(self) -> GpuWasteConfig:
        """Hand each cluster's `platform_owner` to delivery routing (`delivery.platform_owners`), which sees only the
        delivery settings."""
        for c in self.clusters:
            if c.platform_owner is not None:
                self.delivery.platform_owners.setdefault(c.name, c.platform_owner)
        return self

    def cluster(self, name: str) -> ClusterConfig:
        """The named cluster.

        Raises:
            ConfigError: when no cluster has that name.
        """
        for c in self.clusters:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.clusters) or "none"
        raise ConfigError(f"clusters: no cluster named {name!r} (configured: {known})")


def _unwrap_optional(tp: Any) -> Any:
    args = [a for a in get_args(tp) if a is not type(None)]
    return args[0] if get_origin(tp) in (Union, UnionType) and len(args) == 1 else tp


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings model that holds the (unknown) key at `loc[-1]`, walking lists, dicts and optionals; or None."""
    current: Any = model
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return current if last else None
            current = _unwrap_optional(field.annotation)
        elif get_origin(current) in (list, tuple) and isinstance(part, int):
            current = _unwrap_optional(get_args(current)[0])
        elif get_origin(current) is dict:
            current = _unwrap_optional(get_args(current)[1])
        else:
            return None
    return None


def _did_you_mean(root: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    holder = _model_at(root, loc)
    if holder is None or not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(holder.model_fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(holder.model_fields)}"


def format_validation_error(exc: ValidationError, *, source: str = "config", model: type[BaseModel] | None = None) -> str:
    """One line per problem: `field.path: message (got: value)`; an unknown key names the closest allowed one."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(root)"
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got: {got!r})"
        hint = _did_you_mean(model, tuple(err["loc"])) if model is not None and err["type"] == "extra_forbidden" else ""
        lines.append(f"{source}: {path}: {err['msg']}{shown}{hint}")
    return "\n".join(lines)


def parse_config(text: str, *, source: str = "config") -> GpuWasteConfig:
    """Validate a YAML or JSON configuration document.

    The document is bounded before and after parsing: at most `MAX_CONFIG_BYTES`, `MAX_CONFIG_DEPTH` levels of
    nesting and `MAX_CONFIG_VALUES` values once YAML aliases are expanded (a "billion laughs" document), and no
    number beyond ±`MAX_CONFIG_NUMBER` (`1e999999999` is refused, not taken as "never").

    Raises:
        ConfigError: naming each bad field path and what is allowed.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: {len(text):,} characters; a configuration document is at most "
                          f"{MAX_CONFIG_BYTES:,}")
    try:
        data = _load_yaml(text, source) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML/JSON: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{source}: nested more than {MAX_CONFIG_DEPTH} levels deep") from exc
    _check_bounds(data, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the document must be a mapping, got {type(data).__name__}")
    try:
        return GpuWasteConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=source, model=GpuWasteConfig)) from exc


#: An integer in the configuration has at most this many digits (±1e12 is the largest value any field takes; a
#: 5,000-digit integer would otherwise reach Python's int-conversion limit as a traceback).
MAX_CONFIG_INT_DIGITS = 40


class _ConfigLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses integers longer than `MAX_CONFIG_INT_DIGITS` digits before converting them."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = str(node.value).lstrip("+-").replace("_", "")
        if len(digits) > MAX_CONFIG_INT_DIGITS:
            raise ConfigError(f"line {node.start_mark.line + 1}: an integer of {len(digits):,} digits is out of range "
                              "(at most ±1e12)")
        value: int = super().construct_yaml_int(node)
        return value


_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_yaml_int)


def _load_yaml(text: str, source: str) -> Any:
    """The YAML/JSON document, refusing a key repeated in one mapping (YAML would keep the last one silently).

    Raises:
        ConfigError: naming the repeated key's path and both lines, or an integer too long to be a setting.
        yaml.YAMLError: the text is not YAML.
    """
    loader = _ConfigLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicate_keys(node, source)
        try:
            return loader.construct_document(node)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
    finally:
        loader.dispose()


def _check_duplicate_keys(root: yaml.Node, source: str) -> None:
    """Walk the node graph once (aliases visited once: no expansion) and refuse a mapping that repeats a key.

    Raises:
        ConfigError: `source: path.to.key: duplicate key (lines A and B); keep one`.
    """
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else f"<{key.tag}>"
                where = f"{path}.{name}" if path else name
                line = key.start_mark.line + 1
                if isinstance(key, yaml.ScalarNode) and name != "<<":
                    if name in first:
                        raise ConfigError(f"{source}: {where}: duplicate key (lines {first[name]} and {line}); keep one")
                    first[name] = line
                stack.append((value, where))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node.value))


#: Bounds on a configuration document (see `parse_config`).
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_NUMBER = Decimal(10) ** 12
_NUMBER_TEXT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")


def _check_bounds(data: Any, source: str) -> None:
    """Refuse nesting deeper than `MAX_CONFIG_DEPTH`, more than `MAX_CONFIG_VALUES` values, and numbers (or numeric
    strings) beyond ±`MAX_CONFIG_NUMBER`, infinite or NaN.

    Raises:
        ConfigError: naming the path of the offending value.
    """
    budget = [MAX_CONFIG_VALUES]
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise ConfigError(f"{source}: more than {MAX_CONFIG_VALUES:,} values (YAML aliases expanded?)")
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{source}: {path or '(root)'}: nested more than {MAX_CONFIG_DEPTH} levels deep")
        where = path or "(root)"
        if isinstance(value, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int | float) or (isinstance(value, str) and _NUMBER_TEXT.match(value)):
            try:
                number = Decimal(str(value).strip())
            except ArithmeticError:
                continue
            if not number.is_finite() or (number != 0 and number.adjusted() >= MAX_CONFIG_NUMBER.adjusted() + 1):
                raise ConfigError(f"{source}: {where}: {str(value)[:40]} is out of range (at most ±1e12)")


def load_config(path: Path | None) -> GpuWasteConfig:
    """Read and validate the configuration file (defaults when `path` is None).

    Raises:
        ConfigError: when the file cannot be read or is invalid.
    """
    if path is None:
        return GpuWasteConfig()
    raw = read_config_bytes(Path(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return parse_config(text, source=str(path))


def read_config_bytes(path: Path) -> bytes:
    """The configuration file's bytes: a regular file of at most `MAX_CONFIG_BYTES` (checked before it is read).

    Raises:
        ConfigError: a FIFO, device or directory, unreadable, or larger than the limit.
    """
    from gpuwaste.files import read_capped

    try:
        return read_capped(path, MAX_CONFIG_BYTES, what="configuration")
    except InputFormatError as exc:
        raise ConfigError(str(exc)) from exc


def config_json_schema() -> str:
    """The JSON Schema of the configuration document, as JSON text."""
    return json.dumps(GpuWasteConfig.model_json_schema(), indent=2, sort_keys=True)
