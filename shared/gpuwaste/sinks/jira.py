"""Adapter: ticket drafts → Jira Cloud REST v3 (Basic auth e-mail:API token, ADF descriptions).

Dedupe search uses `POST /rest/api/3/search/jql` (the old `/search` endpoints answer 410 since CHANGE-2046).
Idempotency keys ride in an entity property (`DELIVERY_PROPERTY`, value `{"keys": [...]}`) of the issue (set on
create) and of each comment (set on post); `delivered` reads them back (`GET issue/{key}/properties/…`, the issue's
comment ids with `GET issue/{key}/comment`, their properties with `POST comment/list?expand=properties`), so a retry
after a crash or a lost answer finds what Jira accepted.
429/5xx/timeouts raise DeliveryError (retry through the queue); other 4xx raise PermanentDeliveryError
with Jira's own error text (401/403: credentials; 410: a retired endpoint).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import requests

from gpuwaste.errors import DeliveryError, PermanentDeliveryError
from gpuwaste.models.notices import TicketDraft, TicketSection
from gpuwaste.models.settings import JiraSettings

logger = logging.getLogger(__name__)

#: The entity property (issue and comment) that carries gpuwaste's idempotency keys.
DELIVERY_PROPERTY = "gpuwaste.delivery"
#: Jira caps an entity property's value at 32 KB: the keys one property carries (a longer list is cut, logged).
MAX_PROPERTY_KEYS = 500
#: Comments read per page by `delivered`, and the pages read at most.
COMMENT_PAGE = 100
COMMENT_PAGES = 20


def _property(keys: Sequence[str]) -> list[dict[str, Any]]:
    if len(keys) > MAX_PROPERTY_KEYS:
        logger.warning("more idempotency keys than one Jira property holds; the rest are not stored",
                       extra={"keys": len(keys), "kept": MAX_PROPERTY_KEYS})
    return [{"key": DELIVERY_PROPERTY, "value": {"keys": list(keys[:MAX_PROPERTY_KEYS])}}]


def _keys_of(value: Any) -> set[str]:
    keys = value.get("keys") if isinstance(value, dict) else None
    return {str(k) for k in keys} if isinstance(keys, list) else set()


def _text(text: str, *, strong: bool = False, href: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "text", "text": text}
    marks: list[dict[str, Any]] = []
    if strong:
        marks.append({"type": "strong"})
    if href:
        marks.append({"type": "link", "attrs": {"href": href}})
    if marks:
        node["marks"] = marks
    return node


def _paragraph(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"type": "paragraph", "content": list(nodes)}


#: ADF text nodes refuse control characters other than newline; names from the cluster may carry them.
_CONTROL = str.maketrans(dict.fromkeys([*range(0, 9), *range(11, 32), 127], " "))


#: A ticket line that is nothing but an http(s) URL.
_URL_LINE = re.compile(r"https?://[^\s<>\"]+")


def _clean(text: str) -> str:
    return text.translate(_CONTROL)


def _bullets(items: Sequence[str]) -> dict[str, Any]:
    return {"type": "bulletList",
            "content": [{"type": "listItem", "content": [_paragraph(_text(_clean(i)))]} for i in items if i]}


def section_nodes(section: TicketSection) -> list[dict[str, Any]]:
    """One ticket section as ADF: a level-3 heading, its lines (paragraphs or a bullet list), its commands (code block)."""
    nodes: list[dict[str, Any]] = [{"type": "heading", "attrs": {"level": 3}, "content": [_text(_clean(section.heading))]}]
    lines = [x for x in section.lines if x]
    if section.bullets and lines:
        nodes.append(_bullets(lines))
    else:
        # a line that is one URL (the Slack thread's permalink) is a link: Jira does not linkify API-written text
        nodes.extend(_paragraph(_text(_clean(x), href=x if _URL_LINE.fullmatch(x) else None)) for x in lines)
    if section.commands:
        nodes.append({"type": "codeBlock", "attrs": {"language": "shell"},
                      "content": [_text(_clean("\n".join(section.commands)).replace("\t", " "))]})
    return nodes


def adf_document(paragraphs: Sequence[str], facts: Sequence[tuple[str, str]] = (),
                 links: Sequence[tuple[str, str]] = (), sections: Sequence[TicketSection] = ()) -> dict[str, Any]:
    """An Atlassian Document Format doc: paragraphs, headed sections, a bullet list of `name: value` facts, links."""
    content: list[dict[str, Any]] = [_paragraph(_text(_clean(p))) for p in paragraphs if p]
    for section in sections:
        content.extend(section_nodes(section))
    if facts:
        content.append({
            "type": "bulletList",
            "content": [
                {"type": "listItem", "content": [_paragraph(_text(f"{_clean(name)}: ", strong=True), _text(_clean(value or "-")))]}
                for name, value in facts
            ],
        })
    if links:
        nodes: list[dict[str, Any]] = []
        for n, (label, url) in enumerate(links):
            if n:
                nodes.append(_text(" · "))
            nodes.append(_text(_clean(label), href=url))
        content.append(_paragraph(*nodes))
    if not content:
        content.append(_paragraph(_text("-")))
    return {"type": "doc", "version": 1, "content": content}


class JiraTicketSink:
    """TicketSink over Jira Cloud REST v3.

    Args:
        base_url: the site (https://example.atlassian.net). session: a requests session with Basic auth set.
    """

    def __init__(self, base_url: str, session: requests.Session, *, timeout_s: float = 15.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session
        self.timeout_s = timeout_s

    @classmethod
    def from_settings(cls, settings: JiraSettings, *, api_token: str) -> JiraTicketSink:
        """A sink with Basic auth (`email`, API token) and JSON headers.

        Raises:
            PermanentDeliveryError: base URL or e-mail missing.
        """
        if not settings.base_url or not settings.email:
            raise PermanentDeliveryError("jira: delivery.jira.base_url and delivery.jira.email are required")
        session = requests.Session()
        session.auth = (settings.email, api_token)
        session.headers.update({"Accept": "application/json", "Content-Type": "application/json"})
        return cls(settings.base_url, session, timeout_s=settings.timeout_s)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url}/rest/api/3/{path.lstrip('/')}"
        try:
            response = self.session.request(method, url, json=body, timeout=self.timeout_s)
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise DeliveryError(f"jira {method} {path}: {type(exc).__name__}") from exc
        status = response.status_code
        if status == 429 or status >= 500:
            retry = response.headers.get("Retry-After")
            hint = f", Retry-After {retry}s" if retry else ""
            raise DeliveryError(f"jira {method} {path}: HTTP {status}{hint} (will retry via the queue)")
        if status >= 400:
            raise PermanentDeliveryError(f"jira {method} {path}: HTTP {status}: {_error_text(response)}")
        if status == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise DeliveryError(f"jira {method} {path}: HTTP {status} with a body that is not JSON") from exc

    def find_open(self, label: str) -> str | None:
        """See `gpuwaste.ports.TicketSink.find_open` (JQL: the label, status category not Done)."""
        jql = f'labels = "{label}" AND statusCategory != Done ORDER BY created DESC'
        data = self._request("POST", "search/jql", {"jql": jql, "fields": ["key", "status"], "maxResults": 1})
        issues = (data or {}).get("issues") or []
        return str(issues[0]["key"]) if issues else None

    def create(self, draft: TicketDraft) -> str:
        """See `gpuwaste.ports.TicketSink.create`."""
        fields: dict[str, Any] = {
            "project": {"key": draft.project},
            "summary": draft.summary,
            "issuetype": {"name": draft.issue_type},
            "labels": [label.replace(" ", "-") for label in draft.labels],
            "description": adf_document(draft.paragraphs, draft.facts, draft.links, draft.sections),
        }
        if draft.priority:
            fields["priority"] = {"name": draft.priority}
        if draft.components:
            fields["components"] = [{"name": c} for c in draft.components]
        body: dict[str, Any] = {"fields": fields}
        if draft.delivery_keys:
            body["properties"] = _property(draft.delivery_keys)
        data = self._request("POST", "issue", body)
        return str(data["key"])

    def comment(self, key: str, paragraphs: Sequence[str], *, delivery_keys: Sequence[str] = ()) -> None:
        """See `gpuwaste.ports.TicketSink.comment` (the keys in the comment's `gpuwaste.delivery` property)."""
        body: dict[str, Any] = {"body": adf_document(paragraphs)}
        if delivery_keys:
            body["properties"] = _property(delivery_keys)
        self._request("POST", f"issue/{key}/comment", body)

    def delivered(self, key: str) -> set[str]:
        """See `gpuwaste.ports.TicketSink.delivered`: the issue's `gpuwaste.delivery` property (404: none) and its
        comments' (the newest `COMMENT_PAGE` × `COMMENT_PAGES` comments at most; `GET issue/{key}/comment` does not
        expand properties, so their ids are read there and their properties with `POST comment/list`)."""
        keys: set[str] = set()
        try:
            data = self._request("GET", f"issue/{key}/properties/{DELIVERY_PROPERTY}")
            keys |= _keys_of((data or {}).get("value"))
        except PermanentDeliveryError as exc:
            if "HTTP 404" not in str(exc):
                raise
        total = None
        for page in range(COMMENT_PAGES):
            start = page * COMMENT_PAGE
            if total is not None and start >= total:
                break
            data = self._request("GET", f"issue/{key}/comment?startAt={start}&maxResults={COMMENT_PAGE}"
                                        "&orderBy=-created") or {}
            comments = data.get("comments") or []
            ids = [int(c["id"]) for c in comments if str(c.get("id") or "").isdigit()]
            if ids:
                listed = self._request("POST", "comment/list?expand=properties", {"ids": ids}) or {}
                for comment in listed.get("values") or []:
                    for prop in comment.get("properties") or []:
                        if isinstance(prop, dict) and prop.get("key") == DELIVERY_PROPERTY:
                            keys |= _keys_of(prop.get("value"))
            total = int(data.get("total") or 0)
            if not comments:
                break
        return keys

    def transition(self, key: str, transition: str) -> None:
        """See `gpuwaste.ports.TicketSink.transition` (by id, else by transition or target status name).

        Raises:
            PermanentDeliveryError: no such transition on the issue.
        """
        data = self._request("GET", f"issue/{key}/transitions")
        wanted = transition.strip().lower()
        for t in (data or {}).get("transitions", []):
            names = {str(t.get("id")), str(t.get("name", "")).lower(), str(t.get("to", {}).get("name", "")).lower()}
            if wanted in names:
                self._request("POST", f"issue/{key}/transitions", {"transition": {"id": str(t["id"])}})
                return
        # not offered: already done (a retry after the transition was applied but its answer was lost)?
        issue = self._request("GET", f"issue/{key}?fields=status") or {}
        status = (issue.get("fields") or {}).get("status") or {}
        if wanted in {str(status.get("name", "")).lower(), str(status.get("id", ""))}:
            return
        raise PermanentDeliveryError(f"jira: issue {key} has no transition {transition!r}")


def _error_text(response: requests.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    messages = list(data.get("errorMessages") or [])
    messages += [f"{k}: {v}" for k, v in (data.get("errors") or {}).items()]
    return "; ".join(messages)[:500] or response.reason
