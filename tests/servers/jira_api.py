"""Test server: fake Jira Cloud REST v3 speaking the issue / ADF / search-jql wire format.

Endpoints (all under ``/rest/api/3``):

* ``POST /issue``: needs ``fields.project.key``, ``fields.summary``, ``fields.issuetype`` and, as in v3,
  ``fields.description`` (when given) must be an Atlassian Document Format doc
  ``{"type": "doc", "version": 1, "content": [...]}``; otherwise 400
  ``{"errorMessages": [], "errors": {"<field>": "..."}}``. Success is 201 ``{"id", "key", "self"}`` with keys
  ``<PROJECT>-1``, ``<PROJECT>-2``, ... and ids from ``10000``.
* ``GET /issue/{key}``, ``POST /issue/{key}/comment`` (ADF ``body``), ``GET``/``POST /issue/{key}/transitions``
  (transitions ``11`` To Do, ``21`` In Progress, ``31`` Done; the one to the issue's own status is not offered).
* Entity properties, as on Jira Cloud: ``POST /issue`` and ``POST /issue/{key}/comment`` take an optional
  ``properties`` list of ``{"key", "value"}`` (a key at most 255 characters, a value at most 32,768 bytes of JSON,
  else 400); ``GET /issue/{key}/properties/{propertyKey}`` answers ``{"key", "value"}`` or 404;
  ``GET /issue/{key}/comment`` pages with ``startAt``/``maxResults`` (``{"startAt", "maxResults", "total",
  "comments": [...]}``, each comment ``{"id", "body", "created", "updated"}``; as on Jira Cloud its ``expand``
  knows only ``renderedBody``, never properties); ``POST /comment/list`` ``{"ids": [...]}`` (at most 1000) answers
  the comments of those ids as a page (``{"values", "startAt", "maxResults", "total", "isLast"}``), each with its
  ``properties`` list with ``expand=properties``.
* ``POST``/``GET /search/jql`` with ``jql``, ``fields``, ``maxResults``, ``nextPageToken``. Returns
  ``{"issues": [...], "isLast": bool, "nextPageToken"?}``; only ``{"id"}`` per issue unless ``fields``
  is given, and no ``total``/``startAt``, as on Jira Cloud. Supported JQL: clauses joined by ``AND`` on
  ``project``, ``labels``, ``status``, ``statusCategory``, ``key``/``issuekey`` with ``=``, ``!=``,
  ``in (...)``, ``not in (...)``, and a trailing ``ORDER BY``; anything else is a 400 so an unsupported
  query cannot pass silently.
* ``GET /serverInfo`` (``deploymentType: "Cloud"``), ``GET /myself``.
* The retired ``/rest/api/2/search`` and ``/rest/api/3/search`` answer 410 Gone, as after CHANGE-2046.

Basic auth ``email:api_token`` is checked when both are configured (401 otherwise).
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.servers import FakeHttpServer, HttpRequest, HttpResponse

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ADF_ERROR", "SEARCH_GONE_MESSAGE", "FakeIssue", "FakeJira", "adf_text"]

ADF_ERROR = "Operation value must be an Atlassian Document (see the Atlassian Document Format)"
SEARCH_GONE_MESSAGE = (
    "The requested API has been removed. Please migrate to the /rest/api/3/search/jql API. "
    "A full migration guideline is available at https://developer.atlassian.com/changelog/#CHANGE-2046"
)
DEFAULT_EMAIL = "gpuwaste-bot@example.com"
DEFAULT_API_TOKEN = "jira-test-token"

# name → (status id, statusCategory key, statusCategory name, statusCategory id)
_STATUSES: dict[str, tuple[str, str, str, int]] = {
    "To Do": ("10000", "new", "To Do", 2),
    "In Progress": ("3", "indeterminate", "In Progress", 4),
    "Done": ("10001", "done", "Done", 3),
}
_TRANSITIONS = {"11": "To Do", "21": "In Progress", "31": "Done"}
_CREATED = "2024-01-01T00:00:00.000+0000"


@dataclass
class FakeIssue:
    """An issue as stored by the fake: the posted ``fields``, the ADF comment bodies and the status name."""

    id: str
    key: str
    fields: dict[str, Any]
    comments: list[dict[str, Any]] = field(default_factory=list)
    status: str = "To Do"
    #: issue entity properties, key → value (set by ``properties`` on create)
    properties: dict[str, Any] = field(default_factory=dict)
    #: per comment (parallel to ``comments``): its id and its entity properties (key → value)
    comment_meta: list[dict[str, Any]] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        """The issue's labels."""
        return list(self.fields.get("labels") or [])

    @property
    def status_category(self) -> str:
        """The statusCategory name: ``To Do``, ``In Progress`` or ``Done``."""
        return _STATUSES[self.status][2]


