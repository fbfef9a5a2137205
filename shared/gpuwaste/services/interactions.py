"""Service: chat button clicks (snooze 1 day / 7 days, expected, create ticket, details) → the finding lifecycle.

"Expected" and "Snooze" ask for a reason first (the chat's form, `ask_reason`) and store a justification (who, when,
until when: services/justifications.py); the form's submission comes back as the same action with its reason.

Every request is authenticated first by the injected `RequestVerifier` (the chat's request signatures, in its
adapter); only then is it read, by the injected reader (the chat's payload format, in its adapter). The Function
URL's composition root verifies before it loads the configuration or any other secret, and then hands the verified
request here without a verifier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuwaste.errors import DeliveryError, GpuWasteError, PermanentError, RequestSignatureError, StoreError
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.notices import ChatAction, ChatRequest
from gpuwaste.ports import FindingStore, Notifier, RequestVerifier
from gpuwaste.services.justifications import DEFAULT_EXPECTED_FOR, NO_REASON, justify
from gpuwaste.services.notify import NotifyService, finding_from_record
from gpuwaste.services.reclaim import APPROVE as RECLAIM_APPROVE
from gpuwaste.services.reclaim import KEEP as RECLAIM_KEEP
from gpuwaste.services.reclaim import ReclaimService
from gpuwaste.services.tickets import TicketService

logger = logging.getLogger(__name__)

SNOOZES = {"snooze_1d": timedelta(days=1), "snooze_7d": timedelta(days=7)}
EXPECTED = "expected"
TICKET = "ticket"
#: Show what stands behind a digest line (evidence, formula, price source) in the message's thread.
DETAILS = "details"

#: The request is not from the chat service (kept under its earlier name).
SignatureError = RequestSignatureError


@dataclass(frozen=True)
class HttpReply:
    """What the Function URL answers (status, JSON body)."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


def refused(exc: RequestSignatureError) -> HttpReply:
    """The answer to a request that failed verification (401, without saying more than that)."""
    logger.warning("chat request refused", extra={"reason": str(exc)})
    return HttpReply(401, {"error": "invalid signature"})


