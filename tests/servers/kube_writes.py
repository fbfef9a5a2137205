"""Test server: fake kube-apiserver for the reclaim writes, speaking the Kubernetes wire format.

It serves, for objects given as ``kubectl get -o json`` dicts:

* ``GET``/``PATCH`` ``/apis/apps/v1/namespaces/{ns}/{deployments,statefulsets}/{name}/scale`` — an
  ``autoscaling/v1`` ``Scale`` whose ``spec.replicas`` is the workload's;
* ``GET``/``PATCH`` ``/apis/batch/v1/namespaces/{ns}/{jobs,cronjobs}/{name}``;
* ``GET``/``DELETE`` ``/api/v1/namespaces/{ns}/pods/{name}`` (``DeleteOptions.preconditions.uid`` checked: a
  mismatch is 409 ``Conflict``, as on a real apiserver);
* ``GET``/``PATCH`` ``/apis/kubeflow.org/v1/namespaces/{ns}/notebooks/{name}``.

Like a real apiserver, a PATCH must name its patch type: ``application/merge-patch+json`` (RFC 7386: ``null``
removes a key), ``application/strategic-merge-patch+json`` (merged the same way for these scalar fields; not for the
custom Notebook resource, where the apiserver answers 415) or ``application/json-patch+json`` (a JSON array of
operations); anything else is ``415 UnsupportedMediaType``. ``forbidden`` holds ``(verb, resource)`` pairs answered
``403 Forbidden`` with RBAC's message (``("patch", "deployments/scale")``, ``("delete", "pods")``…). Every request is
recorded (method, path, content type, body), so tests count exactly the calls made. Other paths are 404, other
methods 405.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, NamedTuple

from tests.servers import FakeHttpServer, HttpRequest, HttpResponse
from tests.servers.kube_api import kube_status

__all__ = ["FakeKubeWrites", "WriteRequest"]

_ROUTES = (
    (re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/(?P<res>deployments|statefulsets)/(?P<name>[^/]+)/scale$"), "apps", True),
    (re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/(?P<res>jobs|cronjobs)/(?P<name>[^/]+)$"), "batch", False),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods)/(?P<name>[^/]+)$"), "", False),
    (re.compile(r"^/apis/kubeflow.org/v1/namespaces/(?P<ns>[^/]+)/(?P<res>notebooks)/(?P<name>[^/]+)$"), "kubeflow.org", False),
)
_KINDS = {"deployments": ("Deployment", "apps/v1"), "statefulsets": ("StatefulSet", "apps/v1"), "jobs": ("Job", "batch/v1"),
          "cronjobs": ("CronJob", "batch/v1"), "pods": ("Pod", "v1"), "notebooks": ("Notebook", "kubeflow.org/v1")}
_VERBS = {"GET": "get", "PATCH": "patch", "DELETE": "delete"}
MERGE, STRATEGIC, JSON_PATCH = "application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json"


class WriteRequest(NamedTuple):
    """One request as received: method, path, Content-Type (parameters stripped), decoded JSON body (or None)."""

    method: str
    path: str
    content_type: str
    body: Any


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).lstrip("/").split("/")]
        parent = doc
        for p in parts[:-1]:
            parent = parent[p]
        if op["op"] in ("add", "replace"):
            parent[parts[-1]] = op["value"]
        elif op["op"] == "remove":
            del parent[parts[-1]]
        else:
            raise ValueError(op["op"])
    return doc


class FakeKubeWrites(FakeHttpServer):
    """The reclaim calls' apiserver on 127.0.0.1:<random port> (see the module docstring).

    Args:
        objects: ``kubectl get -o json`` objects (``kind`` decides the resource: Deployment, StatefulSet, Job,
            CronJob, Pod, Notebook).
        forbidden: ``(verb, resource)`` pairs refused with 403 (``"deployments/scale"`` for the subresource).
    """

    server_name = "fake-kube-writes"

    def __init__(self, objects: list[dict[str, Any]] = (), *, forbidden: set[tuple[str, str]] | None = None) -> None:  # type: ignore[assignment]
        super().__init__()
        self.forbidden = set(forbidden or ())
        self.requests: list[WriteRequest] = []
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = 100
        self.set_objects(objects)

    def set_objects(self, objects: list[dict[str, Any]]) -> None:
        """Replace every object and forget the recorded requests."""
        plural = {kind: res for res, (kind, _) in _KINDS.items()}
        with self._lock:
            self.requests = []
            self._objects = {}
            for obj in objects:
                meta = obj["metadata"]
                self._objects[(plural[obj["kind"]], meta["namespace"], meta["name"])] = copy.deepcopy(obj)

    def object(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object now (None once deleted)."""
        with self._lock:
            found = self._objects.get((resource, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def writes(self) -> list[WriteRequest]:
        """The PATCH and DELETE requests received, in order."""
        with self._lock:
            return [r for r in self.requests if r.method in ("PATCH", "DELETE", "POST", "PUT")]

    def handle(self, request: HttpRequest) -> HttpResponse:
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        try:
            body = request.json()
        except ValueError:
            body = request.body.decode(errors="replace")
        with self._lock:
            self.requests.append(WriteRequest(request.method, request.path, content_type, body))
            return self._route(request, content_type, body)

    def _route(self, request: HttpRequest, content_type: str, body: Any) -> HttpResponse:
        for pattern, group, scale in _ROUTES:
            match = pattern.match(request.path)
            if match is None:
                continue
            ns, res, name = match["ns"], match["res"], match["name"]
            verb = _VERBS.get(request.method)
            allowed = ("GET", "PATCH") if res != "pods" else ("GET", "DELETE")
            if verb is None or request.method not in allowed:
                return HttpResponse.json_body(405, kube_status(405))
            resource = f"{res}/scale" if scale else res
            if (verb, resource) in self.forbidden:
                qualified = f"{res}.{group}" if group else res
                message = (f'{qualified} "{name}" is forbidden: User "system:serviceaccount:gpuwaste:gpuwaste-reclaim" '
                           f'cannot {verb} resource "{resource}" in API group "{group}" in the namespace "{ns}"')
                return HttpResponse.json_body(403, kube_status(403, message, "Forbidden", name=name, group=group, kind=res))
            obj = self._objects.get((res, ns, name))
            if obj is None:
                qualified = f"{res}.{group}" if group else res
                return HttpResponse.json_body(404, kube_status(404, f'{qualified} "{name}" not found', "NotFound", name=name, kind=res))
            if request.method == "DELETE":
                return self._delete(res, ns, name, obj, body)
            if request.method == "PATCH":
                refused = self._patch(res, ns, name, obj, content_type, body, scale=scale)
                if refused is not None:
                    return refused
                obj = self._objects[(res, ns, name)]
            return HttpResponse.json_body(200, _scale(obj) if scale else copy.deepcopy(obj))
        return HttpResponse.json_body(404, kube_status(404))

    def _patch(self, res: str, ns: str, name: str, obj: dict[str, Any], content_type: str, body: Any, *,
               scale: bool) -> HttpResponse | None:
        if content_type not in (MERGE, STRATEGIC, JSON_PATCH) or (content_type == STRATEGIC and res == "notebooks"):
            return HttpResponse.json_body(415, kube_status(415, f"the body of the request was in an unknown format - accepted media types include: {JSON_PATCH}, {MERGE}, application/apply-patch+yaml", "UnsupportedMediaType"))
        current = _scale(obj) if scale else obj
        try:
            patched = _json_patch(current, body) if content_type == JSON_PATCH else _merge(current, body)
        except (KeyError, TypeError, ValueError, IndexError):
            return HttpResponse.json_body(422, kube_status(422, "the patch could not be applied", "Invalid"))
        if content_type == JSON_PATCH and not isinstance(body, list):
            return HttpResponse.json_body(400, kube_status(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch", "BadRequest"))
        self._rv += 1
        if scale:
            updated = copy.deepcopy(obj)
            updated.setdefault("spec", {})["replicas"] = int((patched.get("spec") or {}).get("replicas") or 0)
        else:
            updated = patched
        updated.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self._objects[(res, ns, name)] = updated
        return None

    def _delete(self, res: str, ns: str, name: str, obj: dict[str, Any], body: Any) -> HttpResponse:
        uid = ((body or {}).get("preconditions") or {}).get("uid") if isinstance(body, dict) else None
        actual = (obj.get("metadata") or {}).get("uid")
        if uid and uid != actual:
            message = (f'Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}')
            return HttpResponse.json_body(409, kube_status(409, message, "Conflict", name=name, kind=res))
        del self._objects[(res, ns, name)]
        return HttpResponse.json_body(200, copy.deepcopy(obj))


def _scale(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    replicas = int((obj.get("spec") or {}).get("replicas", 1))
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                         "resourceVersion": meta.get("resourceVersion", "1")},
            "spec": {"replicas": replicas}, "status": {"replicas": replicas}}


def dump(obj: Any) -> str:
    """JSON text of a recorded body (for assertion messages)."""
    return json.dumps(obj, sort_keys=True)
