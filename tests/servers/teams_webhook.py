"""Test server: fake Microsoft Teams Workflows webhooks ("When a Teams webhook request is received" → post a card).

A flow's URL looks like Power Automate's: ``<url>/workflows/<flow id>/triggers/manual/paths/invoke?api-version=1&sig=<key>``
(``FakeTeams.add_flow(name)`` returns one; the ``sig`` query parameter is the secret). Like the service:

* an accepted request is HTTP **202** with an empty body (no message id: a webhook post cannot be edited or threaded);
* a wrong or missing ``sig`` is **401**, an unknown flow **404**, a non-POST **405**;
* a body over ``limit_bytes`` (28 KB, Teams' message limit) is **413** ``RequestEntityTooLarge``;
* throttling is **429** with ``Retry-After`` (``fail_next(429, retry_after=…)``); outages are 5xx (``fail_next(503)``).

Stricter than the service, on purpose: a real flow accepts any JSON and fails its run later, so a malformed card
vanishes silently; this fake checks the message shape instead and answers **400** (so a broken card fails the test):
``{"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}]}``
with ``card.type == "AdaptiveCard"``, ``version`` 1.0–1.5, and body elements of the Adaptive Card types Teams renders
(TextBlock, RichTextBlock/TextRun, FactSet, Container, ColumnSet/Column, ActionSet, Image) with their required fields.

What it accepted is in ``posts`` (per flow, in order), counted here — never from what the product says it sent.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tests.servers import FakeHttpServer, HttpRequest, HttpResponse

__all__ = ["CARD_CONTENT_TYPE", "LIMIT_BYTES", "FakeTeams", "TeamsPost"]

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
LIMIT_BYTES = 28 * 1024
_VERSIONS = {"1.0", "1.1", "1.2", "1.3", "1.4", "1.5"}
_PATH = re.compile(r"^/workflows/(?P<flow>[0-9a-f]{32})/triggers/manual/paths/invoke$")
#: Markdown a TextBlock/FactSet would render: a link, emphasis, or a mention tag (not backslash-escaped).
_MARKDOWN = re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\(|(?<![\\\w])\*\*?\w|<at>|(?<!\\)<[a-z/]")


class CardError(ValueError):
    """The card does not follow the Adaptive Card schema the fake checks."""


@dataclass(frozen=True)
class TeamsPost:
    """One accepted message: the flow (by name) it went to, the card, and the body's size in bytes."""

    flow: str
    card: dict[str, Any]
    size: int

    def texts(self) -> list[str]:
        """Every text the card shows (TextBlock/TextRun text, FactSet titles and values), in order."""
        out: list[str] = []
        _walk(self.card.get("body") or [], lambda kind, text: out.append(text))
        return out

    def markdown_texts(self) -> list[str]:
        """Texts Teams reads as markdown (TextBlock and FactSet; never TextRun)."""
        out: list[str] = []
        _walk(self.card.get("body") or [], lambda kind, text: out.append(text) if kind != "TextRun" else None)
        return out

    def rendered_markup(self) -> list[str]:
        """Markdown texts that would render a link, emphasis or a mention not written by escaping."""
        return [t for t in self.markdown_texts() if _MARKDOWN.search(t)]


def _walk(elements: list[Any], visit: Any) -> None:
    for el in elements:
        kind = el.get("type")
        if kind == "TextBlock":
            visit(kind, el["text"])
        elif kind == "RichTextBlock":
            for run in el["inlines"]:
                visit("TextRun", run["text"] if isinstance(run, dict) else run)
        elif kind == "FactSet":
            for fact in el["facts"]:
                visit(kind, fact["title"])
                visit(kind, fact["value"])
        elif kind == "Container":
            _walk(el["items"], visit)
        elif kind == "ColumnSet":
            for col in el.get("columns") or []:
                _walk(col.get("items") or [], visit)


def _check_element(el: Any, where: str) -> None:
    if not isinstance(el, dict) or not isinstance(el.get("type"), str):
        raise CardError(f"{where}: an element needs a type")
    kind = el["type"]
    if kind == "TextBlock":
        if not isinstance(el.get("text"), str):
            raise CardError(f"{where}: TextBlock.text is required")
    elif kind == "RichTextBlock":
        inlines = el.get("inlines")
        if not isinstance(inlines, list) or not inlines:
            raise CardError(f"{where}: RichTextBlock.inlines is required")
        for n, run in enumerate(inlines):
            if isinstance(run, dict) and (run.get("type") != "TextRun" or not isinstance(run.get("text"), str)):
                raise CardError(f"{where}.inlines[{n}]: a TextRun needs text")
    elif kind == "FactSet":
        facts = el.get("facts")
        if not isinstance(facts, list) or not facts:
            raise CardError(f"{where}: FactSet.facts is required")
        for n, fact in enumerate(facts):
            if not (isinstance(fact, dict) and isinstance(fact.get("title"), str) and isinstance(fact.get("value"), str)):
                raise CardError(f"{where}.facts[{n}]: title and value must be strings")
    elif kind == "Container":
        items = el.get("items")
        if not isinstance(items, list):
            raise CardError(f"{where}: Container.items is required")
        for n, child in enumerate(items):
            _check_element(child, f"{where}.items[{n}]")
    elif kind == "ColumnSet":
        for n, col in enumerate(el.get("columns") or []):
            for m, child in enumerate(col.get("items") or []):
                _check_element(child, f"{where}.columns[{n}].items[{m}]")
    elif kind == "ActionSet":
        _check_actions(el.get("actions"), f"{where}.actions")
    elif kind == "Image":
        if not str(el.get("url", "")).startswith(("https://", "data:")):
            raise CardError(f"{where}: Image.url must be https or data")
    else:
        raise CardError(f"{where}: unknown element type {kind!r}")


