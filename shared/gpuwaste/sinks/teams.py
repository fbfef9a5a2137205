"""Adapter: notices → Microsoft Teams channels through Workflows webhooks (Adaptive Cards).

Routing per owner, like Slack: the webhook named by the team map (`delivery.teams.<team>.teams_webhook`), else by the
namespace map, else `delivery.msteams.default_webhook`. A named webhook without a URL falls back to the default one
and the card says so. Webhook URLs are secrets: configured by name → URL (`delivery.msteams.webhooks`, or a Secrets
Manager JSON object); message references, logs and errors carry the name only.

What a Workflows webhook cannot do, and what happens instead:
* it returns no message id (202, empty body), so there are no threads and no edits: an update (worse, reminder) and a
  resolution are new cards posted to the same webhook, i.e. the same channel as the original (`threads`/`edits` are
  False; the lifecycle stores the webhook's name as the message's destination);
* it cannot be searched: a post Teams accepted but whose answer was lost (a crash, a timeout) may be posted again on
  redelivery (at least once; `find_posted` finds nothing);
* it cannot upload files: the daily summary's chart is not attached (the card says so);
* mentions need Entra ID user ids: owners are named, not mentioned (`user_id` is None).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from gpuwaste.errors import PermanentDeliveryError
from gpuwaste.models.notices import DailySummary, MessageRef, Notice, NoticeItem, PostedMessage
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.sinks.http_delivery import JsonPoster, PayloadTooLargeError
from gpuwaste.sinks.teams_cards import TeamsMessage, render_notice, render_summary, render_text

logger = logging.getLogger(__name__)

#: The sink's registered name (message references and delivery keys carry it).
SINK = "teams"


class TeamsNotifier:
    """Notifier over Teams Workflows webhooks.

    Args:
        settings: routing (team/namespace maps, the default webhook) and the Teams settings.
        urls: webhook name → URL (secrets, resolved by the composition root).
        poster: the HTTP poster (retries); built from the settings when None.
        now: clock for ages in cards.
    """

    name = SINK
    threads = False
    edits = False

    def __init__(self, settings: DeliverySettings, urls: Mapping[str, str], *, poster: JsonPoster | None = None,
                 now: Callable[[], datetime] | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        teams = settings.msteams
        if not teams.default_webhook:
            raise PermanentDeliveryError("delivery.msteams.default_webhook: Teams delivery needs a default webhook")
        self.settings = settings
        self.urls = dict(urls)
        self.default = teams.default_webhook
        self.max_bytes = teams.max_payload_bytes
        self.poster = poster or JsonPoster(what="teams webhook", timeout_s=teams.timeout_s,
                                           rate_limit_retries=teams.rate_limit_retries,
                                           server_error_retries=teams.server_error_retries, sleep=sleep,
                                           max_retry_after_s=teams.max_retry_after_s)
        self._now = now or (lambda: datetime.now(UTC))

    def set_time_left(self, time_left: Callable[[], float] | None) -> None:
        """Cap in-process `Retry-After` waits by the caller's remaining seconds (a Lambda's remaining time)."""
        self.poster.time_left = time_left

    # -- routing -------------------------------------------------------------------------------------------
    def webhook_for(self, notice: Notice, item: NoticeItem) -> tuple[str, str]:
        """(webhook name, why) for one finding of `notice`: team map, namespace map, then the default webhook."""
        team = notice.route.team
        by_team = self.settings.teams.get(team) if team else None
        if by_team is not None and by_team.teams_webhook:
            return by_team.teams_webhook, f"team map '{team}'"
        ns = item.finding.subject.namespace
        by_ns = self.settings.namespaces.get(ns) if ns else None
        if by_ns is not None and by_ns.teams_webhook:
            return by_ns.teams_webhook, f"namespace map '{ns}'"
        return self.default, "default webhook"

    def _url(self, name: str) -> tuple[str, str, str | None]:
        """(name, URL, the routed name when it fell back to the default)."""
        if name in self.urls:
            return name, self.urls[name], None
        if self.default in self.urls:
            logger.warning("teams webhook not configured; using the default one", extra={"webhook": name})
            return self.default, self.urls[self.default], name
        raise PermanentDeliveryError(f"teams webhook {self.default!r} (the default) has no URL configured")

    # -- the port ------------------------------------------------------------------------------------------
    def post(self, notice: Notice, *, reply_to: MessageRef | None = None,
             on_posted: Callable[[PostedMessage], None] | None = None) -> list[PostedMessage]:
        """See `gpuwaste.ports.Notifier.post`. An update (`reply_to`) goes to the webhook of the original message; a
        notice whose findings route to different webhooks is split by webhook; each card is handed to `on_posted`
        as soon as Teams accepted it."""
        if reply_to is not None and reply_to.sink == SINK:
            targets = {(reply_to.destination, "the original message's webhook"): list(notice.items)}
        else:
            targets = {}
            for item in notice.items:
                targets.setdefault(self.webhook_for(notice, item), []).append(item)
        posted: list[PostedMessage] = []
        for (routed, source), items in targets.items():
            part = notice if len(items) == len(notice.items) else notice.model_copy(update={"items": tuple(items)})
            name, url, fell_back = self._url(routed)
            for message in self._render(part, name, source, fell_back, self.max_bytes):
                try:
                    posted.append(self._send(name, url, message, fell_back, on_posted))
                except PayloadTooLargeError:  # a receiver stricter than our budget: the same findings, smaller cards
                    logger.warning("teams refused the card for its size; re-sending it in smaller cards",
                                   extra={"webhook": name, "findings": len(message.fingerprints)})
                    keep = set(message.fingerprints)
                    sub = part.model_copy(update={"items": tuple(i for i in part.items if i.fingerprint in keep)})
                    for smaller in self._render(sub, name, source, fell_back, self.max_bytes // 2):
                        posted.append(self._send(name, url, smaller, fell_back, on_posted))
        return posted

    def _render(self, notice: Notice, name: str, source: str, fell_back: str | None,
                max_bytes: int) -> list[TeamsMessage]:
        return render_notice(notice, now=self._now(), destination=name, source=source, fell_back_from=fell_back,
                             max_bytes=max_bytes)

    def _send(self, name: str, url: str, message: TeamsMessage, fell_back: str | None,
              on_posted: Callable[[PostedMessage], None] | None) -> PostedMessage:
        self.poster.post(url, message.encoded(), what=f"teams webhook {name}")
        out = PostedMessage(sink=SINK, destination=name, fingerprints=message.fingerprints, fell_back_from=fell_back)
        if on_posted is not None:
            on_posted(out)
        return out

    def find_posted(self, notice: Notice, *, reply_to: MessageRef | None = None) -> list[PostedMessage]:
        """A Workflows webhook cannot be searched: always empty (a lost answer may mean one repeated card)."""
        return []

    def update(self, notice: Notice, *, message: MessageRef) -> PostedMessage:
        """A webhook cannot edit a posted card: `notice` is posted as a new card to the original's webhook."""
        posted = self.post(notice, reply_to=message)
        return posted[0] if posted else PostedMessage(sink=SINK, destination=message.destination)

    def reply(self, *, message: MessageRef, text: str) -> PostedMessage:
        """A short card to the original's webhook."""
        name, url, fell_back = self._url(message.destination)
        return self._send(name, url, render_text(text), fell_back, None)

    def user_id(self, email: str) -> str | None:
        """No mentions through a webhook (they need Entra ID ids): None."""
        return None

    def post_summary(
        self, summary: DailySummary, *, channel: str, chart_png: bytes | None, note: str | None = None
    ) -> PostedMessage:
        """The daily summary to the default webhook (`channel` is a chat channel name; Teams uses webhooks). The chart
        is not attached: a webhook cannot upload images."""
        if chart_png is not None:
            note = (note + " " if note else "") + "The chart is in the HTML report (Teams webhooks cannot attach images)."
        name, url, fell_back = self._url(self.default)
        return self._send(name, url, render_summary(summary, note=note, max_bytes=self.max_bytes), fell_back, None)


__all__ = ["SINK", "TeamsNotifier"]