@dataclass
class _Fault:
    path_prefix: str
    status: int
    remaining: int
    body: dict[str, Any] | None
    retry_after: int | None


class _JqlError(Exception):
    pass


class FakeJira(FakeHttpServer):
    """A Jira Cloud REST v3 fake on 127.0.0.1:<random port>.

    Args:
        email: Basic-auth user; with ``api_token`` set, every request must authenticate.
        api_token: Basic-auth password (the Atlassian API token).
        projects: accepted project keys; ``None`` accepts any key.

    Attributes:
        issues: issue key → :class:`FakeIssue`.
        requests: every request received, as ``(method, path)``.
    """

    server_name = "fake-jira"

    def __init__(
        self,
        email: str | None = DEFAULT_EMAIL,
        api_token: str | None = DEFAULT_API_TOKEN,
        projects: Iterable[str] | None = None,
    ) -> None:
        super().__init__()
        self._initial = (email, api_token, set(projects) if projects is not None else None)
        self.email = email
        self.api_token = api_token
        self.projects = set(projects) if projects is not None else None
        self.issues: dict[str, FakeIssue] = {}
        self.requests: list[tuple[str, str]] = []
        self._faults: list[_Fault] = []
        self._next_id = 10000
        #: faults this fake answered, by HTTP status (counted where they are injected)
        self.faults_served: Counter[int] = Counter()

    @property
    def url(self) -> str:
        """The Jira site URL (``http://127.0.0.1:<port>``), without a trailing slash."""
        return self.base_url

    @property
    def auth(self) -> tuple[str, str] | None:
        """``(email, api_token)`` for ``requests``' ``auth=``, or ``None`` when auth is off."""
        return (self.email, self.api_token) if self.email and self.api_token else None

    def reset(self) -> None:
        """Forget issues, requests and faults and restore the constructor's auth and projects.

        Issue keys and ids restart from ``<PROJECT>-1`` / ``10000``.
        """
        with self._lock:
            self.email, self.api_token, projects = self._initial
            self.projects = set(projects) if projects is not None else None
            self.issues = {}
            self.requests = []
            self._faults = []
            self._next_id = 10000
            self.faults_served = Counter()

    def fail_next(
        self,
        path_prefix: str,
        status: int,
        times: int = 1,
        body: dict[str, Any] | None = None,
        *,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose path starts with ``path_prefix`` with ``status``.

        Args:
            path_prefix: e.g. ``"/rest/api/3/issue"`` or ``"/rest/api/3/search/jql"``.
            status: HTTP status, e.g. 429, 500, 503.
            times: how many consecutive matching requests fail.
            body: response body; defaults to ``{"errorMessages": [...], "errors": {}}``.
            retry_after: seconds for ``Retry-After`` (a 429 always carries one; default 0).
        """
        with self._lock:
            self._faults.append(_Fault(path_prefix, status, times, body, retry_after))

    # -- HTTP ------------------------------------------------------------------------------------------
    def handle(self, request: HttpRequest) -> HttpResponse:
        with self._lock:
            self.requests.append((request.method, request.path))
            fault = self._take_fault(request.path)
            if fault is not None:
                return _fault_response(fault)
            if not self._authorised(request):
                return _errors(401, ["Client must be authenticated to access this resource."])
            try:
                return self._route(request)
            except ValueError:
                return _errors(400, ["Unexpected character in the request body: it is not valid JSON."])

    def _take_fault(self, path: str) -> _Fault | None:
        for fault in self._faults:
            if path.startswith(fault.path_prefix):
                self.faults_served[fault.status] += 1
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _authorised(self, request: HttpRequest) -> bool:
        if self.auth is None:
            return True
        header = request.headers.get("authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            decoded = base64.b64decode(header.removeprefix("Basic ")).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        return decoded == f"{self.email}:{self.api_token}"

    def _route(self, request: HttpRequest) -> HttpResponse:
        method, path = request.method, request.path.rstrip("/")
        if path in ("/rest/api/2/search", "/rest/api/3/search"):
            return _errors(410, [SEARCH_GONE_MESSAGE])
        if path == "/rest/api/3/serverInfo" and method == "GET":
            return HttpResponse.json_body(200, self._server_info())
        if path == "/rest/api/3/myself" and method == "GET":
            return HttpResponse.json_body(200, {"accountId": "5b10a2844c20165700ede21g", "emailAddress": self.email})
        if path == "/rest/api/3/issue" and method == "POST":
            return self._create(request.json() or {})
        if path == "/rest/api/3/search/jql" and method in ("GET", "POST"):
            params = request.json() if method == "POST" else _search_query(request.query)
            return self._search(params or {})
        if path == "/rest/api/3/comment/list" and method == "POST":
            return self._comment_list(request.json() or {}, request.query)
        match = re.match(r"^/rest/api/3/issue/(?P<key>[^/]+)(?P<rest>/comment|/transitions|/properties/[^/]+)?$", path)
        if match is None:
            return _errors(404, ["null for uri: " + path])
        issue = self._find(match["key"])
        if issue is None:
            return _errors(404, ["Issue does not exist or you do not have permission to see it."])
        rest = match["rest"]
        if rest is None and method == "GET":
            return HttpResponse.json_body(200, self._issue_json(issue, None))
        if rest == "/comment" and method == "POST":
            return self._comment(issue, request.json() or {})
        if rest == "/comment" and method == "GET":
            return self._comments(issue, request.query)
        if rest is not None and rest.startswith("/properties/") and method == "GET":
            name = rest.removeprefix("/properties/")
            if name not in issue.properties:
                return _errors(404, [f"The property with key '{name}' does not exist."])
            return HttpResponse.json_body(200, {"key": name, "value": copy.deepcopy(issue.properties[name])})
        if rest == "/transitions" and method == "GET":
            return HttpResponse.json_body(200, {"expand": "transitions", "transitions": _transitions(issue.status)})
        if rest == "/transitions" and method == "POST":
            return self._transition(issue, request.json() or {})
        return _errors(405, [f"Method {method} is not allowed for {path}."])

    # -- endpoints (called with the lock held) -------------------------------------------------------------
    def _server_info(self) -> dict[str, Any]:
        return {
            "baseUrl": self.base_url,
            "version": "1001.0.0-SNAPSHOT",
            "versionNumbers": [1001, 0, 0],
            "deploymentType": "Cloud",
            "buildNumber": 100280,
            "buildDate": "2024-01-01T00:00:00.000+0000",
            "serverTime": "2024-01-01T00:00:00.000+0000",
            "scmInfo": "0000000000000000000000000000000000000000",
            "serverTitle": "Jira",
        }

    def _create(self, body: dict[str, Any]) -> HttpResponse:
        fields = body.get("fields")
        if not isinstance(fields, dict):
            return _errors(400, ["The request body must contain 'fields'."])
        errors: dict[str, str] = {}
        project = fields.get("project")
        project_key = project.get("key") if isinstance(project, dict) else None
        if not project_key or (self.projects is not None and project_key not in self.projects):
            errors["project"] = "Specify a valid project ID or key"
        summary = fields.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            errors["summary"] = "You must specify a summary of the issue."
        elif len(summary) > 255:
            errors["summary"] = "Summary must be less than 255 characters."
        issuetype = fields.get("issuetype")
        if not isinstance(issuetype, dict) or not (issuetype.get("name") or issuetype.get("id")):
            errors["issuetype"] = "Specify an issue type"
        if "description" in fields and fields["description"] is not None and not _is_adf(fields["description"]):
            errors["description"] = ADF_ERROR
        labels = fields.get("labels", [])
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            errors["labels"] = "data was not an array"
        elif bad := next((label for label in labels if " " in label or not label), None):
            errors["labels"] = f"The label '{bad}' contains spaces which is invalid."
        properties = _properties(body.get("properties"))
        if isinstance(properties, str):
            errors["properties"] = properties
        if errors:
            return HttpResponse.json_body(400, {"errorMessages": [], "errors": errors})
        assert isinstance(properties, dict)
        issue_id = str(self._next_id)
        self._next_id += 1
        number = 1 + sum(1 for issue in self.issues.values() if issue.key.startswith(f"{project_key}-"))
        key = f"{project_key}-{number}"
        self.issues[key] = FakeIssue(id=issue_id, key=key, fields=copy.deepcopy(fields), properties=properties)
        return HttpResponse.json_body(201, {"id": issue_id, "key": key, "self": self._self_url(issue_id)})

    def _comment(self, issue: FakeIssue, body: dict[str, Any]) -> HttpResponse:
        if not _is_adf(body.get("body")):
            return HttpResponse.json_body(400, {"errorMessages": [], "errors": {"comment": ADF_ERROR}})
        properties = _properties(body.get("properties"))
        if isinstance(properties, str):
            return _errors(400, [properties])
        issue.comments.append(copy.deepcopy(body["body"]))
        comment_id = str(10000 + sum(len(i.comments) for i in self.issues.values()))
        issue.comment_meta.append({"id": comment_id, "properties": properties})
        return HttpResponse.json_body(
            201,
            {
                "id": comment_id,
                "self": f"{self._self_url(issue.id)}/comment/{comment_id}",
                "body": body["body"],
                "created": _CREATED,
                "updated": _CREATED,
            },
        )

    def _comment_json(self, issue: FakeIssue, n: int, *, properties: bool) -> dict[str, Any]:
        meta = self._meta(issue, n)
        comment: dict[str, Any] = {"id": meta["id"], "self": f"{self._self_url(issue.id)}/comment/{meta['id']}",
                                   "body": copy.deepcopy(issue.comments[n]), "created": _CREATED, "updated": _CREATED}
        if properties:
            comment["properties"] = [{"key": k, "value": copy.deepcopy(v)} for k, v in meta["properties"].items()]
        return comment

    @staticmethod
    def _meta(issue: FakeIssue, n: int) -> dict[str, Any]:
        return issue.comment_meta[n] if n < len(issue.comment_meta) else {"id": str(20000 + n), "properties": {}}

    def _comments(self, issue: FakeIssue, query: dict[str, str]) -> HttpResponse:
        start = int(query.get("startAt") or 0)
        max_results = min(int(query.get("maxResults") or 5000), 5000)
        order = range(len(issue.comments))
        if str(query.get("orderBy") or "") == "-created":
            order = range(len(issue.comments) - 1, -1, -1)
        page = [self._comment_json(issue, n, properties=False) for n in list(order)[start:start + max_results]]
        return HttpResponse.json_body(200, {"startAt": start, "maxResults": max_results, "total": len(issue.comments),
                                            "comments": page})

    def _comment_list(self, body: dict[str, Any], query: dict[str, str]) -> HttpResponse:
        ids = body.get("ids")
        if not isinstance(ids, list) or len(ids) > 1000:
            return _errors(400, ["ids: a list of at most 1000 comment ids is required."])
        wanted = {str(i) for i in ids}
        expand = {e.strip() for e in str(query.get("expand") or "").split(",")}
        values = [self._comment_json(issue, n, properties="properties" in expand)
                  for issue in self.issues.values() for n in range(len(issue.comments))
                  if self._meta(issue, n)["id"] in wanted]
        return HttpResponse.json_body(200, {"startAt": 0, "maxResults": 1000, "total": len(values), "isLast": True,
                                            "values": values})

    def _transition(self, issue: FakeIssue, body: dict[str, Any]) -> HttpResponse:
        transition = body.get("transition")
        transition_id = str(transition.get("id")) if isinstance(transition, dict) else ""
        if transition_id not in _TRANSITIONS:
            return _errors(400, [f"Transition id '{transition_id}' is not valid for this issue."])
        issue.status = _TRANSITIONS[transition_id]
        return HttpResponse(204)

    def _search(self, params: dict[str, Any]) -> HttpResponse:
        try:
            predicate, order_desc = _parse_jql(str(params.get("jql") or ""), self.projects)
        except _JqlError as exc:
            return _errors(400, [str(exc)])
        requested = params.get("fields") or []  # search/jql returns only ids unless fields are asked for
        if isinstance(requested, str):
            requested = [f.strip() for f in requested.split(",") if f.strip()]
        max_results = int(params.get("maxResults") or 50)
        start = _decode_page_token(params.get("nextPageToken"))
        matching = sorted((i for i in self.issues.values() if predicate(i)), key=lambda i: int(i.id))
        if order_desc:
            matching.reverse()
        page = matching[start : start + max_results]
        result: dict[str, Any] = {"issues": [self._issue_json(i, requested) for i in page]}
        if start + max_results < len(matching):
            result["nextPageToken"] = base64.urlsafe_b64encode(str(start + max_results).encode()).decode()
            result["isLast"] = False
        else:
            result["isLast"] = True
        return HttpResponse.json_body(200, result)

    # -- helpers ---------------------------------------------------------------------------------------
    def _find(self, key_or_id: str) -> FakeIssue | None:
        issue = self.issues.get(key_or_id)
        return issue or next((i for i in self.issues.values() if i.id == key_or_id), None)

    def _self_url(self, issue_id: str) -> str:
        return f"{self.base_url}/rest/api/3/issue/{issue_id}"

    def _issue_json(self, issue: FakeIssue, requested: list[str] | None) -> dict[str, Any]:
        """Serialise like Jira: all fields for GET issue (``requested=None``), only ``id`` for a bare search."""
        if requested is not None and not requested:
            return {"id": issue.id}
        status_id, category_key, category_name, category_id = _STATUSES[issue.status]
        every_field = copy.deepcopy(issue.fields) | {
            "status": {
                "name": issue.status,
                "id": status_id,
                "statusCategory": {"id": category_id, "key": category_key, "name": category_name},
            },
            "labels": issue.labels,
            "created": _CREATED,
            "updated": _CREATED,
            "comment": {
                "comments": [{"body": c} for c in issue.comments],
                "total": len(issue.comments),
                "maxResults": len(issue.comments),
                "startAt": 0,
            },
        }
        if requested is None or {"*all", "*navigable"} & set(requested):
            selected = every_field
        else:
            selected = {name: every_field.get(name) for name in requested if name not in ("id", "key")}
        return {"expand": "", "id": issue.id, "self": self._self_url(issue.id), "key": issue.key, "fields": selected}


def _errors(status: int, messages: list[str]) -> HttpResponse:
    return HttpResponse.json_body(status, {"errorMessages": messages, "errors": {}})


def _fault_response(fault: _Fault) -> HttpResponse:
    headers = {}
    if fault.retry_after is not None or fault.status == 429:
        headers["Retry-After"] = str(fault.retry_after or 0)
    body = fault.body or {"errorMessages": [f"injected failure (HTTP {fault.status})"], "errors": {}}
    return HttpResponse.json_body(fault.status, body, headers)


#: Jira's limits on an entity property: its key's length and the size of its JSON value.
MAX_PROPERTY_KEY = 255
MAX_PROPERTY_BYTES = 32768


def _properties(value: Any) -> dict[str, Any] | str:
    """A request's ``properties`` list as key → value, or the error text Jira answers 400 with."""
    if value is None:
        return {}
    if not isinstance(value, list) or not all(isinstance(p, dict) and isinstance(p.get("key"), str) for p in value):
        return "properties: each entry must be an object with a string 'key' and a 'value'"
    out: dict[str, Any] = {}
    for prop in value:
        key = prop["key"]
        if not key or len(key) > MAX_PROPERTY_KEY:
            return f"The property key must be 1 to {MAX_PROPERTY_KEY} characters long."
        if len(json.dumps(prop.get("value")).encode()) > MAX_PROPERTY_BYTES:
            return f"The property '{key}' exceeds the {MAX_PROPERTY_BYTES} byte limit."
        out[key] = copy.deepcopy(prop.get("value"))
    return out


def _is_adf(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") == "doc"
        and value.get("version") == 1
        and isinstance(value.get("content"), list)
        and all(isinstance(node, dict) and "type" in node for node in value["content"])
    )


def _transitions(current: str) -> list[dict[str, Any]]:
    """The transitions offered from status `current`: every one but the one to `current` (as a workflow offers)."""
    result = []
    for transition_id, name in _TRANSITIONS.items():
        if name == current:
            continue
        status_id, category_key, category_name, category_id = _STATUSES[name]
        result.append(
            {
                "id": transition_id,
                "name": name,
                "to": {
                    "name": name,
                    "id": status_id,
                    "statusCategory": {"id": category_id, "key": category_key, "name": category_name},
                },
                "hasScreen": False,
                "isGlobal": True,
                "isInitial": False,
                "isAvailable": True,
                "isConditional": False,
            }
        )
    return result


def _search_query(query: dict[str, str]) -> dict[str, Any]:
    return {
        "jql": query.get("jql", ""),
        "fields": query.get("fields"),
        "maxResults": query.get("maxResults"),
        "nextPageToken": query.get("nextPageToken"),
    }


def _decode_page_token(token: Any) -> int:
    if not token:
        return 0
    try:
        return int(base64.urlsafe_b64decode(str(token).encode()).decode())
    except (binascii.Error, ValueError):
        return 0


# -- JQL ---------------------------------------------------------------------------------------------------
_CLAUSE_RE = re.compile(r"^(?P<field>[A-Za-z]+)\s*(?P<op>!=|=|not\s+in\b|in\b)\s*(?P<value>.+)$", re.IGNORECASE)
_FIELDS = {"project", "labels", "status", "statuscategory", "key", "issuekey"}


def _split_and(jql: str) -> list[str]:
    """Split on top-level ``AND`` outside quotes."""
    parts, current, quote = [], "", ""
    tokens = re.split(r"(\"|'|\s+AND\s+)", jql, flags=re.IGNORECASE)
    for token in tokens:
        if token in ('"', "'"):
            quote = "" if quote == token else quote or token
            current += token
        elif re.fullmatch(r"\s+AND\s+", token, flags=re.IGNORECASE) and not quote:
            parts.append(current.strip())
            current = ""
        else:
            current += token
    parts.append(current.strip())
    return parts


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _values(raw: str, op: str) -> set[str]:
    raw = raw.strip()
    if op in ("in", "not in"):
        if not (raw.startswith("(") and raw.endswith(")")):
            raise _JqlError(f"Error in the JQL Query: Expecting '(' but got '{raw}'.")
        return {_unquote(v) for v in raw[1:-1].split(",") if v.strip()}
    return {_unquote(raw)}


def _issue_values(issue: FakeIssue, name: str) -> set[str]:
    project = issue.fields.get("project") or {}
    if name == "project":
        return {str(project.get("key"))}
    if name == "labels":
        return set(issue.labels)
    if name == "status":
        return {issue.status}
    if name == "statuscategory":
        _, category_key, category_name, _ = _STATUSES[issue.status]
        return {category_name, category_key}
    return {issue.key, issue.id}


def _parse_jql(jql: str, projects: set[str] | None) -> tuple[Any, bool]:
    """Compile the supported JQL subset into a predicate over :class:`FakeIssue`; returns (predicate, desc).

    Raises:
        _JqlError: the query uses something this fake does not understand.
    """
    order_desc = False
    order = re.search(r"\s*\bORDER\s+BY\s+(?P<field>\w+)(?:\s+(?P<dir>ASC|DESC))?\s*$", jql, re.IGNORECASE)
    if order is not None:
        if order["field"].lower() not in ("created", "key", "updated", "id"):
            raise _JqlError(f"Error in the JQL Query: the fake cannot order by '{order['field']}'.")
        order_desc = (order["dir"] or "").upper() == "DESC"
        jql = jql[: order.start()]
    if not jql.strip():
        return (lambda issue: True), order_desc
    clauses = []
    for part in _split_and(jql):
        match = _CLAUSE_RE.match(part)
        if match is None or match["field"].lower() not in _FIELDS:
            raise _JqlError(f"Error in the JQL Query: the fake Jira does not support the clause '{part}'.")
        name = match["field"].lower()
        op = re.sub(r"\s+", " ", match["op"].lower())
        wanted = _values(match["value"], op)
        if name == "project" and projects is not None and not wanted <= projects:
            raise _JqlError(f"The value '{sorted(wanted - projects)[0]}' does not exist for the field 'project'.")
        if name == "statuscategory":
            wanted = {w.lower() for w in wanted}
        clauses.append((name, op in ("=", "in"), wanted))

    def predicate(issue: FakeIssue) -> bool:
        for name, positive, wanted in clauses:
            have = _issue_values(issue, name)
            if name == "statuscategory":
                have = {h.lower() for h in have}
            if bool(have & wanted) != positive:
                return False
        return True

    return predicate, order_desc


def adf_text(text: str) -> dict[str, Any]:
    """A one-paragraph ADF document holding ``text``; handy for tests building request bodies."""
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}],
    }
