"""Adapter: reclaim actions on the Kubernetes apiserver (`ports.ClusterActuator`), with the official client.

Only these calls are made (the verbs of the opt-in acting role, deploy/rbac-reclaim.yaml):

* scale: GET and PATCH `/apis/apps/v1/namespaces/N/{deployments,statefulsets}/NAME/scale`
  (`application/merge-patch+json`, `{"spec": {"replicas": 0}}`);
* suspend: GET and PATCH `/apis/batch/v1/namespaces/N/{jobs,cronjobs}/NAME` (`{"spec": {"suspend": true}}`);
* delete-orphan: GET and DELETE `/api/v1/namespaces/N/pods/NAME` (DeleteOptions with `preconditions.uid`, so
  a new pod of the same name is never deleted);
* stop-notebook: GET and PATCH `/apis/kubeflow.org/v1/namespaces/N/notebooks/NAME`
  (`metadata.annotations["kubeflow-resource-stopped"]`: set to the time; undo writes the value before, null
  removing it).

Every PATCH names its content type (the client would otherwise send `application/json-patch+json`, which a dict body
is not). Nothing is retried: a 403 (the role does not grant the verb) or a 404 is `ActionRefusedError` with the
apiserver's status and message; a 5xx or a connection failure is `SourceUnavailableError` (the next run retries the
same call, never another verb).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from gpuwaste.errors import ActionRefusedError, SourceUnavailableError
from gpuwaste.models.reclaim import ReclaimKind, ReclaimTarget

MERGE_PATCH = "application/merge-patch+json"
STOPPED_ANNOTATION = "kubeflow-resource-stopped"
NOTEBOOKS = ("kubeflow.org", "v1", "notebooks")


class KubernetesActuator:
    """`ports.ClusterActuator` over a `kubernetes.client.ApiClient` (its configuration: kubeconfig, in-cluster or
    EKS token, as the reader's; the acting service account is a separate, opt-in role).

    Args:
        api_client: the configured client (its `configuration.retries` is set to no retry of reads or statuses).
        timeout_s: per-request timeout.
        now: the time written in the stopped annotation.
    """

    def __init__(self, api_client: k8s_client.ApiClient, *, timeout_s: float = 15.0,
                 now: Callable[[], datetime] | None = None) -> None:
        api_client.configuration.retries = urllib3.Retry(total=1, connect=1, read=0, status=0, redirect=0,
                                                         raise_on_status=False)
        self.api_client = api_client
        self.apps = k8s_client.AppsV1Api(api_client)
        self.batch = k8s_client.BatchV1Api(api_client)
        self.core = k8s_client.CoreV1Api(api_client)
        self.custom = k8s_client.CustomObjectsApi(api_client)
        self.timeout_s = timeout_s
        self.now = now or (lambda: datetime.now(UTC))

    # -- ports.ClusterActuator -----------------------------------------------------------------------------------
    def read(self, kind: ReclaimKind, target: ReclaimTarget) -> dict[str, Any]:
        """See `ports.ClusterActuator.read`."""
        n, ns = target.name, target.namespace
        call: Callable[..., Any]
        if kind is ReclaimKind.SCALE:
            call = (self.apps.read_namespaced_deployment_scale if target.kind == "Deployment"
                    else self.apps.read_namespaced_stateful_set_scale)
            return {"replicas": int((self._call(call, n, ns).get("spec") or {}).get("replicas") or 0)}
        if kind is ReclaimKind.SUSPEND:
            call = self.batch.read_namespaced_job if target.kind == "Job" else self.batch.read_namespaced_cron_job
            return {"suspend": bool((self._call(call, n, ns).get("spec") or {}).get("suspend"))}
        if kind is ReclaimKind.DELETE_ORPHAN:
            try:
                pod = self._call(self.core.read_namespaced_pod, n, ns)
            except ActionRefusedError as exc:
                if exc.status == 404:
                    return {"deleted": True}
                raise
            return {"uid": str((pod.get("metadata") or {}).get("uid") or ""), "deleted": False}
        obj = self._call(self.custom.get_namespaced_custom_object, *NOTEBOOKS[:2], ns, NOTEBOOKS[2], n)
        return {"stopped": ((obj.get("metadata") or {}).get("annotations") or {}).get(STOPPED_ANNOTATION)}

    def apply(self, kind: ReclaimKind, target: ReclaimTarget, before: Mapping[str, Any]) -> dict[str, Any]:
        """See `ports.ClusterActuator.apply`."""
        n, ns = target.name, target.namespace
        if kind is ReclaimKind.SCALE:
            return {"replicas": self._patch_scale(target, 0)}
        if kind is ReclaimKind.SUSPEND:
            return {"suspend": self._patch_suspend(target, True)}
        if kind is ReclaimKind.DELETE_ORPHAN:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": str(before.get("uid") or "")}}
            self._call(self.core.delete_namespaced_pod, n, ns, body=body,
                       _headers={"Content-Type": "application/json"})  # the generated method names none
            return {"deleted": True, "uid": before.get("uid")}
        return {"stopped": self._patch_stopped(target, self.now().strftime("%Y-%m-%dT%H:%M:%SZ"))}

    def restore(self, kind: ReclaimKind, target: ReclaimTarget, before: Mapping[str, Any]) -> dict[str, Any]:
        """See `ports.ClusterActuator.restore`."""
        if kind is ReclaimKind.SCALE:
            return {"replicas": self._patch_scale(target, int(before.get("replicas") or 0))}
        if kind is ReclaimKind.SUSPEND:
            return {"suspend": self._patch_suspend(target, bool(before.get("suspend")))}
        if kind is ReclaimKind.STOP_NOTEBOOK:
            value = before.get("stopped")
            return {"stopped": self._patch_stopped(target, str(value) if value is not None else None)}
        raise ActionRefusedError(f"{kind.value} cannot be undone (a deleted pod is gone)", status=409)

    # -- calls ---------------------------------------------------------------------------------------------------
    def _patch_scale(self, target: ReclaimTarget, replicas: int) -> int:
        call: Callable[..., Any] = (self.apps.patch_namespaced_deployment_scale if target.kind == "Deployment"
                else self.apps.patch_namespaced_stateful_set_scale)
        doc = self._call(call, target.name, target.namespace, {"spec": {"replicas": replicas}}, _content_type=MERGE_PATCH)
        return int((doc.get("spec") or {}).get("replicas") or 0)

    def _patch_suspend(self, target: ReclaimTarget, suspend: bool) -> bool:
        call: Callable[..., Any] = self.batch.patch_namespaced_job if target.kind == "Job" else self.batch.patch_namespaced_cron_job
        doc = self._call(call, target.name, target.namespace, {"spec": {"suspend": suspend}}, _content_type=MERGE_PATCH)
        return bool((doc.get("spec") or {}).get("suspend"))

    def _patch_stopped(self, target: ReclaimTarget, value: str | None) -> str | None:
        body = {"metadata": {"annotations": {STOPPED_ANNOTATION: value}}}
        doc = self._call(self.custom.patch_namespaced_custom_object, *NOTEBOOKS[:2], target.namespace, NOTEBOOKS[2],
                         target.name, body, _content_type=MERGE_PATCH)
        stopped = ((doc.get("metadata") or {}).get("annotations") or {}).get(STOPPED_ANNOTATION)
        return str(stopped) if stopped is not None else None

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """One request, its JSON answer; refusals and outages translated (never retried as another call)."""
        try:
            response = method(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
            try:
                data = response.data
            finally:
                response.release_conn()
        except ApiException as exc:
            message = _status_message(exc)
            if exc.status is not None and 400 <= int(exc.status) < 500 and int(exc.status) != 429:
                raise ActionRefusedError(message, status=int(exc.status)) from exc
            raise SourceUnavailableError(f"kubernetes: {exc.status} {message}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise SourceUnavailableError(f"kubernetes: unreachable ({type(exc).__name__}: {exc})") from exc
        try:
            doc = json.loads(data) if data else {}
        except ValueError as exc:
            raise SourceUnavailableError("kubernetes: the answer is not JSON") from exc
        return doc if isinstance(doc, dict) else {}


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or exc.status)[:300]


__all__ = ["MERGE_PATCH", "STOPPED_ANNOTATION", "KubernetesActuator"]
