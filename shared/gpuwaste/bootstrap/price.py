"""Bootstrap: composition root of price_findings (findings queue → priced queue), and the pipeline's price book.

The price book is the bundled one with the config's rate card, and over both, when BILL_S3_URI names one, the
effective instance-hour rates of a bill in S3 (`pricing.bill`: CUR 2.0 or FOCUS, CSV or .csv.gz), so every priced
finding says "your bill (…, period)". A warm container keeps the bill BILL_MAX_AGE_S seconds (default an hour)
before it reads it again; a bill that cannot be read or parsed fails the invocation (the records are retried, then
dead-lettered) rather than pricing silently at list prices.
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache

from gpuwaste.bootstrap import pipeline
from gpuwaste.bootstrap.batch import deferred_queue, each_message, process_batch
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.pricing.bill import MAX_BILL_BYTES, BillRates, bill_text, parse_bill, with_bill
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.price import PriceService
from gpuwaste.sources.s3_objects import S3ObjectReader

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _bill(uri: str, _epoch: int) -> BillRates:
    """The bill at `uri`, read once per `_epoch` (a time bucket of BILL_MAX_AGE_S seconds).

    Raises:
        ConfigError: the object cannot be read, or is neither a CUR 2.0 nor a FOCUS bill (InputFormatError).
        RetryableError: S3 throttling, 5xx, connection errors.
    """
    data = S3ObjectReader(client=pipeline.client("s3")).read(uri, max_bytes=MAX_BILL_BYTES)
    rates = parse_bill(bill_text(data, uri), uri)
    logger.info("bill read", extra={"bill": uri, "instance_types": len(rates.overrides), "lines": rates.lines_used,
                                    "source": rates.source})
    return rates


def bill_epoch() -> int:
    """The current BILL_MAX_AGE_S time bucket (0 without a bill): the price book is rebuilt when it changes."""
    env = pipeline.environment(pipeline.BillEnvironment)
    return int(time.time() // env.bill_max_age_s) if env.bill_s3_uri else 0


@lru_cache(maxsize=1)
def price_book(_epoch: int = 0) -> PriceBook:
    """Bundled price book + the config's rate card + the bill named by BILL_S3_URI (when set).

    Raises:
        ConfigError: no configuration, or the bill cannot be read or parsed.
    """
    pricing = pipeline.config().pricing
    env = pipeline.environment(pipeline.BillEnvironment)
    if env.bill_s3_uri:
        pricing = with_bill(pricing, _bill(env.bill_s3_uri, _epoch))
    return PriceBook.bundled().with_overrides(pricing)


@lru_cache(maxsize=1)
def _pricing_service(epoch: int) -> PriceService:
    env = pipeline.environment(pipeline.PriceEnvironment)
    return PriceService(price_book=price_book(epoch), queue=deferred_queue("priced_queue_url", env.priced_queue_url))


class _PricingServiceRoot:
    """`pricing_service()`: the service of the bill's current time bucket; `cache_clear()` forgets it (as the
    `functools.cache` roots of the other functions do).
    """

    def __call__(self) -> PriceService:
        """The pricing service: `price_book`, sending to PRICED_QUEUE_URL (collected per batch of records,
        `bootstrap.batch.deferred_queue`); rebuilt when the bill's time bucket turns.

        Raises:
            ConfigError: no configuration, PRICED_QUEUE_URL is not set, or the bill cannot be read.
        """
        return _pricing_service(bill_epoch())

    def cache_clear(self) -> None:
        """Forget the service, its price book and the bill (a cold container)."""
        for cached in (_pricing_service, price_book, _bill):
            cached.cache_clear()


pricing_service = _PricingServiceRoot()


__all__ = ["bill_epoch", "each_message", "price_book", "process_batch", "pricing_service"]
