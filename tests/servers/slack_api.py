"""Test server: fake Slack Web API speaking the slack_sdk wire format (JSON/form bodies, ok/error envelopes).

Point ``slack_sdk.WebClient(token=FakeSlack.token, base_url=fake.url)`` at it; ``url`` ends with ``/api/``.

Methods: ``auth.test``, ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``,
``conversations.info``, ``conversations.history`` (top-level messages, newest first, ``metadata`` only with
``include_all_metadata``, ``cursor`` pagination), ``conversations.replies`` (a thread: its parent first, then its
replies oldest first; a message without replies alone; ``thread_not_found`` for an unknown ``ts``; ``metadata`` only
with ``include_all_metadata``, ``cursor`` pagination), ``users.lookupByEmail``, and the ``files_upload_v2`` flow
(``files.getUploadURLExternal`` → POST to the returned upload URL → ``files.completeUploadExternal``).
Any other method answers HTTP 404 ``{"ok": false, "error": "unknown_method"}``.

Like Slack:

* Logical errors are HTTP 200 with ``{"ok": false, "error": ...}``: ``not_authed`` (no token),
  ``invalid_auth`` (wrong token), ``channel_not_found`` (a channel listed in ``missing_channels``),
  ``message_not_found``, ``users_not_found``, ``no_text``.
* Rate limiting is HTTP 429 with ``Retry-After`` and ``{"ok": false, "error": "ratelimited"}``.
* ``ts`` values are ``"1700000000.000100"``, ``"1700000000.000200"``, ... (strictly increasing);
  channel names resolve to stable ids (``C0000000001``, ...).

Message limits checked on ``chat.postMessage`` and ``chat.update`` (Slack's documented Block Kit limits):

========================================  =====================================================
limit                                      error when exceeded
========================================  =====================================================
at most 50 blocks per message              ``invalid_blocks``
section ``text`` at most 3000 characters   ``invalid_blocks``
section ``fields``: at most 10, each 2000  ``invalid_blocks``
header ``text`` at most 150 characters     ``invalid_blocks`` (header text must be ``plain_text``)
a section needs ``text`` or ``fields``     ``invalid_blocks``
actions: at most 25 elements               ``invalid_blocks``
button text (plain_text) at most 75        ``invalid_blocks``
button ``value`` 2000, ``action_id`` 255   ``invalid_blocks``
overflow 2–5 options, text 75, value 150   ``invalid_blocks``
``block_id`` at most 255 characters        ``invalid_blocks``
top-level ``text`` at most 40000 chars     ``msg_too_long`` (Slack's error for an over-long text)
========================================  =====================================================

Beyond the documented limits, like Slack (field guide B33): a message whose blocks carry more than
``blocks_text_limit`` characters of text in total (11,300 by default) is refused with ``msg_blocks_too_long``.

``invalid_blocks`` responses carry ``response_metadata.messages`` with a JSON pointer to the offending
block, as Slack does.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import parse_qsl

from tests.servers import FakeHttpServer, HttpRequest, HttpResponse

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["MAX_BLOCKS", "MAX_HEADER_TEXT", "MAX_SECTION_TEXT", "MAX_TEXT", "FakeSlack", "SlackCall", "parse_params"]

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_SECTION_FIELDS = 10
MAX_SECTION_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_TEXT = 40000
MAX_ACTION_ELEMENTS = 25
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MIN_OVERFLOW_OPTIONS, MAX_OVERFLOW_OPTIONS = 2, 5
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_ID = 255
BLOCKS_TEXT_LIMIT = 11_300

DEFAULT_TOKEN = "xoxb-test-token"
_BOT = {"user_id": "U0FAKEBOT", "bot_id": "B0FAKEBOT", "team_id": "T0FAKETEAM"}
_FIRST_TS_SECONDS = 1_700_000_000


class SlackCall(NamedTuple):
    """One Web API call: the method name and its parameters (query + body merged, JSON-decoded)."""

    method: str
    body: dict[str, Any]


@dataclass
class _Fault:
    method: str
    remaining: int
    status: int
    error: str | None
    retry_after: int


@dataclass
class UploadedFile:
    """A file received on the upload URL, completed or not."""

    file_id: str
    filename: str
    content: bytes = b""
    title: str | None = None
    channel_id: str | None = None
    completed: bool = False


@dataclass
class _State:
    calls: list[SlackCall] = field(default_factory=list)
    faults: list[_Fault] = field(default_factory=list)
    messages: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    channel_ids: dict[str, str] = field(default_factory=dict)  # name → id
    files: dict[str, UploadedFile] = field(default_factory=dict)
    views: list[dict[str, Any]] = field(default_factory=list)  # modals opened by views.open
    ts_counter: int = 0


class FakeSlack(FakeHttpServer):
    """A Slack Web API fake on 127.0.0.1:<random port>.

    Args:
        token: the bot token every call must carry (``Authorization: Bearer`` or a ``token`` param).
        users: e-mail → user id, answered by ``users.lookupByEmail``.

    Attributes:
        missing_channels: channel names or ids that answer ``channel_not_found``.
        calls: every ``/api/<method>`` call received, in order, including failed ones.
        messages: ``(channel_id, ts)`` → the stored message, updated by ``chat.update``.
        files: file id → :class:`UploadedFile`.
    """

    server_name = "fake-slack"

    def __init__(self, token: str = DEFAULT_TOKEN, users: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._initial = (token, dict(users or {}))
        self.token = token
        self.users: dict[str, str] = dict(users or {})
        self.missing_channels: set[str] = set()
        self.blocks_text_limit = BLOCKS_TEXT_LIMIT
        #: faults this fake answered, by "<status>" or "<error>" (counted where they are injected)
        self.faults_served: Counter[str] = Counter()
        self._state = _State()
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "conversations.info": self._conversations_info,
            "conversations.history": self._conversations_history,
            "conversations.replies": self._conversations_replies,
            "users.lookupByEmail": self._lookup_by_email,
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
            "views.open": self._views_open,
        }

    @property
    def url(self) -> str:
        """The ``base_url`` for ``slack_sdk.WebClient``; ends with ``/api/``."""
        return f"{self.base_url}/api/"

    @property
    def calls(self) -> list[SlackCall]:
        """Every call received so far (a copy), as ``(method, body)`` pairs."""
        with self._lock:
            return list(self._state.calls)

    @property
    def messages(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Posted messages keyed by ``(channel_id, ts)`` (a copy)."""
        with self._lock:
            return dict(self._state.messages)

    @property
    def files(self) -> dict[str, UploadedFile]:
        """Uploaded files keyed by file id (a copy)."""
        with self._lock:
            return dict(self._state.files)

    def views(self) -> list[dict[str, Any]]:
        """The modals opened by ``views.open``, in order."""
        with self._lock:
            return list(self._state.views)

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        """The bodies of the calls to ``method`` (e.g. ``"chat.postMessage"``), in order."""
        return [call.body for call in self.calls if call.method == method]

    def channel_id(self, name: str) -> str:
        """The id the fake assigns to channel ``name`` (with or without ``#``)."""
        with self._lock:
            return self._resolve_channel(name)

    def reset(self) -> None:
        """Forget calls, messages, files, faults and ``missing_channels``; restore ``token`` and ``users``.

        Timestamps and channel/file ids restart from the first value.
        """
        with self._lock:
            self._state = _State()
            self.missing_channels = set()
            self.faults_served = Counter()
            self.blocks_text_limit = BLOCKS_TEXT_LIMIT
            self.token, users = self._initial
            self.users = dict(users)

    def fail_next(
        self,
        method: str,
        status: int | None = None,
        *,
        retry_after: int = 0,
        error: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls to ``method`` (``"*"``: any method) fail.

        Args:
            method: Web API method name, e.g. ``"chat.postMessage"``.
            status: HTTP status; 429 sends ``Retry-After`` and ``error: ratelimited``; 5xx sends
                ``error: internal_error``. Defaults to 429 unless ``error`` is given.
            retry_after: seconds for the ``Retry-After`` header of a 429 (keep 0 for fast tests).
            error: an HTTP 200 ``{"ok": false, "error": error}`` answer, e.g. ``"invalid_auth"``.
            times: how many consecutive matching calls fail.
        """
        if status is None:
            status = 200 if error is not None else 429
        with self._lock:
            self._state.faults.append(_Fault(method, times, status, error, retry_after))

    # -- HTTP ------------------------------------------------------------------------------------------
    def handle(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST" and request.path.startswith("/upload/"):
            return self._receive_upload(request.path.removeprefix("/upload/"), request.body)
        if not request.path.startswith("/api/"):
            return HttpResponse(404, b"Not Found", content_type="text/plain")
        method = request.path.removeprefix("/api/").strip("/")
        params = _parse_params(request)
        with self._lock:
            self._state.calls.append(SlackCall(method, params))
            fault = self._take_fault(method)
            if fault is not None:
                return _fault_response(fault)
            auth_error = self._auth_error(request, params)
            if auth_error is not None:
                return HttpResponse.json_body(200, {"ok": False, "error": auth_error})
            handler = self._handlers.get(method)
            if handler is None:
                return HttpResponse.json_body(404, {"ok": False, "error": "unknown_method", "req_method": method})
            return HttpResponse.json_body(200, handler(params))

    def _take_fault(self, method: str) -> _Fault | None:
        for fault in self._state.faults:
            if fault.method in (method, "*"):
                self.faults_served[fault.error or str(fault.status)] += 1
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._state.faults.remove(fault)
                return fault
        return None

    def _auth_error(self, request: HttpRequest, params: Mapping[str, Any]) -> str | None:
        header = request.headers.get("authorization", "")
        supplied = header.removeprefix("Bearer ") if header.startswith("Bearer ") else params.get("token")
        if not supplied:
            return "not_authed"
        return None if supplied == self.token else "invalid_auth"

    # -- helpers (called with the state lock held) ---------------------------------------------------------
    def _next_ts(self) -> str:
        self._state.ts_counter += 1
        micros = self._state.ts_counter * 100
        return f"{_FIRST_TS_SECONDS + micros // 1_000_000}.{micros % 1_000_000:06d}"

    def _resolve_channel(self, channel: str) -> str:
        name = channel.removeprefix("#")
        if name in self._state.channel_ids.values():
            return name
        if _looks_like_channel_id(name):
            self._state.channel_ids.setdefault(name.lower(), name)
            return name
        if name not in self._state.channel_ids:
            self._state.channel_ids[name] = f"C{len(self._state.channel_ids) + 1:010d}"
        return self._state.channel_ids[name]

    def _channel_or_error(self, params: Mapping[str, Any], key: str = "channel") -> str | dict[str, Any]:
        channel = params.get(key)
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if channel in self.missing_channels or str(channel).removeprefix("#") in self.missing_channels:
            return {"ok": False, "error": "channel_not_found"}
        return self._resolve_channel(str(channel))

    # -- methods ---------------------------------------------------------------------------------------
    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": "https://fake-workspace.slack.com/", "team": "Fake", "user": "gpuwaste", **_BOT}

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_or_error(params)
        if isinstance(channel, dict):
            return channel
        if error := _message_error(params) or self._too_long(params):
            return error
        ts = self._next_ts()
        message = _message(params, ts)
        self._state.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_or_error(params)
        if isinstance(channel, dict):
            return channel
        ts = str(params.get("ts") or "")
        if (channel, ts) not in self._state.messages:
            return {"ok": False, "error": "message_not_found"}
        if error := _message_error(params) or self._too_long(params):
            return error
        message = _message(params, ts) | {"edited": {"user": _BOT["user_id"], "ts": self._next_ts()}}
        self._state.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "text": message["text"], "message": message}

    def _too_long(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        blocks = params.get("blocks")
        if isinstance(blocks, list) and _blocks_text(blocks) > self.blocks_text_limit:
            return {"ok": False, "error": "msg_blocks_too_long"}
        return None

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_or_error(params)
        if isinstance(channel, dict):
            return channel
        top = [m for (c, ts), m in self._state.messages.items()
               if c == channel and (not m.get("thread_ts") or m.get("thread_ts") == ts)]
        top.sort(key=lambda m: float(m["ts"]), reverse=True)
        start = int(params.get("cursor") or 0)
        limit = int(params.get("limit") or 100)
        page = top[start:start + limit]
        with_meta = str(params.get("include_all_metadata")).lower() in ("true", "1")
        messages = [m if with_meta else {k: v for k, v in m.items() if k != "metadata"} for m in page]
        more = start + limit < len(top)
        return {"ok": True, "channel": channel, "messages": messages, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_or_error(params)
        if isinstance(channel, dict):
            return channel
        ts = str(params.get("ts") or "")
        message = self._state.messages.get((channel, ts))
        if message is None:
            return {"ok": False, "error": "thread_not_found"}
        parent = str(message.get("thread_ts") or ts)  # a reply's ts names its whole thread, as in Slack
        if (channel, parent) not in self._state.messages:
            return {"ok": False, "error": "thread_not_found"}
        thread = [m for (c, t), m in self._state.messages.items()
                  if c == channel and (t == parent or m.get("thread_ts") == parent)]
        thread.sort(key=lambda m: float(m["ts"]))
        start = int(params.get("cursor") or 0)
        limit = int(params.get("limit") or 1000)
        page = thread[start:start + limit]
        with_meta = str(params.get("include_all_metadata")).lower() in ("true", "1")
        messages = [m if with_meta else {k: v for k, v in m.items() if k != "metadata"} for m in page]
        more = start + limit < len(thread)
        return {"ok": True, "messages": messages, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_or_error(params)
        if isinstance(channel, dict):
            return channel
        if not params.get("user"):
            return {"ok": False, "error": "user_not_in_channel"}
        if error := _message_error(params):
            return error
        return {"ok": True, "message_ts": self._next_ts()}

    def _conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_or_error(params)
        if isinstance(channel, dict):
            return channel
        name = next((n for n, cid in self._state.channel_ids.items() if cid == channel), channel.lower())
        info = {
            "id": channel,
            "name": name,
            "is_channel": True,
            "is_private": False,
            "is_archived": False,
            "is_member": True,
            "created": _FIRST_TS_SECONDS - 86_400,
        }
        return {"ok": True, "channel": info}

    def _views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        """``views.open``: a modal needs a ``trigger_id`` and a view with type ``modal``, a title of at most 24
        characters, 1..100 blocks and ``private_metadata`` of at most 3,000 characters (Slack's documented limits)."""
        view = params.get("view")
        if isinstance(view, str):
            try:
                view = json.loads(view)
            except ValueError:
                return {"ok": False, "error": "invalid_arguments"}
        if not params.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        if not isinstance(view, dict) or view.get("type") != "modal":
            return {"ok": False, "error": "invalid_arguments"}
        title = (view.get("title") or {}).get("text") or ""
        blocks = view.get("blocks") or []
        if not title or len(title) > 24 or not 1 <= len(blocks) <= 100 or len(str(view.get("private_metadata") or "")) > 3000:
            return {"ok": False, "error": "invalid_arguments"}
        self._state.views.append(view)
        return {"ok": True, "view": {"id": f"V{len(self._state.views):08d}", **view}}

    def _lookup_by_email(self, params: dict[str, Any]) -> dict[str, Any]:
        email = str(params.get("email") or "")
        user_id = self.users.get(email)
        if user_id is None:
            return {"ok": False, "error": "users_not_found"}
        name = email.split("@", 1)[0]
        return {
            "ok": True,
            "user": {"id": user_id, "team_id": _BOT["team_id"], "name": name, "profile": {"email": email}},
        }

    def _get_upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename, length = params.get("filename"), params.get("length")
        if not filename or length in (None, ""):
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{len(self._state.files) + 1:010d}"
        self._state.files[file_id] = UploadedFile(file_id=file_id, filename=str(filename))
        return {"ok": True, "upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    def _receive_upload(self, file_id: str, content: bytes) -> HttpResponse:
        with self._lock:
            uploaded = self._state.files.get(file_id)
            if uploaded is None:
                return HttpResponse(404, b"Not Found", content_type="text/plain")
            uploaded.content = content
        return HttpResponse(200, f"OK - {len(content)}".encode(), content_type="text/plain")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        entries = params.get("files")
        if isinstance(entries, str):
            entries = json.loads(entries)
        if not isinstance(entries, list) or not entries:
            return {"ok": False, "error": "invalid_arguments"}
        channel_id: str | None = None
        if params.get("channel_id"):
            channel = self._channel_or_error(params, "channel_id")
            if isinstance(channel, dict):
                return channel
            channel_id = channel
        completed = []
        for entry in entries:
            uploaded = self._state.files.get(str(entry.get("id")))
            if uploaded is None:
                return {"ok": False, "error": "file_not_found"}
            uploaded.title, uploaded.channel_id, uploaded.completed = entry.get("title"), channel_id, True
            completed.append(
                {
                    "id": uploaded.file_id,
                    "name": uploaded.filename,
                    "title": uploaded.title or uploaded.filename,
                    "size": len(uploaded.content),
                    "channels": [channel_id] if channel_id else [],
                }
            )
        return {"ok": True, "files": completed}


def _parse_params(request: HttpRequest) -> dict[str, Any]:
    """Merge query and body parameters; decode JSON bodies and JSON-valued form fields (blocks, files)."""
    params: dict[str, Any] = dict(request.query)
    content_type = request.headers.get("content-type", "")
    if request.body and content_type.startswith("application/json"):
        body = request.json()
        if isinstance(body, dict):
            params.update(body)
    elif request.body and content_type.startswith("application/x-www-form-urlencoded"):
        params.update(parse_qsl(request.body.decode(), keep_blank_values=True))
    for key in ("blocks", "attachments"):
        if isinstance(params.get(key), str):
            with contextlib.suppress(ValueError):  # left as the string; _message_error reports invalid_blocks
                params[key] = json.loads(params[key])
    return params


def parse_params(request: HttpRequest) -> dict[str, Any]:
    """The Web API arguments of `request` (JSON body, form body or query), as the fake reads them."""
    return _parse_params(request)


def _fault_response(fault: _Fault) -> HttpResponse:
    if fault.error is not None:
        return HttpResponse.json_body(fault.status, {"ok": False, "error": fault.error})
    if fault.status == 429:
        return HttpResponse.json_body(
            429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(fault.retry_after)}
        )
    return HttpResponse.json_body(fault.status, {"ok": False, "error": "internal_error"})


def _blocks_text(node: Any) -> int:
    """Characters of text carried by blocks (every ``text`` string, at any depth)."""
    if isinstance(node, list):
        return sum(_blocks_text(n) for n in node)
    if isinstance(node, dict):
        own = len(node["text"]) if isinstance(node.get("text"), str) else 0
        return own + sum(_blocks_text(v) for v in node.values() if isinstance(v, dict | list))
    return 0


def _looks_like_channel_id(value: str) -> bool:
    return len(value) >= 9 and value[0] in "CGD" and value.isalnum() and value.isupper()


def _message(params: Mapping[str, Any], ts: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "message",
        "subtype": "bot_message",
        "text": params.get("text") or "",
        "user": _BOT["user_id"],
        "bot_id": _BOT["bot_id"],
        "ts": ts,
    }
    for key in ("blocks", "attachments", "thread_ts", "metadata"):
        if params.get(key):
            message[key] = params[key]
    return message


def _invalid_blocks(reason: str, pointer: str) -> dict[str, Any]:
    return {
        "ok": False,
        "error": "invalid_blocks",
        "response_metadata": {"messages": [f"[ERROR] {reason} [json-pointer:{pointer}]"]},
    }


def _message_error(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return Slack's error for a message that breaks a documented limit, or ``None``."""
    text, blocks = params.get("text"), params.get("blocks")
    if not text and not blocks and not params.get("attachments"):
        return {"ok": False, "error": "no_text"}
    if isinstance(text, str) and len(text) > MAX_TEXT:
        return {"ok": False, "error": "msg_too_long"}
    if blocks is None or blocks == []:
        return None
    if not isinstance(blocks, list):
        return _invalid_blocks("must be an array", "/blocks")
    if len(blocks) > MAX_BLOCKS:
        return _invalid_blocks(f"no more than {MAX_BLOCKS} items allowed", "/blocks")
    for index, block in enumerate(blocks):
        if error := _block_error(block, f"/blocks/{index}"):
            return error
    return None


def _overflow_error(element: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """Slack's error for an overflow menu outside its documented limits (2–5 options, option text 75 and value 150
    characters, action_id 255), or ``None``."""
    options = element.get("options")
    if not isinstance(options, list) or not MIN_OVERFLOW_OPTIONS <= len(options) <= MAX_OVERFLOW_OPTIONS:
        return _invalid_blocks(f"must provide {MIN_OVERFLOW_OPTIONS} to {MAX_OVERFLOW_OPTIONS} options", f"{where}/options")
    if len(str(element.get("action_id", ""))) > MAX_ID:
        return _invalid_blocks(f"must be less than {MAX_ID + 1} characters", f"{where}/action_id")
    for number, option in enumerate(options):
        text = (option or {}).get("text") or {}
        if text.get("type") != "plain_text" or len(str(text.get("text", ""))) > MAX_OPTION_TEXT:
            return _invalid_blocks(f"must be a plain_text of at most {MAX_OPTION_TEXT} characters",
                                   f"{where}/options/{number}/text")
        if len(str((option or {}).get("value", ""))) > MAX_OPTION_VALUE:
            return _invalid_blocks(f"must be less than {MAX_OPTION_VALUE + 1} characters", f"{where}/options/{number}/value")
    return None


def _block_error(block: Any, pointer: str) -> dict[str, Any] | None:
    if not isinstance(block, dict) or "type" not in block:
        return _invalid_blocks("missing required field: type", pointer)
    kind = block["type"]
    if len(str(block.get("block_id", ""))) > MAX_ID:
        return _invalid_blocks(f"must be less than {MAX_ID + 1} characters", f"{pointer}/block_id")
    if kind == "actions":
        elements = block.get("elements") or []
        if len(elements) > MAX_ACTION_ELEMENTS:
            return _invalid_blocks(f"no more than {MAX_ACTION_ELEMENTS} items allowed", f"{pointer}/elements")
        for number, element in enumerate(elements):
            where = f"{pointer}/elements/{number}"
            if len(str(element.get("action_id", ""))) > MAX_ID:
                return _invalid_blocks(f"must be less than {MAX_ID + 1} characters", f"{where}/action_id")
            if element.get("type") == "button":
                text = element.get("text") or {}
                if text.get("type") != "plain_text":
                    return _invalid_blocks("must be a plain_text text object", f"{where}/text")
                if len(str(text.get("text", ""))) > MAX_BUTTON_TEXT:
                    return _invalid_blocks(f"must be less than {MAX_BUTTON_TEXT + 1} characters", f"{where}/text/text")
                if len(str(element.get("value", ""))) > MAX_BUTTON_VALUE:
                    return _invalid_blocks(f"must be less than {MAX_BUTTON_VALUE + 1} characters", f"{where}/value")
    elif kind == "header":
        text = block.get("text")
        if not isinstance(text, dict) or text.get("type") != "plain_text":
            return _invalid_blocks("must be a plain_text text object", f"{pointer}/text")
        if len(str(text.get("text", ""))) > MAX_HEADER_TEXT:
            return _invalid_blocks(f"must be less than {MAX_HEADER_TEXT + 1} characters", f"{pointer}/text/text")
    elif kind == "section":
        text, fields = block.get("text"), block.get("fields")
        if text is None and not fields:
            return _invalid_blocks("must provide either text or fields", pointer)
        if text is not None:
            if not isinstance(text, dict) or text.get("type") not in ("plain_text", "mrkdwn"):
                return _invalid_blocks("must be a text object", f"{pointer}/text")
            if len(str(text.get("text", ""))) > MAX_SECTION_TEXT:
                return _invalid_blocks(f"must be less than {MAX_SECTION_TEXT + 1} characters", f"{pointer}/text/text")
        accessory = block.get("accessory")
        if (isinstance(accessory, dict) and accessory.get("type") == "overflow"
                and (error := _overflow_error(accessory, f"{pointer}/accessory"))):
            return error
        if fields:
            if len(fields) > MAX_SECTION_FIELDS:
                return _invalid_blocks(f"no more than {MAX_SECTION_FIELDS} items allowed", f"{pointer}/fields")
            for number, item in enumerate(fields):
                if len(str((item or {}).get("text", ""))) > MAX_SECTION_FIELD_TEXT:
                    return _invalid_blocks(
                        f"must be less than {MAX_SECTION_FIELD_TEXT + 1} characters",
                        f"{pointer}/fields/{number}/text",
                    )
    return None
