"""Bootstrap: composition root of price_findings (findings queue → priced queue)."""

from __future__ import annotations

from functools import cache

from gpuwaste.bootstrap import pipeline
from gpuwaste.bootstrap.batch import deferred_queue, each_message, process_batch
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.price import PriceService


@cache
def pricing_service() -> PriceService:
    """The pricing service: bundled price book + the config's overrides, sending to PRICED_QUEUE_URL
    (collected per batch of records, `bootstrap.batch.deferred_queue`).

    Raises:
        ConfigError: no configuration, or PRICED_QUEUE_URL is not set.
    """
    book = PriceBook.bundled().with_overrides(pipeline.config().pricing)
    env = pipeline.environment(pipeline.PriceEnvironment)
    return PriceService(price_book=book, queue=deferred_queue("priced_queue_url", env.priced_queue_url))


__all__ = ["each_message", "process_batch", "pricing_service"]
