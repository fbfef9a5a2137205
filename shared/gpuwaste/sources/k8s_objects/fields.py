"""The fields every Kubernetes object parser reads: resource names, quantities, times, metadata and annotations.

Which resource names are GPUs (`is_gpu_resource`), which pods matter to a GPU scan (`is_gpu_relevant_pod`), the
effective request rule (`effective_requests`), CPU quantities, and the annotations never kept.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpuwaste.errors import InputFormatError

_EXPORTER_RE = re.compile(r"dcgm-exporter")


# Annotations never kept: kubectl's copy of the whole applied manifest (it can hold plain-text env values and
# be up to 256 KiB, which would ride along in every queue message, lifecycle record and alert of the pod).
DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})


def _annotations(meta: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (meta.get("annotations") or {}).items() if k not in DROPPED_ANNOTATIONS}


def is_gpu_resource(name: str, patterns: Iterable[str]) -> bool:
    """True when a resource name matches one of the GPU resource patterns."""
    return _matches_any(name, patterns if isinstance(patterns, tuple) else tuple(patterns))


@functools.lru_cache(maxsize=4096)
def _matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    # a cluster has a handful of resource names and one pattern set: remembered, not matched again per container
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


#: Resources that size a GPU share without being GPUs (HAMi: percent of SMs, MiB or percent of memory; B27).
SHARE_RESOURCES = ("nvidia.com/gpucores", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage")
#: Pod annotations / labels that ask for a GPU share without any GPU request (KAI/Run:ai fractions, B28; HAMi, B27).
SHARE_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
SHARE_ANNOTATION_PREFIXES = ("hami.io/",)
SHARE_LABELS = ("runai-gpu-group",)
#: DRA object kinds read from `resource.k8s.io` (v1; v1beta1/v1beta2 read the same way).
DRA_KINDS = ("ResourceClaim", "ResourceSlice", "DeviceClass")


def is_gpu_relevant_pod(obj: Mapping[str, Any], patterns: Iterable[str]) -> bool:
    """True for a pod JSON object that may hold a GPU: a GPU or GPU-share resource in any container, a DRA
    `spec.resourceClaims` entry, or a fraction/HAMi annotation or KAI group label."""
    patterns = tuple(patterns)
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return False
    if spec.get("resourceClaims"):
        return True
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, Mapping) and any(
        k in SHARE_ANNOTATIONS or str(k).startswith(SHARE_ANNOTATION_PREFIXES) for k in annotations
    ):
        return True
    labels = meta.get("labels") or {}
    if isinstance(labels, Mapping) and any(k in SHARE_LABELS for k in labels):
        return True
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = (container or {}).get("resources") or {} if isinstance(container, Mapping) else {}
        for section in ("limits", "requests"):
            for key in resources.get(section) or {}:
                if is_gpu_resource(str(key), patterns) or str(key) in SHARE_RESOURCES:
                    return True
    return False


def _ts(value: Any, where: str) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise InputFormatError(f"{where}: not an RFC 3339 time: {value!r}") from exc


def _int_quantity(value: Any, where: str) -> int:
    try:
        text = str(value).strip()
        if text.endswith("k"):
            return int(text[:-1]) * 1000
        return int(float(text))
    except (TypeError, ValueError) as exc:
        raise InputFormatError(f"{where}: GPU quantity must be an integer, got {value!r}") from exc


def effective_requests(app: Iterable[Mapping[str, int]], init: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Effective request per resource of a pod from its containers' requests (each already "limits first, else
    requests"): max(largest init container, sum of app containers); resources whose effective request is 0 dropped.
    The one rule for the API, recordings and kube-state-metrics."""
    total: dict[str, int] = {}
    for c in app:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    init_max: dict[str, int] = {}
    for c in init:
        for k, v in c.items():
            init_max[k] = max(init_max.get(k, 0), v)
    eff = {k: max(total.get(k, 0), init_max.get(k, 0)) for k in {*total, *init_max}}
    return {k: v for k, v in eff.items() if v > 0}


def _gpu_requests(spec: Mapping[str, Any], patterns: tuple[str, ...], where: str) -> dict[str, int]:
    def per_container(c: Mapping[str, Any], idx: str) -> dict[str, int]:
        res = c.get("resources") or {}
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        out: dict[str, int] = {}
        for name in {*limits, *requests}:
            if is_gpu_resource(name, patterns):
                raw = limits.get(name, requests.get(name))
                out[name] = _int_quantity(raw, f"{where}.{idx}.resources[{name!r}]")
        return out

    return effective_requests((per_container(c, f"spec.containers[{i}]") for i, c in enumerate(spec.get("containers") or [])),
                              (per_container(c, f"spec.initContainers[{i}]") for i, c in enumerate(spec.get("initContainers") or [])))


def cpu_cores(quantity: Any) -> float | None:
    """A Kubernetes CPU quantity ("2", "1.5", "500m") in cores; None when absent or unreadable."""
    if quantity in (None, ""):
        return None
    text = str(quantity).strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None


def _cpu_limit(containers: Any) -> float | None:
    """Sum of the app containers' CPU limits (cores); None when any container is unlimited."""
    total = 0.0
    for c in containers if isinstance(containers, list) else []:
        limit = cpu_cores(((c or {}).get("resources") or {}).get("limits", {}).get("cpu")) if isinstance(c, Mapping) else None
        if limit is None:
            return None
        total += limit
    return total or None


def _meta(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise InputFormatError(f"{kind} object without metadata.name")
    return meta
