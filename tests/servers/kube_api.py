"""Test server: fake kube-apiserver speaking the Kubernetes list/selector/pagination wire format.

It serves objects given as Python dicts, shaped as ``kubectl get -o json`` prints them, read-only:

* ``GET /version``;
* core: ``/api/v1/pods``, ``/api/v1/nodes``, ``/api/v1/namespaces`` and their by-name forms
  (``/api/v1/namespaces/{ns}/pods[/{name}]``, ``/api/v1/nodes/{name}``, ``/api/v1/namespaces/{name}``);
* ``/apis/apps/v1/{replicasets,deployments,statefulsets,daemonsets}`` and
  ``/apis/batch/v1/{jobs,cronjobs}``, all-namespaces, namespaced and by-name;
* Dynamic Resource Allocation: ``/apis/resource.k8s.io/<version>/resourceclaims`` (all-namespaces,
  namespaced, by-name), ``/resourceslices`` and ``/deviceclasses`` (cluster-scoped), served at the versions
  given by ``dra_versions`` (default ``v1``, as Kubernetes 1.34+; ``("v1beta1",)`` plays a 1.32 cluster, ``()``
  a cluster without DRA, where those paths are 404 like on a real apiserver). Items are served with the
  ``apiVersion`` of the version asked for.

What it does like a real apiserver:

* Lists are ``{"kind": "<Kind>List", "apiVersion", "metadata": {"resourceVersion", "continue"?,
  "remainingItemCount"?}, "items"}``, ordered by (namespace, name) as etcd keys are.
* ``labelSelector``: ``=``, ``==``, ``!=``, ``in (...)``, ``notin (...)``, ``key``, ``!key``, comma-ANDed.
* ``fieldSelector``: ``=``, ``==``, ``!=`` on the fields the real apiserver indexes for each resource
  (see ``_SELECTABLE_FIELDS``); any other field is a 400 ``BadRequest`` ``Status``, so a test cannot pass
  with a selector a real cluster refuses.
* ``limit`` / ``continue``: the token is opaque (base64url JSON), pages come from the snapshot of the
  resourceVersion the first page was served at, and ``remainingItemCount`` is omitted when a selector was
  given (the apiserver cannot count those cheaply).
* :meth:`FakeKubeApi.expire_continue_tokens` plays etcd compaction: every token issued before the call
  then gets ``410 Expired``, and a fresh list (no ``continue``) works again.
* Missing objects and unknown paths are 404 ``Status`` objects; ``token=...`` enables
  ``Authorization: Bearer`` checking (401 ``Status`` otherwise).

Writes, watches and discovery (``/api``, ``/apis``) are not implemented: a fake that half-supports them
would let tests pass against behaviour no cluster has.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from tests.servers import FakeHttpServer, HttpRequest, HttpResponse

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

__all__ = ["FakeKubeApi", "KubeApiFactory", "RecordedRequest", "kube_status", "write_kubeconfig"]

EXPIRED_CONTINUE_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)

_REASONS: dict[int, tuple[str, str]] = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: the fake apiserver denied the request"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    409: ("Conflict", "the object has been modified; please apply your changes to the latest version"),
    410: ("Expired", EXPIRED_CONTINUE_MESSAGE),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected failure"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within requested timeout"),
}


def kube_status(code: int, message: str | None = None, reason: str | None = None, **details: str) -> dict[str, Any]:
    """Build a ``Status`` failure object exactly as the apiserver serialises it."""
    default_reason, default_message = _REASONS.get(code, ("", "injected failure"))
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message if message is not None else default_message,
        "reason": reason if reason is not None else default_reason,
    }
    if details:
        status["details"] = dict(details)
    status["code"] = code
    return status


class RecordedRequest(NamedTuple):
    """A request the fake received; ``headers`` keys are lower-case."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass(frozen=True)
class _ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_RESOURCES: dict[str, _ResourceType] = {
    "pods": _ResourceType("", "v1", "Pod", namespaced=True),
    "nodes": _ResourceType("", "v1", "Node", namespaced=False),
    "namespaces": _ResourceType("", "v1", "Namespace", namespaced=False),
    "replicasets": _ResourceType("apps", "v1", "ReplicaSet", namespaced=True),
    "deployments": _ResourceType("apps", "v1", "Deployment", namespaced=True),
    "statefulsets": _ResourceType("apps", "v1", "StatefulSet", namespaced=True),
    "daemonsets": _ResourceType("apps", "v1", "DaemonSet", namespaced=True),
    "jobs": _ResourceType("batch", "v1", "Job", namespaced=True),
    "cronjobs": _ResourceType("batch", "v1", "CronJob", namespaced=True),
    "resourceclaims": _ResourceType("resource.k8s.io", "v1", "ResourceClaim", namespaced=True),
    "resourceslices": _ResourceType("resource.k8s.io", "v1", "ResourceSlice", namespaced=False),
    "deviceclasses": _ResourceType("resource.k8s.io", "v1", "DeviceClass", namespaced=False),
}
_DRA_PLURALS = frozenset({"resourceclaims", "resourceslices", "deviceclasses"})

