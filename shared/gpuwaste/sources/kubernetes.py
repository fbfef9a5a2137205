"""Adapter: the Kubernetes API (official client, read-only) → `ClusterState`.

Lists pods, nodes, namespaces and the controller kinds (ReplicaSet, Deployment, StatefulSet,
DaemonSet, Job, CronJob), and the Dynamic Resource Allocation objects (ResourceClaim, ResourceSlice,
DeviceClass of `resource.k8s.io`: v1, else v1beta2, else v1beta1, whichever the server serves; field guide
B25) page by page (`limit` + `continue`), asks the client for the raw JSON
(`_preload_content=False`) and builds the state with `sources.k8s_objects`, the same parser the
recordings use, so a live scan and a `kubectl get -o json` recording give the same answer.

The API cannot select pods by extended resource (`nvidia.com/gpu` is not a selectable field), so every
pod is listed; each page is filtered to GPU pods (and dcgm-exporter pods) before the next is read,
so memory holds one page plus the GPU pods. Controllers are kept as name + owner references only.
A cluster without DRA (404 for every version) has no claims; a service account not granted the DRA kinds
(403) still scans, with a warning, and the DRA resolver names the missing RBAC for pods that use claims.

Access modes: a kubeconfig file and context, the in-cluster service account, or EKS with a bearer
token signed from the caller's IAM credentials (`sources.eks_token`) and renewed before it expires.
The adapter only reads: the RBAC it needs is in deploy/rbac.yaml.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpuwaste.errors import (
    ConfigError,
    GpuWasteError,
    SourceAnswerError,
    SourceAuthError,
    SourceUnavailableError,
)
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.settings import ClusterReadSettings, KubernetesSettings
from gpuwaste.sources.eks_token import EksTokenProvider
from gpuwaste.sources.k8s_objects import CONTROLLER_KINDS, cluster_state_from_objects, is_gpu_relevant_pod

if TYPE_CHECKING:
    import boto3

logger = logging.getLogger(__name__)

RBAC_HINT = "grant read access with deploy/rbac.yaml (ClusterRole gpuwaste-reader; on EKS see deploy/eks-access-entry.md)"
_EKS_REGION = re.compile(r"\.(?P<region>[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d)\.eks\.amazonaws\.com")


@dataclass(frozen=True)
class _ListSpec:
    """One collection to list: the client method names and how to describe it in errors."""

    plural: str
    kind: str
    group: str  # "" for the core group
    version: str
    api: str  # "core" | "apps" | "batch"
    all_namespaces: str  # client method for the cluster-wide list
    namespaced: str | None  # client method for one namespace (None: cluster-scoped kind)
    optional: bool = False  # 403/404 mean "not served / not granted", not a failed scan (DRA kinds)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


LISTS: tuple[_ListSpec, ...] = (
    _ListSpec("pods", "Pod", "", "v1", "core", "list_pod_for_all_namespaces", "list_namespaced_pod"),
    _ListSpec("nodes", "Node", "", "v1", "core", "list_node", None),
    _ListSpec("namespaces", "Namespace", "", "v1", "core", "list_namespace", None),
    _ListSpec("replicasets", "ReplicaSet", "apps", "v1", "apps", "list_replica_set_for_all_namespaces", "list_namespaced_replica_set"),
    _ListSpec("deployments", "Deployment", "apps", "v1", "apps", "list_deployment_for_all_namespaces", "list_namespaced_deployment"),
    _ListSpec("statefulsets", "StatefulSet", "apps", "v1", "apps", "list_stateful_set_for_all_namespaces", "list_namespaced_stateful_set"),
    _ListSpec("daemonsets", "DaemonSet", "apps", "v1", "apps", "list_daemon_set_for_all_namespaces", "list_namespaced_daemon_set"),
    _ListSpec("jobs", "Job", "batch", "v1", "batch", "list_job_for_all_namespaces", "list_namespaced_job"),
    _ListSpec("cronjobs", "CronJob", "batch", "v1", "batch", "list_cron_job_for_all_namespaces", "list_namespaced_cron_job"),
)


#: DRA kinds per `resource.k8s.io` version, preferred first (GA v1 since Kubernetes 1.34).
DRA_VERSIONS: tuple[tuple[str, str], ...] = (("v1", "ResourceV1Api"), ("v1beta2", "ResourceV1beta2Api"), ("v1beta1", "ResourceV1beta1Api"))


def _dra_lists(version: str, api: str) -> tuple[_ListSpec, ...]:
    return (
        _ListSpec("resourceclaims", "ResourceClaim", "resource.k8s.io", version, api,
                  "list_resource_claim_for_all_namespaces", "list_namespaced_resource_claim", optional=True),
        _ListSpec("resourceslices", "ResourceSlice", "resource.k8s.io", version, api, "list_resource_slice", None, optional=True),
        _ListSpec("deviceclasses", "DeviceClass", "resource.k8s.io", version, api, "list_device_class", None, optional=True),
    )


class _ContinueExpired(Exception):  # noqa: N818 - internal control flow: restart the list
    pass


class _NotServed(Exception):  # noqa: N818 - internal control flow: an optional kind is not served (404) or not granted (403)
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def safe_url(url: str) -> str:
    """`url` without user info, query or fragment (safe to log and show)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _retries() -> urllib3.Retry:
    # Connection failures are retried twice, quickly; a read is never repeated, so a slow API server
    # costs at most one timeout per request. 5xx/429 are not retried here: the error is retryable and
    # the queue redelivers the scan.
    return urllib3.Retry(total=2, connect=2, read=0, status=0, redirect=0, backoff_factor=0.2, raise_on_status=False)