class InteractionService:
    """Handles chat interactivity requests (button clicks on our messages).

    Args:
        verifier: authenticates each request (None: the caller verified it already).
        reader: reads the chat's request body into a `ChatRequest` (its adapter's format).
        store: the lifecycle store (snooze/acknowledgement are written there).
        notifier: to confirm in the message's thread (optional).
        tickets: to open a ticket on "create ticket" (optional: without it the button says tickets are off).
        details_text: renders a finding's details for the chat ("details" button: evidence, formula, price source),
            from the chat's adapter (its escaping); None: the button does nothing.
        ask_reason: opens the chat's form asking why ("Expected" / "Snooze" → a justification: reason, and how long
            for "Expected"); True when it opened. None (or False): the justification is stored without a reason.
        source: the `Justification.source` written (the chat's name).
        reclaim: the reclaim service for the "Keep" (a justification; the pending action kept) and "Approve"
            (an approver performs it) buttons of reclaim notices; None: those buttons say reclaim is not configured.
        ticket_edits: edits the chat message of a finding whose ticket a click opened so it shows the ticket (its key
            linked to the ticket, no "Create ticket" left), as a ticket the pipeline opens does
            (`NotifyService.show_tickets`); None: the message is left as it is.
    """

    def __init__(
        self,
        *,
        verifier: RequestVerifier | None,
        reader: Callable[[bytes], ChatRequest],
        store: FindingStore,
        now: Callable[[], datetime],
        notifier: Notifier | None = None,
        tickets: TicketService | None = None,
        details_text: Callable[[Finding, str], str] | None = None,
        ask_reason: Callable[[ChatAction], bool] | None = None,
        source: str = "chat",
        reclaim: ReclaimService | None = None,
        ticket_edits: NotifyService | None = None,
    ) -> None:
        self.verifier = verifier
        self.reader = reader
        self.store = store
        self.now = now
        self.notifier = notifier
        self.tickets = tickets
        self.details_text = details_text
        self.ask_reason = ask_reason
        self.source = source
        self.reclaim = reclaim
        self.ticket_edits = ticket_edits

    def handle(self, *, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """Verify and act on one request; never raises for bad input (answers 4xx instead).

        Raises:
            StoreError: the store failed transiently (the Function URL answers 500; the chat shows an error).
        """
        if self.verifier is not None:
            try:
                self.verifier.verify(headers, body)
            except RequestSignatureError as exc:
                return refused(exc)
        request = self.reader(body)
        if request.action is None:
            return HttpReply(request.answer, {"error": request.error} if request.error else {})
        return self.act(request.action)

    def act(self, request: ChatAction) -> HttpReply:
        """Apply one action to one finding and confirm in the message's conversation."""
        user, fingerprint, action = request.user, request.fingerprint, request.action
        now = self.now()
        if action in SNOOZES or action == EXPECTED:
            if request.reason is None and not request.submitted and request.trigger_id and self.ask_reason is not None \
                    and self.ask_reason(request):
                return HttpReply(200)  # the form asks why; its submission comes back here with the reason
            expected = action == EXPECTED
            until = now + (timedelta(days=request.days) if expected and request.days else
                           DEFAULT_EXPECTED_FOR if expected else SNOOZES[action])
            reason = request.reason or NO_REASON
            if justify(self.store, fingerprint, kind="expected" if expected else "snooze", reason=reason,
                       by=user, at=now, until=until, source=self.source) is None:
                return HttpReply(200) if request.submitted else HttpReply(200, {"text": "unknown finding"})
            verb = "marked this finding as expected" if expected else "snoozed this finding"
            text = (f"{user} {verb} until {until:%Y-%m-%d %H:%M} UTC: “{reason}”. "
                    "gpuwaste will tell the owner again then.")
        elif action == RECLAIM_KEEP:
            if request.reason is None and not request.submitted and request.trigger_id and self.ask_reason is not None \
                    and self.ask_reason(request):
                return HttpReply(200)  # asks why (and for how long) first, as "Expected" does
            if self.reclaim is None:
                text = "Reclaim is not configured here; nothing is planned."
            else:
                text = self.reclaim.keep(fingerprint, by=user, reason=request.reason,
                                         until=now + timedelta(days=request.days) if request.days else None)
        elif action == RECLAIM_APPROVE:
            text = ("Reclaim is not configured here; nothing was done." if self.reclaim is None
                    else self.reclaim.approve(fingerprint, by=user))
        elif action == TICKET:
            if self.tickets is None:
                text = "Tickets are not configured (delivery.jira)."
            else:
                try:
                    key = self.tickets.open_ticket_for(fingerprint)
                    text = f"{user} asked for a ticket: {key}."
                    self._show_ticket(fingerprint)
                except (DeliveryError, PermanentError) as exc:
                    text = f"Could not create the ticket: {exc}"
        elif action == DETAILS:
            details = self._details(fingerprint)
            if details is None:
                return HttpReply(200, {"text": "unknown finding"})
            text = details
        else:
            return HttpReply(200)
        self._confirm(request, text)
        return HttpReply(200) if request.submitted else HttpReply(200, {"text": text})

    def _show_ticket(self, fingerprint: str) -> None:
        """Edit the finding's chat message to show its new ticket.

        A failure is logged, never fails the click (the ticket exists and is named in the thread's confirmation).
        """
        if self.ticket_edits is None:
            return
        try:
            self.ticket_edits.show_tickets([fingerprint])
        except GpuWasteError as exc:
            logger.warning("chat message not edited to show its ticket",
                           extra={"fingerprint": fingerprint[:16], "error": type(exc).__name__})

    def _details(self, fingerprint: str) -> str | None:
        """The stored finding's details (`details_text` of the chat adapter), or None when it is not in the store."""
        record = self.store.get(fingerprint)
        finding = finding_from_record(record) if record is not None else None
        if finding is None or self.details_text is None:
            return None
        return self.details_text(finding, fingerprint)

    def _update(self, fingerprint: str, changes: dict[str, Any]) -> bool:
        for _ in range(5):
            record: FindingRecord | None = self.store.get(fingerprint)
            if record is None:
                return False
            updated = record.model_copy(update={**changes, "version": record.version + 1})
            if self.store.update(updated, expected_version=record.version):
                logger.info("finding acknowledged", extra={"fingerprint": fingerprint[:16], **{k: str(v) for k, v in changes.items()}})
                return True
        raise StoreError(f"finding {fingerprint[:16]}: lifecycle record kept changing")

    def _confirm(self, request: ChatAction, text: str) -> None:
        if self.notifier is None or request.message is None:
            return
        try:
            self.notifier.reply(message=request.message, text=text)
        except GpuWasteError:  # the acknowledgement is stored; only the confirmation in the thread is lost
            logger.warning("confirmation reply failed", extra={"destination": request.message.destination})
