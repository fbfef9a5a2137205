"""Bootstrap: the scan's input ports over a recording or a live cluster (Prometheus + Kubernetes API and/or
kube-state-metrics).

Shared by the Lambda scan root (`bootstrap.scan`) and the local command's root (`bootstrap.local`); it imports
nothing of the terminal stack or the fleet generator, so the Lambda layer can ship without them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuwaste.config import GpuWasteConfig
from gpuwaste.errors import ConfigError
from gpuwaste.models.settings import ClusterConfig
from gpuwaste.ports import ClusterStateSource, GpuTelemetrySource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource


@dataclass
class Sources:
    """The two input ports of a scan, and what the scan should be evaluated at by default."""

    cluster: ClusterStateSource
    telemetry: GpuTelemetrySource
    recording: RecordingTelemetrySource | None = None


def recording_sources(
    path: Path,
    config: GpuWasteConfig,
    *,
    cluster_file: Path | None = None,
    fmt: Literal["auto", "text", "openmetrics"] | None = None,
    cluster_name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Sources:
    """Sources over a recording directory or file (+ an optional separate kubectl JSON file).

    The labels and read settings come from the configured cluster named `cluster_name` (else the first).

    Raises:
        ConfigError: `cluster_name` is not one of the configured clusters.
    """
    if config.clusters:
        cc = config.cluster(cluster_name) if cluster_name else config.clusters[0]
    else:
        cc = ClusterConfig(name=cluster_name or "recording")
    tel = RecordingTelemetrySource(path, cluster=cluster_name, fmt=fmt, labels=cc.labels, progress=progress,
                                   scrape_interval_s=None if not config.clusters else config.scan.scrape_interval_s)
    cl: ClusterStateSource = RecordingClusterSource(cluster_file or path, cluster=cluster_name or tel.cluster, settings=cc.read)
    if cl.cluster_file is None:  # type: ignore[attr-defined]  # no cluster.json: the KSM series in the recording, if any
        from gpuwaste.sources.ksm import KsmRecordingSource

        ksm = KsmRecordingSource(path, cluster=cluster_name or tel.cluster, settings=cc.read,
                                 window=timedelta(seconds=tel.meta.window_s or config.scan.window_s))
        if ksm.has_ksm():
            cl = ksm
    return Sources(cluster=cl, telemetry=tel, recording=tel)


class KubernetesEnvironment(BaseSettings):
    """The Kubernetes conventions in the environment that say where cluster access comes from (read per call).

    gpuwaste never sets them, and the Kubernetes client reads them itself when it loads its configuration; these
    fields only decide which way it is loaded (`kubernetes_configured`, `gpuwaste reclaim`'s credentials).

    Attributes:
        kubernetes_service_host: KUBERNETES_SERVICE_HOST, set in every pod by the kubelet: the pod's service
            account can be used (in-cluster).
        kubeconfig: KUBECONFIG, kubectl's list of kubeconfig files (`os.pathsep`-separated); unset:
            ~/.kube/config.
    """

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    kubernetes_service_host: str = ""
    kubeconfig: str = ""

    @property
    def in_cluster(self) -> bool:
        """Whether this runs in a pod (the in-cluster service account can be loaded)."""
        return bool(self.kubernetes_service_host)

    def kubeconfig_files(self) -> list[Path]:
        """The kubeconfig files kubectl would read: those KUBECONFIG lists, else ~/.kube/config."""
        listed = [p for p in self.kubeconfig.split(os.pathsep) if p]
        return [Path(p).expanduser() for p in listed] if listed else [Path.home() / ".kube" / "config"]


def kubernetes_configured(cluster: ClusterConfig) -> bool:
    """Whether Kubernetes API access is set up for `cluster`.

    "eks" mode, an in-cluster service account, or a kubeconfig file that exists (the configured one, else
    $KUBECONFIG, else ~/.kube/config).
    """
    k = cluster.kubernetes
    if k.mode == "eks":
        return True
    if k.mode == "in-cluster":
        return KubernetesEnvironment().in_cluster
    if k.kubeconfig:
        return Path(k.kubeconfig).expanduser().exists()
    return any(p.exists() for p in KubernetesEnvironment().kubeconfig_files())


def cluster_state_mode(cluster: ClusterConfig) -> str:
    """"kubernetes", "kube-state-metrics" or "both": the configured mode, with "auto" resolved."""
    if cluster.cluster_state != "auto":
        return cluster.cluster_state
    return "both" if kubernetes_configured(cluster) else "kube-state-metrics"


def live_sources(cluster: ClusterConfig, config: GpuWasteConfig, *, window_s: int | None = None,
                 cluster_file: Path | None = None) -> Sources:
    """Sources over a live Prometheus, with the cluster state from the Kubernetes API, kube-state-metrics, or both
    (`ClusterConfig.cluster_state`; "auto" reads KSM alone when no Kubernetes access is configured), or, with
    `cluster_file`, cluster objects from a `kubectl get pods,nodes -A -o json` file instead of the API.

    Raises:
        ConfigError: when the cluster has no Prometheus URL, or the kubeconfig cannot be loaded.
    """
    from gpuwaste.sources.ksm import ApiWithKsmHistory, PrometheusKsmSource
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    if cluster.prometheus is None:
        raise ConfigError(f"clusters.{cluster.name}.prometheus: a Prometheus URL is required (or pass --prometheus URL)")
    tel = PrometheusGpuMetricsSource.from_settings(cluster.prometheus, cluster=cluster.name, labels=cluster.labels,
                                                   scrape_interval_s=config.scan.scrape_interval_s,
                                                   matchers=cluster.prometheus.matchers or None)
    if cluster_file is not None:
        return Sources(cluster=RecordingClusterSource(cluster_file, cluster=cluster.name, settings=cluster.read), telemetry=tel)
    mode = cluster_state_mode(cluster)
    ksm = PrometheusKsmSource(tel, cluster=cluster.name, settings=cluster.read, window=timedelta(seconds=window_s or config.scan.window_s),
                              scrape_interval_s=config.scan.scrape_interval_s, concurrency=cluster.prometheus.concurrency,
                              history_only=mode == "both")  # next to the API, KSM only supplies the window's history
    if mode == "kube-state-metrics":
        return Sources(cluster=ksm, telemetry=tel)
    from gpuwaste.sources.kubernetes import KubernetesClusterSource

    # "auto" with a kubeconfig found by default: the API is optional (unreadable → KSM alone, with a note); an
    # explicitly configured one (--kubeconfig/--context, kubernetes.kubeconfig, eks/in-cluster) must work
    k = cluster.kubernetes
    auto = cluster.cluster_state == "auto" and k.mode == "kubeconfig" and not (k.kubeconfig or k.context)
    try:
        api = KubernetesClusterSource.from_settings(cluster.kubernetes, cluster=cluster.name, read=cluster.read)
    except ConfigError as exc:
        if not auto:
            raise
        return Sources(cluster=ApiWithKsmHistory(None, ksm, api_optional=True, api_error=str(exc)), telemetry=tel)
    return Sources(cluster=api if mode == "kubernetes" else ApiWithKsmHistory(api, ksm, api_optional=auto), telemetry=tel)


def window_for_history(sources: Sources, window_s: int) -> None:
    """Tell a KSM cluster source how far back to look (the scan's window), through wrappers (`.inner`) and the
    API + KSM merge (`.ksm`)."""
    pending: list[object] = [sources.cluster]
    while pending:
        source = pending.pop()
        own = vars(source) if hasattr(source, "__dict__") else {}
        if "window" in own:
            source.window = timedelta(seconds=window_s)  # type: ignore[attr-defined]
        pending += [own[k] for k in ("inner", "ksm") if own.get(k) is not None]


__all__ = ["Sources", "cluster_state_mode", "kubernetes_configured", "live_sources", "recording_sources",
           "window_for_history"]
