"""`gpuwaste record`: write a recording (telemetry + cluster state + metadata) from a live Prometheus and cluster.

The recording has the layout `fleet.generator.write_recording` produces and `gpuwaste scan --recording`
reads: `telemetry.om.gz` (OpenMetrics, second timestamps), `cluster.json` (a `kubectl get … -o json`
List) and `recording.json` (cluster, evaluation time, window, scrape interval). The telemetry holds the
raw samples of every metric of the scan plan over `[at − window − 10 min, at]` (the extra 10 minutes
make the first 10-minute average of the window complete), fetched with instant queries of range
vectors at explicit evaluation times, in chunks, and the kube-state-metrics series the cluster state is read
from (GPU pods and exporter pods, nodes, namespaces, owners), so a recording is complete without
`cluster.json`. `cluster.json` is written too when `--cluster-json` is given or Kubernetes access is configured.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwaste.cli_support import (
    SOURCE_ERRORS,
    app,
    err,
    fail,
    fail_source,
    parse_positive,
    parse_time,
    parse_window,
    progress_printer,
)
from gpuwaste.errors import GpuWasteError, InputFormatError, PermanentError, SourceAuthError
from gpuwaste.files import read_capped, recording_max_bytes

if TYPE_CHECKING:  # imported where used, so `gpuwaste --help` stays fast
    from gpuwaste.models.settings import ClusterConfig

AVG_LOOKBACK_S = 600


def _cluster_objects(cluster_json: Path | None, cc: ClusterConfig, progress: Any) -> dict[str, Any]:
    """The cluster List: from a file, or read live with the Kubernetes adapter."""
    if cluster_json is not None:
        try:
            doc = json.loads(read_capped(cluster_json, recording_max_bytes(), what="cluster JSON",
                                         hint="if it is genuine, raise it with GPUWASTE_RECORDING_MAX_MB=<MiB>"))
        except (InputFormatError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            fail(f"{cluster_json}: cannot read a kubectl JSON List: {exc}")
        if isinstance(doc, list):
            doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": doc}
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            fail(f"{cluster_json}: expected a Kubernetes List (kubectl get pods,nodes -A -o json)")
        return doc
    try:
        from gpuwaste.sources.kubernetes import KubernetesClusterSource
    except ModuleNotFoundError:
        fail("the Kubernetes adapter is not installed; pass --cluster-json FILE (kubectl get pods,nodes -A -o json)")
    source = KubernetesClusterSource.from_settings(cc.kubernetes, cluster=cc.name, read=cc.read, progress=progress)
    return source.kube_list()


@app.command()
def record(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the recording into (created; must be empty or absent unless --force).")],
    prometheus: Annotated[str | None, typer.Option("--prometheus", "-p", help="Prometheus base URL.", envvar="GPUWASTE_PROMETHEUS_URL")] = None,
    at: Annotated[str | None, typer.Option("--at", help="End of the recorded window (RFC 3339 or unix seconds). Default: now.")] = None,
    window: Annotated[str, typer.Option("--window", "-w", help="Window the recording must let a scan cover, e.g. 1h.")] = "1h",
    step: Annotated[str, typer.Option("--step", help="Scrape interval of the series (recording.json scrape_interval_s).")] = "30s",
    cluster_json: Annotated[Path | None, typer.Option("--cluster-json", help="Use this kubectl get pods,nodes -A -o json List instead of reading the cluster.")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (default ~/.kube/config).", envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (auth, labels); see `gpuwaste config-schema`.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name (from --config, or a label for the recording).")] = None,
    chunk: Annotated[str, typer.Option("--chunk", help="Fetch samples in chunks of this length.")] = "1h",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing recording in OUT_DIR.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress messages.")] = False,
) -> None:
    """Record telemetry and cluster state from a live Prometheus and cluster into a replayable directory."""
    from gpuwaste.config import load_config
    from gpuwaste.models.settings import ClusterConfig, KubernetesSettings, PrometheusSettings
    from gpuwaste.sources.exposition import write_openmetrics
    from gpuwaste.sources.metrics_plan import PLAN
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    try:
        cfg = load_config(config)
        cc = cfg.cluster(cluster) if (cluster and cfg.clusters) else (cfg.clusters[0] if cfg.clusters else ClusterConfig(name=cluster or "recording"))
    except GpuWasteError as exc:
        fail(str(exc))
    if prometheus:
        cc = cc.model_copy(update={"prometheus": PrometheusSettings(url=prometheus) if cc.prometheus is None
                                   else cc.prometheus.model_copy(update={"url": prometheus})})
    prom = cc.prometheus
    if prom is None:
        fail("a Prometheus URL is required: --prometheus URL (or clusters[].prometheus.url in --config)")
    if kubeconfig or context:
        cc = cc.model_copy(update={"kubernetes": KubernetesSettings(mode="kubeconfig", context=context,
                                                                    kubeconfig=str(kubeconfig) if kubeconfig else None)})
    window_s = parse_window(window)
    step_s = parse_positive(step, "--step")
    chunk_s = parse_positive(chunk, "--chunk")
    when = parse_time(at) or datetime.now(tz=UTC).replace(microsecond=0)
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        fail(f"{out_dir}: not empty; choose another directory or pass --force")
    progress = progress_printer(quiet)
    from gpuwaste.bootstrap.local import cluster_state_mode
    from gpuwaste.sources.ksm import KSM_METRICS, PrometheusKsmSource

    kube: dict[str, Any] | None = None
    try:
        source = PrometheusGpuMetricsSource.from_settings(prom, cluster=cc.name, labels=cc.labels, scrape_interval_s=step_s,
                                                          matchers=prom.matchers or None)
        progress(f"fetching {len(PLAN)} metrics over {window_s + AVG_LOOKBACK_S} s ending {when.isoformat()}")
        series = source.raw_series(at=when, range_s=window_s + AVG_LOOKBACK_S, chunk_s=chunk_s, progress=progress)
        progress("fetching the kube-state-metrics series (cluster state)")
        ksm = PrometheusKsmSource(source, cluster=cc.name, settings=cc.read, scrape_interval_s=step_s)
        ksm_series = ksm.raw_series(at=when, range_s=window_s + AVG_LOOKBACK_S, chunk_s=chunk_s, progress=progress)
        if cluster_json is not None or cluster_state_mode(cc) != "kube-state-metrics":
            progress("reading cluster state")
            kube = _cluster_objects(cluster_json, cc, progress)
    except SOURCE_ERRORS as exc:
        fail_source(exc)
    except (SourceAuthError, PermanentError) as exc:
        fail(str(exc))
    if not any(s.values for s in series if s.name.startswith(("DCGM_", "dcgm_"))):
        fail(f"no GPU samples in Prometheus between {when - timedelta(seconds=window_s + AVG_LOOKBACK_S):%Y-%m-%d %H:%M} "
             f"and {when:%Y-%m-%d %H:%M} UTC: nothing recorded (an empty recording scans as nothing). Pick an --at "
             "inside the data, and check with `gpuwaste doctor` that dcgm-exporter's series are in this Prometheus.")
    ksm_pods = sum(1 for s in ksm_series if s.name == "kube_pod_info")
    if kube is None and not ksm_pods:
        err.print("[yellow]warning:[/] no kube-state-metrics pod series and no Kubernetes access: the recording has no cluster "
                  "state (run `gpuwaste doctor`, or pass --cluster-json FILE / --kubeconfig)", highlight=False)
    buf = io.StringIO()
    types = {name: spec.kind for spec in PLAN for name in spec.names} | dict.fromkeys(KSM_METRICS, "gauge")
    write_openmetrics([*series, *ksm_series], buf, types=types)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "telemetry.om.gz").write_bytes(gzip.compress(buf.getvalue().encode(), compresslevel=6, mtime=0))
    if kube is not None:
        (tmp / "cluster.json").write_text(json.dumps(kube, indent=1, sort_keys=True) + "\n")
    meta = {
        "cluster": cc.name,
        "eval_time": when.isoformat(),
        "window_s": window_s,
        "scrape_interval_s": step_s,
        "format": "openmetrics",
        "generator": {"tool": "gpuwaste record", "prometheus": source.url, "chunk_s": chunk_s},
    }
    (tmp / "recording.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    samples = sum(len(s.values) for s in series)
    cluster = f"{len(kube.get('items', []))} cluster objects" if kube is not None else "no cluster.json"
    err.print(f"wrote {out_dir}: {len(series)} series, {samples} samples, {cluster}, {len(ksm_series)} kube-state-metrics series "
              f"({ksm_pods} pods)", highlight=False)
