"""Bootstrap: the local command's composition root (recordings, or live Prometheus + Kubernetes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Literal

from gpuwaste.errors import ConfigError
from gpuwaste.ports import ClusterStateSource, GpuTelemetrySource
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanService
from gpuwaste.settings import ClusterConfig, GpuWasteConfig
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource


def demo_recording() -> Path:
    """The bundled demo fleet recording (a directory inside the package)."""
    return Path(str(resources.files("gpuwaste.fleet") / "demo"))


def price_book(config: GpuWasteConfig) -> PriceBook:
    """The bundled price book with the user's overrides applied."""
    return PriceBook.bundled().with_overrides(config.pricing)


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
    """Sources over a recording directory or file (+ an optional separate kubectl JSON file)."""
    cc = config.clusters[0] if config.clusters else ClusterConfig(name=cluster_name or "recording")
    tel = RecordingTelemetrySource(path, cluster=cluster_name, fmt=fmt, labels=cc.labels, progress=progress,
                                   scrape_interval_s=None if not config.clusters else config.scan.scrape_interval_s)
    cl = RecordingClusterSource(cluster_file or path, cluster=cluster_name or tel.cluster, settings=cc.read)
    return Sources(cluster=cl, telemetry=tel, recording=tel)


def live_sources(cluster: ClusterConfig, config: GpuWasteConfig) -> Sources:
    """Sources over a live Prometheus and Kubernetes API.

    Raises:
        ConfigError: when the cluster has no Prometheus URL.
    """
    from gpuwaste.sources.kubernetes import KubernetesPodSource
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    if cluster.prometheus is None:
        raise ConfigError(f"clusters.{cluster.name}.prometheus: a Prometheus URL is required (or pass --prometheus URL)")
    tel = PrometheusGpuMetricsSource.from_settings(cluster.prometheus, cluster=cluster.name, labels=cluster.labels,
                                                   scrape_interval_s=config.scan.scrape_interval_s)
    cl = KubernetesPodSource.from_settings(cluster.kubernetes, cluster=cluster.name, read=cluster.read)
    return Sources(cluster=cl, telemetry=tel)


def scan_service(sources: Sources, config: GpuWasteConfig, *, window_s: int | None = None, priced: bool = True,
                 progress: Callable[[str], None] | None = None) -> ScanService:
    """A scan service over the given sources."""
    return ScanService(
        cluster_source=sources.cluster,
        telemetry_source=sources.telemetry,
        settings=config.detectors,
        window=timedelta(seconds=window_s or config.scan.window_s),
        price_book=price_book(config) if priced else None,
        progress=progress,
    )
