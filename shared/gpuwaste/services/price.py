"""Service: price findings from the scan and forward them (and scan completions) to the dedupe stage."""

from __future__ import annotations

import logging

from gpuwaste.models.messages import FindingMessage, ScanCompleted
from gpuwaste.ports import FindingQueue
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding

logger = logging.getLogger(__name__)


class PriceService:
    """FindingMessage → priced FindingMessage, with the bundled price book and the user's overrides.

    Args:
        price_book: `PriceBook.bundled().with_overrides(config.pricing)` (built by the bootstrap).
        queue: the priced queue (dedupe_findings).
    """

    def __init__(self, *, price_book: PriceBook, queue: FindingQueue) -> None:
        self.price_book = price_book
        self.queue = queue

    def price(self, message: FindingMessage) -> FindingMessage:
        """The same envelope with the finding priced (USD/day and formula; unknown instance → unpriced)."""
        return message.model_copy(update={"finding": price_finding(message.finding, self.price_book)})

    def price_and_forward(self, message: FindingMessage) -> FindingMessage:
        """Price one finding and send it on.

        Raises:
            RetryableError: the priced queue could not take it.
        """
        priced = self.price(message)
        if priced.finding.cost is not None and not priced.finding.cost.priced and priced.finding.kind.is_waste:
            logger.info("finding unpriced", extra={"fingerprint": priced.finding.fingerprint,
                                                      "reason": priced.finding.cost.formula})
        self.queue.send_findings([priced])
        return priced

    def forward_completed(self, message: ScanCompleted) -> None:
        """Pass a scan completion through unchanged (dedupe needs it to resolve waste that disappeared)."""
        self.queue.send_scan_completed(message)


__all__ = ["PriceService"]