# Field selectors each resource's registry accepts on a real apiserver (pkg/registry/*/strategy.go).
_NAMESPACED_META = frozenset({"metadata.name", "metadata.namespace"})
_SELECTABLE_FIELDS: dict[str, frozenset[str]] = {
    "pods": _NAMESPACED_META
    | {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "nodes": frozenset({"metadata.name", "spec.unschedulable"}),
    "namespaces": frozenset({"metadata.name", "status.phase"}),
    "replicasets": _NAMESPACED_META | {"status.replicas"},
    "deployments": _NAMESPACED_META,
    "statefulsets": _NAMESPACED_META,
    "daemonsets": _NAMESPACED_META,
    "jobs": _NAMESPACED_META | {"status.successful"},
    "cronjobs": _NAMESPACED_META,
    "resourceclaims": _NAMESPACED_META,
    "resourceslices": frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
    "deviceclasses": frozenset({"metadata.name"}),
}
# Fields whose Go zero value is "false" / "0" rather than "" when absent from the JSON.
_BOOL_FIELDS = frozenset({"spec.hostNetwork", "spec.unschedulable"})
_INT_FIELDS = frozenset({"status.replicas", "status.successful"})

_ROUTES = (
    re.compile(r"^/api/(?P<version>v1)/namespaces/(?P<ns>[^/]+)/(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?/?$"),
    re.compile(r"^/api/(?P<version>v1)/(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?/?$"),
    re.compile(
        r"^/apis/(?P<group>[a-z0-9.]+)/(?P<version>v[a-z0-9]+)/namespaces/(?P<ns>[^/]+)/(?P<res>[a-z]+)"
        r"(?:/(?P<name>[^/]+))?/?$"
    ),
    re.compile(r"^/apis/(?P<group>[a-z0-9.]+)/(?P<version>v[a-z0-9]+)/(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?/?$"),
)

_VERSION_INFO = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.4",
    "gitCommit": "a51b3b711150f57ffc1f526a640ec058514ed596",
    "gitTreeState": "clean",
    "buildDate": "2024-08-14T19:04:42Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}


class _Rejected(Exception):  # noqa: N818 - internal control flow, carries the response to send
    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.response = HttpResponse.json_body(status, kube_status(status, message, reason))


@dataclass
class _Fault:
    status: int
    remaining: int
    body: dict[str, Any] | None
    retry_after: int | None


class FakeKubeApi(FakeHttpServer):
    """A read-only kube-apiserver fake on 127.0.0.1:<random port>.

    Args:
        pods: Pod objects (``kubectl get pods -A -o json`` ``items``).
        nodes: Node objects.
        others: other objects keyed by resource plural: ``replicasets``, ``deployments``,
            ``statefulsets``, ``daemonsets``, ``jobs``, ``cronjobs``, ``namespaces``, ``resourceclaims``,
            ``resourceslices``, ``deviceclasses``. When ``namespaces`` is absent, one Namespace per namespace
            used by any object is synthesised.
        token: when set, every request needs ``Authorization: Bearer <token>``.
        dra_versions: the ``resource.k8s.io`` versions served (first = preferred); ``()`` serves no DRA API.
        forbidden: resource plurals every request for which is answered 403 (RBAC that does not grant them).
    """

    server_name = "fake-kube-apiserver"

    def __init__(
        self,
        pods: Iterable[Mapping[str, Any]] = (),
        nodes: Iterable[Mapping[str, Any]] = (),
        others: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
        *,
        token: str | None = None,
        dra_versions: tuple[str, ...] = ("v1",),
        forbidden: Iterable[str] = (),
    ) -> None:
        super().__init__()
        self.token = token
        self.dra_versions = tuple(dra_versions)
        self.forbidden = frozenset(forbidden)
        self.requests: list[RecordedRequest] = []
        self._resource_version = 1000
        self._compacted_below = 0  # continue tokens for resourceVersions below this are expired
        self._snapshots: dict[int, dict[str, list[dict[str, Any]]]] = {}
        self._faults: list[_Fault] = []
        #: faults this fake answered, by HTTP status (counted where they are injected)
        self.faults_served: Counter[int] = Counter()
        self._objects: dict[str, list[dict[str, Any]]] = {}
        self._has_explicit_namespaces = False
        self.set_objects(pods=pods, nodes=nodes, others=others or {})

    @property
    def url(self) -> str:
        """The server URL to use as the client ``host`` / kubeconfig ``server``."""
        return self.base_url

    # -- test controls ---------------------------------------------------------------------------------
    def set_objects(
        self,
        pods: Iterable[Mapping[str, Any]] | None = None,
        nodes: Iterable[Mapping[str, Any]] | None = None,
        others: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
    ) -> None:
        """Replace the served objects of each collection given (``None`` keeps it) and bump resourceVersion.

        Continue tokens issued earlier keep paging through the snapshot they started from, as they do
        on a real apiserver until compaction (see :meth:`expire_continue_tokens`).

        Raises:
            ValueError: ``others`` names a resource this fake does not serve.
        """
        unknown = set(others or {}) - (set(_RESOURCES) - {"pods", "nodes"})
        if unknown:
            raise ValueError(f"unsupported resources {sorted(unknown)}; supported: {sorted(_RESOURCES)}")
        with self._lock:
            objects = {plural: list(items) for plural, items in self._objects.items()}
            if pods is not None:
                objects["pods"] = [copy.deepcopy(dict(o)) for o in pods]
            if nodes is not None:
                objects["nodes"] = [copy.deepcopy(dict(o)) for o in nodes]
            for plural, items in (others or {}).items():
                objects[plural] = [copy.deepcopy(dict(o)) for o in items]
            explicit_namespaces = bool(others and "namespaces" in others) or self._has_explicit_namespaces
            self._has_explicit_namespaces = explicit_namespaces
            if not explicit_namespaces:
                objects["namespaces"] = _synthesised_namespaces(objects)
            for plural in _RESOURCES:
                objects[plural] = sorted(objects.get(plural, []), key=_sort_key)
            self._objects = objects
            self._resource_version += 1
            self._snapshots[self._resource_version] = objects

    def fail_next(
        self, status: int, times: int = 1, body: dict[str, Any] | None = None, *, retry_after: int | None = None
    ) -> None:
        """Answer the next ``times`` requests (any path) with ``status``.

        Args:
            status: HTTP status, e.g. 401, 403, 429, 500, 503.
            times: how many consecutive requests fail.
            body: response body; defaults to a Kubernetes ``Status`` with the matching ``reason``.
            retry_after: seconds for a ``Retry-After`` header (the apiserver sends one with 429).
        """
        with self._lock:
            self._faults.append(_Fault(status=status, remaining=times, body=body, retry_after=retry_after))

    def expire_continue_tokens(self) -> None:
        """Compact: every continue token issued so far gets ``410 Expired`` from now on."""
        with self._lock:
            self._resource_version += 1
            self._snapshots = {self._resource_version: self._objects}
            self._compacted_below = self._resource_version

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The recorded requests whose path equals ``path``."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # -- HTTP ------------------------------------------------------------------------------------------
    def handle(self, request: HttpRequest) -> HttpResponse:
        with self._lock:
            self.requests.append(RecordedRequest(request.method, request.path, request.query, request.headers))
            fault = self._take_fault()
        if fault is not None:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            return HttpResponse.json_body(fault.status, fault.body or kube_status(fault.status), headers)
        if self.token is not None and request.headers.get("authorization") != f"Bearer {self.token}":
            return HttpResponse.json_body(401, kube_status(401))
        try:
            return self._route(request)
        except _Rejected as rejected:
            return rejected.response

    def _take_fault(self) -> _Fault | None:
        if not self._faults:
            return None
        fault = self._faults[0]
        self.faults_served[fault.status] += 1
        fault.remaining -= 1
        if fault.remaining <= 0:
            self._faults.pop(0)
        return fault

    def _route(self, request: HttpRequest) -> HttpResponse:
        if request.path.rstrip("/") == "/version":
            return HttpResponse.json_body(200, _VERSION_INFO)
        for pattern in _ROUTES:
            match = pattern.match(request.path)
            if match is None:
                continue
            groups = match.groupdict()
            plural, name, namespace, group = groups["res"], groups["name"], groups.get("ns"), groups.get("group") or ""
            resource = _RESOURCES.get(plural)
            if resource is not None and plural in _DRA_PLURALS and match["version"] in self.dra_versions:
                resource = _ResourceType(resource.group, match["version"], resource.kind, resource.namespaced)
            if resource is None or resource.group != group or resource.version != match["version"]:
                break
            if plural in _DRA_PLURALS and match["version"] not in self.dra_versions:
                break  # a version (or the whole API) the server does not serve: 404
            if plural in self.forbidden:
                qualified = f"{plural}.{group}" if group else plural
                scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
                raise _Rejected(403, f'{qualified} is forbidden: User "system:serviceaccount:gpuwaste:gpuwaste" cannot list resource "{plural}" in API group "{group}"{scope}', "Forbidden")
            if namespace is not None and not resource.namespaced:
                break
            if resource.namespaced and namespace is None and name is not None:
                break  # e.g. /api/v1/pods/<name> does not exist
            if request.method != "GET":
                raise _Rejected(405, _REASONS[405][1])
            if request.query.get("watch") in ("true", "1"):
                raise _Rejected(400, "watch is not supported by the fake apiserver")
            if name is not None:
                return self._get(plural, resource, namespace, name)
            return self._list(plural, resource, namespace, request.query)
        return HttpResponse.json_body(404, {**kube_status(404), "details": {}, "code": 404})

    def _get(self, plural: str, resource: _ResourceType, namespace: str | None, name: str) -> HttpResponse:
        with self._lock:
            objects = self._objects[plural]
        for obj in objects:
            meta = obj.get("metadata", {})
            if meta.get("name") == name and (namespace is None or meta.get("namespace") == namespace):
                return HttpResponse.json_body(
                    200, {"kind": resource.kind, "apiVersion": resource.api_version} | copy.deepcopy(obj)
                )
        qualified = f"{plural}.{resource.group}" if resource.group else plural
        details = (
            {"name": name, "group": resource.group, "kind": plural}
            if resource.group
            else {
                "name": name,
                "kind": plural,
            }
        )
        return HttpResponse.json_body(404, kube_status(404, f'{qualified} "{name}" not found', **details))

    def _list(self, plural: str, resource: _ResourceType, namespace: str | None, query: dict[str, str]) -> HttpResponse:
        label_requirements = _parse_label_selector(query.get("labelSelector", ""))
        field_requirements = _parse_field_selector(query.get("fieldSelector", ""), plural)
        limit = _parse_limit(query.get("limit"))
        token = query.get("continue")
        with self._lock:
            if token:
                resource_version, start = self._decode_continue(token)
                objects = self._snapshots[resource_version][plural]
            else:
                resource_version, start = self._resource_version, 0
                objects = self._objects[plural]
        matching = [
            obj
            for obj in objects
            if (namespace is None or obj.get("metadata", {}).get("namespace") == namespace)
            and all(req.matches(obj.get("metadata", {}).get("labels") or {}) for req in label_requirements)
            and all(_field_matches(obj, field, op, value) for field, op, value in field_requirements)
        ]
        end = len(matching) if limit == 0 else min(start + limit, len(matching))
        metadata: dict[str, Any] = {"resourceVersion": str(resource_version)}
        if end < len(matching):
            metadata["continue"] = _encode_continue(resource_version, end)
            if not label_requirements and not field_requirements:
                metadata["remainingItemCount"] = len(matching) - end
        return HttpResponse.json_body(
            200,
            {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.api_version,
                "metadata": metadata,
                "items": [_with_api_version(o, resource) for o in matching[start:end]],
            },
        )

    def _decode_continue(self, token: str) -> tuple[int, int]:
        """Return (resourceVersion, offset) of a token; caller holds the lock."""
        try:
            padded = token + "=" * (-len(token) % 4)
            decoded = json.loads(base64.urlsafe_b64decode(padded.encode()))
            resource_version, start = int(decoded["rv"]), int(decoded["start"])
        except (binascii.Error, ValueError, KeyError, TypeError) as exc:
            raise _Rejected(400, f"continue key is not valid: {exc}") from exc
        if resource_version < self._compacted_below or resource_version not in self._snapshots:
            raise _Rejected(410, EXPIRED_CONTINUE_MESSAGE, "Expired")
        return resource_version, start


# -- selectors -------------------------------------------------------------------------------------------
_KEY = r"[A-Za-z0-9][A-Za-z0-9._/-]*"
_VALUE = r"[A-Za-z0-9._-]*"
_EXISTS_RE = re.compile(rf"^(?P<neg>!)?\s*(?P<key>{_KEY})$")
_SET_RE = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ_RE = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_VALUE})$")