def _check_actions(actions: Any, where: str) -> None:
    if not isinstance(actions, list):
        raise CardError(f"{where}: actions must be a list")
    for n, action in enumerate(actions):
        if not isinstance(action, dict) or action.get("type") not in ("Action.OpenUrl", "Action.ShowCard"):
            raise CardError(f"{where}[{n}]: only Action.OpenUrl / Action.ShowCard work in a webhook card")
        if action["type"] == "Action.OpenUrl" and not str(action.get("url", "")).startswith(("https://", "http://")):
            raise CardError(f"{where}[{n}]: Action.OpenUrl needs an http(s) url")


def check_message(payload: Any) -> dict[str, Any]:
    """The card of a Workflows webhook message, or CardError."""
    if not isinstance(payload, dict) or payload.get("type") != "message":
        raise CardError("the body must be {\"type\": \"message\", \"attachments\": [...]}")
    attachments = payload.get("attachments")
    if not isinstance(attachments, list) or len(attachments) != 1:
        raise CardError("attachments: exactly one Adaptive Card per message")
    att = attachments[0]
    if not isinstance(att, dict) or att.get("contentType") != CARD_CONTENT_TYPE:
        raise CardError(f"attachments[0].contentType must be {CARD_CONTENT_TYPE}")
    card = att.get("content")
    if not isinstance(card, dict) or card.get("type") != "AdaptiveCard":
        raise CardError("attachments[0].content.type must be AdaptiveCard")
    if card.get("version") not in _VERSIONS:
        raise CardError(f"card version {card.get('version')!r} is not one Teams renders (1.0–1.5)")
    body = card.get("body")
    if not isinstance(body, list) or not body:
        raise CardError("card.body must be a non-empty list")
    for n, el in enumerate(body):
        _check_element(el, f"body[{n}]")
    if "actions" in card:
        _check_actions(card["actions"], "actions")
    return card


@dataclass
class _Fault:
    status: int
    times: int
    retry_after: float | None = None


class FakeTeams(FakeHttpServer):
    """Fake Teams Workflows webhooks. ``posts`` holds what each flow accepted; ``requests`` counts every request."""

    server_name = "fake-teams"

    def __init__(self, *, limit_bytes: int = LIMIT_BYTES) -> None:
        super().__init__()
        self.limit_bytes = limit_bytes
        self._flows: dict[str, tuple[str, str]] = {}  # flow id → (name, sig)
        self.posts: list[TeamsPost] = []
        self.requests = 0
        self.refused: list[tuple[int, str]] = []
        self.faults_served: Counter[str] = Counter()
        self._faults: list[_Fault] = []

    def reset(self) -> None:
        """Forget flows, posts, faults and counters; the size limit returns to Teams'."""
        with self._lock:
            self._flows.clear()
            self.posts.clear()
            self.requests = 0
            self.refused.clear()
            self.faults_served.clear()
            self._faults.clear()
            self.limit_bytes = LIMIT_BYTES

    def add_flow(self, name: str) -> str:
        """A new flow posting to channel `name`; returns its webhook URL (with its secret ``sig``)."""
        flow, sig = secrets.token_hex(16), secrets.token_urlsafe(24)
        with self._lock:
            self._flows[flow] = (name, sig)
        return f"{self.base_url}/workflows/{flow}/triggers/manual/paths/invoke?api-version=1&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={sig}"

    def heal(self) -> None:
        """Drop the faults still queued (the outage is over)."""
        with self._lock:
            self._faults.clear()

    def fail_next(self, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        """Answer the next `times` requests with `status` (429 carries `Retry-After` when given)."""
        with self._lock:
            self._faults.append(_Fault(status, times, retry_after))

    def posts_to(self, name: str) -> list[TeamsPost]:
        """What the flow `name` accepted, in order."""
        with self._lock:
            return [p for p in self.posts if p.flow == name]

    def handle(self, request: HttpRequest) -> HttpResponse:
        with self._lock:
            self.requests += 1
            if request.method != "POST":
                return HttpResponse.json_body(405, {"error": {"code": "MethodNotAllowed"}})
            match = _PATH.match(request.path)
            if match is None or match["flow"] not in self._flows:
                return HttpResponse.json_body(404, {"error": {"code": "WorkflowNotFound"}})
            name, sig = self._flows[match["flow"]]
            if request.query.get("sig") != sig:
                return HttpResponse.json_body(401, {"error": {"code": "DirectApiAuthorizationRequired",
                                                              "message": "The request SAS is invalid."}})
            if self._faults:
                fault = self._faults[0]
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.pop(0)
                self.faults_served[f"teams {fault.status}"] += 1
                headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                return HttpResponse.json_body(fault.status, {"error": {"code": "Fault", "status": fault.status}},
                                              headers=headers)
            if not request.headers.get("content-type", "").startswith("application/json"):
                self.refused.append((415, "content type"))
                return HttpResponse.json_body(415, {"error": {"code": "UnsupportedMediaType"}})
            if len(request.body) > self.limit_bytes:
                self.refused.append((413, f"{len(request.body)} bytes"))
                return HttpResponse.json_body(413, {"error": {"code": "RequestEntityTooLarge",
                                                              "message": f"{len(request.body)} > {self.limit_bytes}"}})
            try:
                card = check_message(json.loads(request.body))
            except (ValueError, CardError) as exc:
                self.refused.append((400, str(exc)))
                return HttpResponse.json_body(400, {"error": {"code": "InvalidTemplate", "message": str(exc)}})
            self.posts.append(TeamsPost(flow=name, card=card, size=len(request.body)))
            return HttpResponse(status=202)