def _ca_file(ca_data: str) -> str:
    """Write the base64 CA bundle to a content-addressed temp file (reused across warm invocations).

    Raises:
        ConfigError: when `ca_data` is not base64.
    """
    try:
        pem = base64.b64decode(ca_data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError("kubernetes.ca_data: not valid base64 (use certificateAuthority.data from aws eks describe-cluster)") from exc
    path = Path(tempfile.gettempdir()) / f"gpuwaste-ca-{hashlib.sha256(pem).hexdigest()[:16]}.crt"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".gpuwaste-ca-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        Path(tmp).replace(path)
    return str(path)


def _eks_region(settings: KubernetesSettings, session: boto3.session.Session | None) -> str:
    if settings.eks_region:
        return settings.eks_region
    match = _EKS_REGION.search(settings.server or "")
    if match:
        return match.group("region")
    if session is not None and session.region_name:
        return str(session.region_name)
    raise ConfigError("kubernetes.eks_region: required when the server URL does not name the region")


def _is_relevant_pod(obj: Mapping[str, Any], patterns: tuple[str, ...], exporter: re.Pattern[str]) -> bool:
    """True for pods that may hold a GPU (GPU or share resources, DRA claims, fraction annotations) and for
    GPU exporter pods."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    if exporter.search(name):
        return True
    return is_gpu_relevant_pod(obj, patterns)


def _owner_only(obj: Mapping[str, Any], spec: _ListSpec) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "ownerReferences") if k in meta}
    return {"apiVersion": spec.api_version, "kind": spec.kind, "metadata": kept}


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or "no message")


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    inner = reason if isinstance(reason, BaseException) else exc
    text = str(inner)
    if ">: " in text:  # urllib3 prefixes "<HTTPConnection object at 0x…>: "
        text = text.split(">: ", 1)[1]
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__


class KubernetesClusterSource:
    """`ClusterStateSource` over the Kubernetes API (read-only).

    Args:
        api_client: a configured `kubernetes.client.ApiClient` (see `from_settings`).
        cluster: the cluster's name in findings.
        read: what counts as a GPU resource and as an exporter pod; `read.namespace` limits pods and
            controllers to one namespace.
        page_size: items per list request (`limit`).
        timeout_s: timeout of each request (seconds).
        progress: called with a short line after each page (long lists on big clusters).
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        cluster: str,
        read: ClusterReadSettings | None = None,
        page_size: int = 500,
        timeout_s: float = 30.0,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.api_client = api_client
        self.cluster = cluster
        self.read = read or ClusterReadSettings()
        self.page_size = page_size
        self.timeout_s = timeout_s
        self._progress = progress
        self._apis: dict[str, Any] = {
            "core": k8s_client.CoreV1Api(api_client),
            "apps": k8s_client.AppsV1Api(api_client),
            "batch": k8s_client.BatchV1Api(api_client),
        }
        for _, api_name in DRA_VERSIONS:  # older clients lack some versions: those are skipped
            api_class = getattr(k8s_client, api_name, None)
            if api_class is not None:
                self._apis[api_name] = api_class(api_client)
        self.dra_listed = False
        self.url = safe_url(str(api_client.configuration.host))

    @classmethod
    def from_settings(
        cls,
        settings: KubernetesSettings,
        *,
        cluster: str,
        read: ClusterReadSettings | None = None,
        progress: Callable[[str], None] | None = None,
        session: boto3.session.Session | None = None,
        token_provider: Callable[[], str] | None = None,
    ) -> KubernetesClusterSource:
        """Build the source for a configured cluster without touching the client's global config.

        Args:
            settings: access mode and paging.
            session: boto3 session for "eks" mode (default: a new session from the environment).
            token_provider: "eks" mode only: returns the bearer token (default: an `EksTokenProvider`).

        Raises:
            ConfigError: when the kubeconfig, context or service account cannot be loaded.
        """
        configuration = k8s_client.Configuration()
        try:
            if settings.mode == "kubeconfig":
                k8s_config.load_kube_config(  # type: ignore[no-untyped-call]  # the kubernetes client is unannotated
                    config_file=settings.kubeconfig,
                    context=settings.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            elif settings.mode == "in-cluster":
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                configuration.host = str(settings.server)
                if settings.ca_data:
                    configuration.ssl_ca_cert = _ca_file(settings.ca_data)
                if token_provider is None:
                    import boto3  # noqa: PLC0415 - only "eks" mode needs AWS

                    session = session or boto3.session.Session()
                    token_provider = EksTokenProvider(session, str(settings.eks_cluster_name), _eks_region(settings, session))
                provider = token_provider

                def refresh(config: k8s_client.Configuration) -> None:
                    config.api_key["BearerToken"] = f"Bearer {provider()}"

                configuration.api_key["BearerToken"] = ""  # filled by the hook before every request
                configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]  # the client types it as None
        except (ConfigException, OSError) as exc:
            where = (settings.kubeconfig or "the default kubeconfig") if settings.mode == "kubeconfig" else "its configuration"
            raise ConfigError(f"kubernetes ({settings.mode}): cannot load {where}: {exc}") from exc
        except (TypeError, AttributeError, ValueError) as exc:  # the client's loader on a file that is not a kubeconfig
            where = (settings.kubeconfig or "the default kubeconfig") if settings.mode == "kubeconfig" else "its configuration"
            raise ConfigError(
                f"kubernetes ({settings.mode}): {where} is not a valid kubeconfig ({type(exc).__name__}); "
                "pass --kubeconfig FILE with `clusters`, `users` and `contexts`, or scan a recording"
            ) from exc
        if not settings.verify_tls:
            configuration.verify_ssl = False
        configuration.retries = _retries()
        return cls(
            k8s_client.ApiClient(configuration),
            cluster=cluster,
            read=read,
            page_size=settings.page_size,
            timeout_s=settings.timeout_s,
            progress=progress,
        )

    def close(self) -> None:
        """Release the HTTP connections."""
        self.api_client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> KubernetesClusterSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the port ----------------------------------------------------------------------------------------
    def cluster_state(self, *, at: datetime) -> ClusterState:
        """List the cluster and build its state (`at` is recorded as the observation time).

        Raises:
            SourceUnavailableError: the API could not be reached, timed out, answered 5xx/429, or
                expired a continue token twice in one list.
            SourceAuthError: 401, or 403 naming the verb and resource denied.
            PermanentError: any other 4xx.
            InputFormatError: an object is malformed (names the object and field).
        """
        items, listed = self._collect()
        return cluster_state_from_objects(
            items,
            cluster=self.cluster,
            observed_at=at,
            settings=self.read,
            listed_kinds=listed,
            source=f"kubernetes {self.url}",
        )

    def kube_list(self) -> dict[str, Any]:
        """What the scan reads, as a `kubectl get -o json` List (for `gpuwaste record`).

        Holds the GPU and exporter pods, every node and namespace, and the controllers reduced to
        name and owner references; replayed with `RecordingClusterSource`, it gives the same state.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: as `cluster_state`.
        """
        items, _ = self._collect()
        return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}

    def _collect(self) -> tuple[list[dict[str, Any]], frozenset[str]]:
        """The kept objects of every list, and the controller kinds listed completely."""
        patterns = self.read.gpu_resource_names
        exporter = re.compile(self.read.exporter_pod_pattern)
        items: list[dict[str, Any]] = []
        listed: set[str] = set()
        counts: dict[str, int] = {}
        for spec in LISTS:

            def keep(obj: dict[str, Any], spec: _ListSpec = spec) -> dict[str, Any] | None:
                obj["kind"] = spec.kind  # list items carry no kind/apiVersion on a real API server
                obj["apiVersion"] = spec.api_version
                if spec.kind == "Pod" and not _is_relevant_pod(obj, patterns, exporter):
                    return None
                return _owner_only(obj, spec) if spec.kind in CONTROLLER_KINDS else obj

            kept = self._list(spec, keep)
            items.extend(kept)
            counts[spec.plural] = len(kept)
            if spec.kind in CONTROLLER_KINDS:
                listed.add(spec.kind)
        dra = self._collect_dra()
        items.extend(dra)
        counts["dra"] = len(dra)
        logger.info("kubernetes cluster listed", extra={"cluster": self.cluster, "url": self.url, "kept": counts})
        return items, frozenset(listed)

    def _collect_dra(self) -> list[dict[str, Any]]:
        """ResourceClaims, ResourceSlices and DeviceClasses at the newest `resource.k8s.io` version served.

        Sets `dra_listed` when all three kinds were read (possibly empty). A version the server does not serve
        (404) falls through to the next; a kind the RBAC does not grant (403) is skipped with a warning.
        """
        self.dra_listed = False
        for version, api_name in DRA_VERSIONS:
            if api_name not in self._apis:
                continue
            out: list[dict[str, Any]] = []
            try:
                for spec in _dra_lists(version, api_name):

                    def keep(obj: dict[str, Any], spec: _ListSpec = spec) -> dict[str, Any]:
                        obj["kind"] = spec.kind
                        obj["apiVersion"] = spec.api_version
                        return obj

                    out.extend(self._list(spec, keep))
            except _NotServed as exc:
                if exc.status == 404:
                    continue
                logger.warning(
                    "kubernetes DRA objects not readable; pods holding GPUs through ResourceClaims are judged from the exporter's dra_* labels only",
                    extra={"cluster": self.cluster, "url": self.url, "reason": str(exc), "hint": RBAC_HINT},
                )
                return out
            self.dra_listed = True
            return out
        return []

    # -- listing -----------------------------------------------------------------------------------------
    def _list(self, spec: _ListSpec, keep: Callable[[dict[str, Any]], dict[str, Any] | None]) -> list[dict[str, Any]]:
        """The kept objects of one collection, read page by page.

        `keep` runs on each page as it arrives (it drops non-GPU pods), so memory holds one page plus
        what is kept. A continue token that expired (410) restarts the list once from the first page.
        """
        restarted = False
        while True:
            kept: list[dict[str, Any]] = []
            token: str | None = None
            total = 0
            try:
                while True:
                    doc = self._page(spec, token)
                    page = [o for o in doc.get("items") or [] if isinstance(o, dict)]
                    total += len(page)
                    kept.extend(k for k in map(keep, page) if k is not None)
                    token = (doc.get("metadata") or {}).get("continue") or None
                    del page, doc
                    if self._progress is not None:
                        self._progress(f"{spec.plural}: {total} listed")
                    if not token:
                        return kept
            except _ContinueExpired as exc:
                if restarted:
                    raise SourceUnavailableError(
                        f"Kubernetes API at {self.url}: the continue token of list {spec.resource} expired twice "
                        f"(410 Expired: the list took longer than etcd keeps its snapshot); retry the scan, or raise "
                        f"kubernetes.page_size (now {self.page_size}) so the list needs fewer pages"
                    ) from exc
                restarted = True
                logger.warning("kubernetes continue token expired; restarting the list", extra={"resource": spec.resource})

    def _page(self, spec: _ListSpec, token: str | None) -> dict[str, Any]:
        api = self._apis[spec.api]
        kwargs: dict[str, Any] = {
            "limit": self.page_size,
            "_request_timeout": self.timeout_s,
            "_preload_content": False,
        }
        if token:
            kwargs["_continue"] = token
        namespace = self.read.namespace
        try:
            if spec.kind == "Namespace" and namespace:
                response = api.list_namespace(field_selector=f"metadata.name={namespace}", **kwargs)
            elif namespace and spec.namespaced:
                response = getattr(api, spec.namespaced)(namespace, **kwargs)
            else:
                response = getattr(api, spec.all_namespaces)(**kwargs)
            try:
                data = response.data
            finally:
                response.release_conn()
        except GpuWasteError:
            raise
        except ApiException as exc:
            if exc.status == 410 and token:
                raise _ContinueExpired from exc
            if spec.optional and exc.status in (403, 404):
                raise _NotServed(int(exc.status), f"list {spec.resource}/{spec.version}: HTTP {exc.status}: {_status_message(exc)}") from exc
            raise self._translate(exc, spec) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise SourceUnavailableError(
                f"Kubernetes API at {self.url} unreachable while listing {spec.resource}: {_describe(exc)}"
            ) from exc
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise SourceUnavailableError(f"Kubernetes API at {self.url} answered list {spec.resource} with a body that is not JSON") from exc
        if not isinstance(doc, dict):
            raise SourceUnavailableError(f"Kubernetes API at {self.url} answered list {spec.resource} with a JSON {type(doc).__name__}, not a List")
        return doc

    def _translate(self, exc: ApiException, spec: _ListSpec) -> GpuWasteError:
        status = int(exc.status or 0)
        message = _status_message(exc)
        scope = f"in namespace {self.read.namespace!r}" if self.read.namespace and spec.namespaced else "at cluster scope"
        what = f"list {spec.resource} {scope}"
        if status == 401:
            return SourceAuthError(
                f"Kubernetes API at {self.url} rejected the credentials (401 Unauthorized) on {what}: {message}; "
                "check the kubeconfig user/token, or on EKS the IAM role's access entry (deploy/eks-access-entry.md)"
            )
        if status == 403:
            return SourceAuthError(f"Kubernetes API at {self.url} denied {what} (403 Forbidden): {message}; {RBAC_HINT}")
        if status == 0 or status == 429 or status >= 500:
            label = "no HTTP response" if status == 0 else f"HTTP {status}"
            return SourceUnavailableError(f"Kubernetes API at {self.url} failed {what} ({label}): {message}")
        return SourceAnswerError(f"Kubernetes API at {self.url} refused {what} (HTTP {status}): {message}")