@dataclass(frozen=True)
class _LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin" match objects without the key


def _split_requirements(selector: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _parse_label_selector(selector: str) -> list[_LabelRequirement]:
    requirements = []
    for part in _split_requirements(selector):
        if match := _SET_RE.match(part):
            values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
            if not values:
                raise _Rejected(
                    400,
                    f"unable to parse requirement: {part!r}: for 'in', 'notin' operators, values set can't be empty",
                )
            requirements.append(_LabelRequirement(match["key"], match["op"], values))
        elif match := _EQ_RE.match(part):
            op = "!=" if match["op"] == "!=" else "="
            requirements.append(_LabelRequirement(match["key"], op, frozenset({match["value"]})))
        elif match := _EXISTS_RE.match(part):
            requirements.append(_LabelRequirement(match["key"], "!exists" if match["neg"] else "exists"))
        else:
            raise _Rejected(400, f"unable to parse requirement: found {part!r}, expected: in, notin, =, ==, !=, exists")
    return requirements


def _parse_field_selector(selector: str, plural: str) -> list[tuple[str, str, str]]:
    requirements = []
    for part in (p.strip() for p in selector.split(",")):
        if not part:
            continue
        match = re.match(r"^(?P<field>[A-Za-z0-9._]+)\s*(?P<op>==|!=|=)\s*(?P<value>.*)$", part)
        if match is None:
            raise _Rejected(400, f"invalid selector: '{selector}'; can't understand '{part}'")
        if match["field"] not in _SELECTABLE_FIELDS[plural]:
            raise _Rejected(400, f"field label not supported: {match['field']}")
        requirements.append((match["field"], "!=" if match["op"] == "!=" else "=", match["value"].strip()))
    return requirements


def _field_value(obj: Mapping[str, Any], field: str) -> str:
    current: Any = obj
    for key in field.split("."):
        current = current.get(key) if isinstance(current, dict) else None
    if isinstance(current, bool):
        return "true" if current else "false"
    if current is None:
        return "false" if field in _BOOL_FIELDS else "0" if field in _INT_FIELDS else ""
    return str(current)


def _field_matches(obj: Mapping[str, Any], field: str, op: str, value: str) -> bool:
    equal = _field_value(obj, field) == value
    return equal if op == "=" else not equal


def _parse_limit(raw: str | None) -> int:
    if not raw:
        return 0
    try:
        limit = int(raw)
    except ValueError as exc:
        raise _Rejected(400, f"limit: Invalid value: {raw!r}: must be an integer") from exc
    return max(limit, 0)


def _encode_continue(resource_version: int, start: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _with_api_version(obj: Mapping[str, Any], resource: _ResourceType) -> Mapping[str, Any]:
    """A list item as served; DRA items without their stored apiVersion/kind, as the apiserver converts them.

    The served objects are deep copies taken by `set_objects` and never changed in place, and the response is only
    JSON-encoded, so items are not copied again (a copy per item per page is CPU on the benchmark's cores that a real
    apiserver, on its own machine, does not take; the bytes served are the same).
    """
    if resource.group == "resource.k8s.io":
        return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return obj


def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name") or "")


def _synthesised_namespaces(objects: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    names = {"default"} | {
        o.get("metadata", {}).get("namespace")
        for plural, items in objects.items()
        if _RESOURCES[plural].namespaced
        for o in items
    }
    return [
        {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}, "status": {"phase": "Active"}}
        for name in sorted(n for n in names if n)
    ]


class KubeApiFactory(Protocol):
    """The ``kube_api`` fixture: start a :class:`FakeKubeApi` serving these objects (stopped by the fixture)."""

    def __call__(
        self,
        pods: Iterable[Mapping[str, Any]] = (),
        nodes: Iterable[Mapping[str, Any]] = (),
        others: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
        token: str | None = None,
        **options: Any,
    ) -> FakeKubeApi: ...


# -- kubeconfig ------------------------------------------------------------------------------------------
def write_kubeconfig(path: Path, url: str, token: str | None = None, *, context: str = "fake") -> Path:
    """Write a kubeconfig pointing at ``url`` with a bearer ``token``; returns ``path``.

    Load it with ``kubernetes.config.new_client_from_config(config_file=str(path))``, which, unlike
    ``load_kube_config``, leaves the client's global default configuration alone.
    """
    user: dict[str, Any] = {"token": token} if token is not None else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML, and kubeconfig is YAML
    return path
