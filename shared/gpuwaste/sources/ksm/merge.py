"""The merge with the API: `ApiWithKsmHistory` and `merge_states`.

The Kubernetes API for what exists now, KSM for what happened in the window.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from gpuwaste.models.cluster import ClusterState


# -- the API now, KSM for the window's history ------------------------------------------------------------------
class ApiWithKsmHistory:
    """`ClusterStateSource`: the Kubernetes API for what exists now, KSM for what happened in the window.

    The API's pods, nodes and owners win. From KSM come the pods the API no longer lists (finished and deleted in
    the window: their GPUs were held until `finished_at`/`gone_at`), start/finish times the API lacks, and the
    nodes the API no longer lists. Where both know a pod and disagree (node, phase, GPU requests), or one knows a
    holding pod the other does not, a data-quality note says so. KSM failing costs the history, not the scan.
    """

    def __init__(self, api: Any | None, ksm: Any, *, max_listed: int = 5, api_optional: bool = False, api_error: str = "") -> None:
        """
        Args:
            api: the Kubernetes source; None when it could not be built (`api_error` says why).
            api_optional: when the API cannot be read (unreachable, credentials refused, no kubeconfig), use KSM
                alone and say so in a note, instead of failing the scan ("auto" mode).
        """
        self.api = api
        self.ksm = ksm
        self.max_listed = max_listed
        self.api_optional = api_optional
        self.api_error = api_error

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """Read both and merge them.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError, InputFormatError: from the API read (unless
                `api_optional`), or from KSM when the API is not there.
        """
        from gpuwaste.errors import GpuWasteError  # noqa: PLC0415

        error = self.api_error
        now: ClusterState | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ksm-history") as pool:
            later = pool.submit(self.ksm.cluster_state, at=at)  # both reads wait on the network: overlap them
            if self.api is not None:
                try:
                    now = self.api.cluster_state(at=at)
                except GpuWasteError as exc:
                    if not self.api_optional:
                        later.cancel()
                        raise
                    error = str(exc)
            if now is None:
                state: ClusterState = later.result()
                note = f"Kubernetes API not used ({error}): cluster state from kube-state-metrics only"
                return state.model_copy(update={"notes": (note, *state.notes)})
            try:
                history: ClusterState = later.result()
            except GpuWasteError as exc:
                note = f"kube-state-metrics history unavailable ({exc}); pods that ended in the window are not seen"
                return now.model_copy(update={"notes": (*now.notes, note)})
        return merge_states(now, history, max_listed=self.max_listed)


def merge_states(now: ClusterState, history: ClusterState, *, max_listed: int = 5) -> ClusterState:
    """Merge an API read (`now`) with a KSM read over the window (`history`); see `ApiWithKsmHistory`."""
    by_key = {p.key: p for p in history.pods}
    pods = []
    disagree: list[str] = []
    for p in now.pods:
        k = by_key.pop(p.key, None)
        if k is None:
            if p.holds_gpus and history.pods:
                disagree.append(f"{p.namespace}/{p.name} holds GPUs per the API but has no KSM series")
            pods.append(p)
            continue
        fill = {f: getattr(k, f) for f in ("started_at", "finished_at", "created_at") if getattr(p, f) is None and getattr(k, f) is not None}
        pods.append(p.model_copy(update=fill) if fill else p)
        what = []
        if (p.node_name or "") != (k.node_name or ""):
            what.append(f"node {p.node_name or 'none'} (API) vs {k.node_name or 'none'} (KSM)")
        if p.phase != k.phase and k.gone_at is None:
            what.append(f"phase {p.phase.value} (API) vs {k.phase.value} (KSM)")
        if p.gpu_requests != k.gpu_requests:
            what.append(f"GPU requests {p.gpu_requests} (API) vs {k.gpu_requests} (KSM)")
        if what:
            disagree.append(f"{p.namespace}/{p.name}: " + ", ".join(what))
    ended = []
    for k in by_key.values():
        if k.gone_at is not None or not k.holds_gpus:
            ended.append(k)  # finished or deleted in the window: history the API cannot give
        else:
            disagree.append(f"{k.namespace}/{k.name} holds GPUs per KSM but the API does not list it")
    nodes = list(now.nodes)
    known = {n.name for n in now.nodes}
    extra_nodes = [n for n in history.nodes if n.name not in known]
    notes = list(now.notes)
    if disagree:
        shown = "; ".join(disagree[:max_listed]) + (f"; and {len(disagree) - max_listed} more" if len(disagree) > max_listed else "")
        notes.append(f"Kubernetes API and kube-state-metrics disagree on {len(disagree)} pod(s) (the API is used): {shown}")
    if extra_nodes:
        notes.append(f"{len(extra_nodes)} node(s) seen by kube-state-metrics in the window are gone from the API: "
                     + ", ".join(sorted(n.name for n in extra_nodes)[:max_listed]))
    return now.model_copy(update={
        "pods": tuple(pods + ended),
        "nodes": tuple(nodes + extra_nodes),
        "exporter_pods": {**history.exporter_pods, **now.exporter_pods},
        "exporter_pod_ips": {**history.exporter_pod_ips, **now.exporter_pod_ips},
        "source": f"{now.source} (now) + {history.source} (history over the window)",
        "notes": tuple(notes),
        "query_count": now.query_count + history.query_count,
    })
