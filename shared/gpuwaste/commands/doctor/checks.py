"""`gpuwaste doctor`'s checks: a table (`CHECKS`) of small functions over one probed Prometheus.

Each check is a `Check`: its name, what it reads, and a function `(Probe) -> list[CheckRow]` whose rows carry the
verdict (status, what was seen) and the advice (what to do, where the public documentation is). `Probe` asks the
Prometheus once per question and shares the answers between checks. Add a check by writing its function and
listing it in `CHECKS`, in the order its rows should come.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuwaste.commands.doctor.ksm import KsmStatus, probe_ksm
from gpuwaste.commands.doctor.report import (
    CLOUD_GPU_METRICS,
    DOCS,
    HISTORY_S,
    CheckRow,
    DoctorReport,
    dcgm_never_seen,
    diagnose,
    probe_names,
)
from gpuwaste.models.signals import Signal

if TYPE_CHECKING:
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

#: The label checks' names (`LABEL_CHECKS`) that the workload-label and cluster-state checks read.
POD_LABEL = "DCGM series with pod label"
EXPORTED_POD_LABEL = "DCGM series with exported_pod label (scraped with honorLabels: false)"
#: Label check → PromQL counting the DCGM series that carry it.
LABEL_CHECKS: dict[str, str] = {
    POD_LABEL: 'count({__name__=~"DCGM_FI_.*", pod!="", namespace!=""})',
    EXPORTED_POD_LABEL: 'count({__name__=~"DCGM_FI_.*", exported_pod!=""})',
    "MIG instance series (GPU_I_ID)": 'count({__name__=~"DCGM_FI_.*", GPU_I_ID!=""})',
    "DCGM series with lower-case hostname (dcgm-exporter 4.x renamed Hostname)":
        'count({__name__=~"DCGM_FI_.*", hostname!=""})',
}
#: The check row that says dcgm-exporter is not scraped at all (`check_dcgm_scraped`).
NOT_SCRAPED = "dcgm-exporter"
#: PromQL: scrape targets that look like dcgm-exporter (its job, service or pod name), up or down.
DCGM_TARGETS = 'count(up{job=~".*dcgm.*"} or up{service=~".*dcgm.*"} or up{pod=~".*dcgm.*"})'
#: The check row that says no cluster state can be read from this Prometheus (`check_ksm`).
NO_CLUSTER_STATE = "cluster state"
#: The KSM series a scan's pods and nodes come from: none of them in `HISTORY_S` = no cluster state (`check_ksm`).
KSM_CLUSTER_SERIES = ("kube_pod_info", "kube_pod_status_phase", "kube_node_info", "kube_node_labels")
#: The activity signals (any of them exported: DCGM telemetry is read, not a cloud's own GPU metrics).
_ACTIVITY = (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL)


def _count(result: list[dict[str, Any]]) -> int:
    """The value of a `count(...)` instant query (0 when it returned nothing)."""
    return int(float(result[0]["value"][1])) if result else 0


class Probe:
    """What the checks read: one Prometheus at one time (answers cached, so checks can share them)."""

    def __init__(self, source: PrometheusGpuMetricsSource, at: datetime | None, *, strict: bool = False) -> None:
        """Probe `source` at `at` (None: the server's now); `strict`: every detector's signals are needed."""
        self.source = source
        self.at = at
        self.strict = strict
        self._report: DoctorReport | None = None
        self._labels: dict[str, int] | None = None
        self.ksm: KsmStatus | None = None
        self.aliases: dict[str, tuple[str, ...]] = {}  # probed metric → every name it is read under (`counts`)
        self.raw_counts: dict[str, int] = {}  # series per name, each alias apart (`counts`)

    def count(self, query: str, what: str) -> int:
        """The value of one `count(...)` query at the probe time (0 when it returned nothing)."""
        return _count(self.source.instant_query(query, at=self.at, what=what))

    def counts(self) -> dict[str, int]:
        """Series per probed metric at the probe time (aliases of one signal counted together)."""
        from gpuwaste.sources.metrics_plan import spec_for

        aliases = {n: (spec.names if (spec := spec_for(n)) else (n,)) for n in probe_names()}
        raw = self.source.probe([a for names in aliases.values() for a in names], at=self.at)
        self.aliases = aliases
        self.raw_counts = raw
        return {n: sum(raw.get(a, 0) for a in names) for n, names in aliases.items()}  # DCGM 4.6 / 1.x names count too

    def newest(self, names: list[str]) -> dict[str, datetime]:
        """The newest sample time of each metric in the last HISTORY_S (only metrics that have one)."""
        found: dict[str, datetime] = {}
        for name in names:
            selector = "|".join(self.aliases.get(name, (name,)))
            query = f'max(max_over_time(timestamp({{__name__=~"{selector}"}})[{HISTORY_S}s:5m]))'
            result = self.source.instant_query(query, at=self.at, what="doctor newest sample")
            if result:
                found[name] = datetime.fromtimestamp(float(result[0]["value"][1]), tz=UTC)
        return found

    def labels(self) -> dict[str, int]:
        """Series per label check (LABEL_CHECKS)."""
        if self._labels is None:
            self._labels = {label: self.count(query, "doctor label") for label, query in LABEL_CHECKS.items()}
        return self._labels

    def report(self) -> DoctorReport:
        """The signal diagnosis (probed once)."""
        if self._report is None:
            counts = self.counts()
            missing = [n for n, c in counts.items() if c == 0]
            at = self.at if self.at is not None else datetime.now(UTC)
            self._report = diagnose(counts, self.labels(), newest=self.newest(missing), at=at, strict=self.strict)
        return self._report


# -- the checks ------------------------------------------------------------------------------------------------------
def check_dcgm_scraped(probe: Probe) -> list[CheckRow]:
    """One row, first, when no DCGM series exists at all (none when DCGM series exist).

    dcgm-exporter is not scraped (no target), or its targets are scraped and export no DCGM field; what to do
    for each.
    """
    if not dcgm_never_seen(probe.report()):
        return []
    targets = probe.count(DCGM_TARGETS, "doctor dcgm targets")
    days = HISTORY_S // 86400
    if targets:
        plural = "s" if targets != 1 else ""
        return [CheckRow(NOT_SCRAPED, "fail", f"dcgm-exporter is scraped ({targets} target{plural}) but exported"
                         f" no DCGM series in the last {days} days, so no GPU can be judged",
                         "check the exporter's log and its counters CSV (kubectl logs -A -l "
                         "app=nvidia-dcgm-exporter), and that the targets are up on Prometheus's /targets page",
                         DOCS["dcgm-exporter"], 1)]
    return [CheckRow(NOT_SCRAPED, "fail", f"dcgm-exporter is not scraped by this Prometheus at all: no DCGM series in "
                     f"the last {days} days and no dcgm-exporter scrape target, so no GPU can be judged",
                     "deploy dcgm-exporter (the NVIDIA GPU Operator runs it by default) and have this Prometheus "
                     "scrape it: Helm value dcgmExporter.serviceMonitor.enabled=true (GPU Operator) or "
                     "serviceMonitor.enabled=true (dcgm-exporter chart), or a scrape job for its port 9400; then run "
                     "gpuwaste doctor again",
                     DOCS["dcgm-exporter"], 1)]


def check_signals(probe: Probe) -> list[CheckRow]:
    """The signal check: series counts now, and the newest sample of those not current (stale vs never)."""
    return probe.report().checks


def check_labels(probe: Probe) -> list[CheckRow]:
    """The label checks: which label carries the workload on DCGM series (pod, or exported_pod)."""
    labels = probe.labels()
    pod = labels.get(POD_LABEL, 0)
    exported = labels.get(EXPORTED_POD_LABEL, 0)
    if pod == 0 and exported == 0:
        return [CheckRow("workload labels", "warn", "no DCGM series carries a pod label: GPUs are tied to pods only "
                         "where a node has one GPU pod", "enable the pod mapping of dcgm-exporter "
                         "(DCGM_EXPORTER_KUBERNETES=true, the default in the GPU Operator)", DOCS["dcgm-exporter"])]
    if exported and not pod:
        return [CheckRow("workload labels", "ok", f"{exported} series carry exported_pod (read automatically)",
                         "", DOCS["honor-labels"])]
    return [CheckRow("workload labels", "ok", f"{pod} series carry pod and namespace")]


def check_dcgm_names(probe: Probe) -> list[CheckRow]:
    """Which name each DCGM field is exported under, and a warning for a field exported under two names at once.

    DCGM 3.x, 4.x, 1.x or lower-cased names (`models.telemetry.DCGM_ALIASES`); two names at once means a second
    counters CSV: every sample stored twice.
    """
    probe.report()
    raw, aliases = probe.raw_counts, probe.aliases
    renamed: list[str] = []
    doubled: list[str] = []
    for canonical, names in aliases.items():
        if not canonical.startswith("DCGM_FI_"):
            continue
        used = [n for n in names if raw.get(n, 0) > 0]
        if len({n.lower() for n in used}) > 1:
            doubled.append(f"{canonical} as {' and '.join(used)}")
        elif used and used[0].lower() != canonical.lower():
            renamed.append(f"{used[0]} (read as {canonical})")
    rows = []
    if doubled:
        rows.append(CheckRow("DCGM field names", "warn", "exported under two names at once: " + "; ".join(doubled)
                             + " (gpuwaste reads the copies as one GPU's; Prometheus stores every sample twice)",
                             "keep one row per field in the dcgm-exporter counters CSV", DOCS["dcgm-exporter"]))
    if renamed:
        rows.append(CheckRow("DCGM field names", "ok", "other names read: " + ", ".join(renamed)))
    return rows


def check_cloud_gpu_metrics(probe: Probe) -> list[CheckRow]:
    """A cloud's own GPU metrics (`CLOUD_GPU_METRICS`) in the Prometheus.

    With no DCGM activity field: say that they are read as a lower-confidence idle signal only and recommend
    DCGM; beside DCGM: that DCGM is the one read.
    """
    probe.report()  # probes the signals once
    dcgm = sum(probe.raw_counts.get(n, 0) for s in _ACTIVITY for n in probe.aliases.get(s.value, (s.value,)))
    rows = []
    for family, names in CLOUD_GPU_METRICS.items():
        found = probe.count("count({__name__=~\"" + "|".join(names) + "\"})", f"doctor {family}")
        if not found:
            continue
        if dcgm:
            rows.append(CheckRow("cloud GPU metrics", "ok", f"{found} {family} series ({', '.join(names)}) beside "
                                 "DCGM: the DCGM fields are read"))
        else:
            rows.append(CheckRow("cloud GPU metrics", "warn", f"{found} {family} series ({', '.join(names)}) but no "
                                 "DCGM activity field: the duty cycle is read as a lower-confidence idle signal only "
                                 "(managed_gpu_idle, LOW confidence: sampled once a minute, no SM, tensor, power or "
                                 "memory-bandwidth profile; missing or stale is never idle)",
                                 "deploy dcgm-exporter or enable the cloud's managed DCGM metrics", DOCS["gke-dcgm"]))
    return rows


def check_ksm(probe: Probe) -> list[CheckRow]:
    """The kube-state-metrics check: can a Prometheus-only scan (no Kubernetes access) tie GPUs to pods?

    A warning where some series are missing (with Kubernetes API access the scan does not need them); a failure
    (exit 1, `NO_CLUSTER_STATE`, named in the verdict line) where DCGM series exist but no kube-state-metrics series
    at all: a scan of this Prometheus alone then judges nothing ("nothing judged: no cluster state"), whether or not
    the DCGM series carry pod labels (pods and nodes come from kube-state-metrics or the Kubernetes API).
    """
    probe.ksm = status = probe_ksm(probe.source, probe.at)
    # stale KSM (series in HISTORY_S) is the warning below
    if (not any(status.series.values()) and not dcgm_never_seen(probe.report())
            and not probe.newest(["|".join(KSM_CLUSTER_SERIES)])):
        return [_no_cluster_state(probe.labels())]
    renamed = probe.count('count(kube_pod_info{exported_pod!=""})', "doctor KSM labels")
    family = []
    if renamed > 0:
        family = [CheckRow("kube-state-metrics labels", "ok", f"{renamed} kube_pod_info series name their pod in "
                           "exported_namespace/exported_pod (KSM scraped with honorLabels: false; namespace/pod name "
                           "the KSM pod): read automatically", "", DOCS["honor-labels"])]
    if status.usable and not status.missing:
        return [CheckRow("kube-state-metrics", "ok", "pods, phases, GPU requests, owners and node labels are exported"),
                *family]
    detail = ("a Prometheus-only scan can tie GPUs to pods, but " if status.usable
              else "a Prometheus-only scan cannot tie GPUs to pods: ") + (
        "missing " + ", ".join(sorted(status.missing)) if status.missing else "some allow-listed labels are missing")
    return [CheckRow("kube-state-metrics", "warn", detail, "apply the kube-state-metrics Helm values printed below "
                     "(or give gpuwaste Kubernetes API access)", DOCS.get("kube-state-metrics", "")), *family]


def _no_cluster_state(labels: dict[str, int]) -> CheckRow:
    """The failure row where DCGM series exist and no kube-state-metrics series at all (`NO_CLUSTER_STATE`)."""
    pods = labels.get(POD_LABEL, 0) + labels.get(EXPORTED_POD_LABEL, 0)
    detail = ("no cluster state can be read from this Prometheus: no kube-state-metrics series and "
              + ("no pod labels on the DCGM series" if not pods else "only pod labels on the DCGM series (no nodes, "
                 "phases or GPU requests)")
              + ", so a scan of this Prometheus alone judges nothing: give the scan --kubeconfig, or "
              "kube-state-metrics in this Prometheus, or --cluster-json FILE")
    return CheckRow(NO_CLUSTER_STATE, "fail", detail,
                    "give the scan --kubeconfig (Kubernetes API access), or install kube-state-metrics scraped by "
                    "this Prometheus (Helm values below), or pass --cluster-json FILE (`kubectl get pods,nodes -A "
                    "-o json`)", DOCS["kube-state-metrics"], 1)


# -- attribution coverage: GPUs requested by running pods that DCGM ties to them (issue 21 §12) ----------------------
_GPU_ASKED = ('sum by (namespace, pod) (max by (namespace, pod, container, resource) ({__name__=~"kube_pod_container_'
              'resource_(limits|requests)", resource=~"nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"}))'
              ' and on (namespace, pod) (kube_pod_status_phase{phase="Running"} == 1)')
_DCGM_PODS = ('(count by (namespace, pod) ({__name__=~"DCGM_FI_.*", pod!="", namespace!=""}) or count by (namespace, '
              'pod) (label_replace(label_replace({__name__=~"DCGM_FI_.*", exported_pod!=""}, "pod", "$1", '
              '"exported_pod", "(.+)"), "namespace", "$1", "exported_namespace", "(.+)")))')
#: PromQL: GPUs requested by running pods (kube-state-metrics), and those of pods some DCGM series names.
COVERAGE_QUERIES: dict[str, str] = {
    "requested": f"sum({_GPU_ASKED})",
    "attributed": f"sum(({_GPU_ASKED}) and on (namespace, pod) {_DCGM_PODS})",
}
#: Under this share of requested GPUs with DCGM series naming their pod, the coverage check warns.
COVERAGE_WARN = 0.9


def check_coverage(probe: Probe) -> list[CheckRow]:
    """The attribution coverage now: the share of GPUs requested by running pods whose pod some DCGM series names.

    Requests from kube-state-metrics; the pod named by `pod`, or `exported_pod` — the figure `gpuwaste scan`
    reports over its window. No row without kube-state-metrics GPU requests.
    """
    got: dict[str, float] = {}
    for name, query in COVERAGE_QUERIES.items():
        result = probe.source.instant_query(query, at=probe.at, what="doctor attribution coverage")
        got[name] = float(result[0]["value"][1]) if result else 0.0
    requested, attributed = got["requested"], got["attributed"]
    if requested <= 0:
        return []
    ratio = min(1.0, attributed / requested)
    unattributed = f" ({requested - attributed:g} GPUs allocated without attributable telemetry)"
    detail = (f"{ratio:.0%} of {requested:g} GPUs requested by running pods have DCGM series naming their pod"
              + ("" if ratio >= COVERAGE_WARN else unattributed))
    if ratio >= COVERAGE_WARN:
        return [CheckRow("attribution coverage", "ok", detail)]
    return [CheckRow("attribution coverage", "warn", detail,
                     "check the dcgm-exporter pod mapping on the nodes of those pods (DCGM_EXPORTER_KUBERNETES=true, "
                     "the pod-resources socket mounted; after a GPU Operator upgrade, its MIG/DRA mapping), and that "
                     "every GPU node runs dcgm-exporter", DOCS["dcgm-exporter"])]


@dataclass(frozen=True)
class Check:
    """One of the doctor's checks.

    Attributes:
        name: what it checks. needs: what it reads from the Prometheus. run: the check itself; its rows carry the
            verdict (status, detail, exit code) and the advice (fix, documentation link).
    """

    name: str
    needs: str
    run: Callable[[Probe], list[CheckRow]]


_DAYS = HISTORY_S // 86400
#: The doctor's checks, in the order their rows are listed.
CHECKS: tuple[Check, ...] = (
    Check("dcgm-exporter scraped", f"DCGM series in the last {_DAYS} days, dcgm-exporter scrape targets",
          check_dcgm_scraped),
    Check("signals", f"every signal a detector declares: series now, newest sample in the last {_DAYS} days",
          check_signals),
    Check("workload labels", "pod / exported_pod labels on DCGM series", check_labels),
    Check("DCGM field names", "every name each DCGM field is read under", check_dcgm_names),
    Check("cloud GPU metrics", "a cloud's own GPU metric families (GKE system metrics)", check_cloud_gpu_metrics),
    Check("kube-state-metrics", "the KSM series and allow-listed labels the cluster state reads", check_ksm),
    Check("attribution coverage", "KSM GPU requests of running pods, DCGM series naming those pods", check_coverage),
)
