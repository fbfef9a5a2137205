"""Bootstrap: composition root of send_daily_summary, and the `gpuwaste summary` command's service."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.config import GpuWasteConfig
from gpuwaste.errors import ConfigError
from gpuwaste.services.summary import SummaryService
from gpuwaste.sinks.chart import MatplotlibChartRenderer
from gpuwaste.store.once import DynamoDbOnceLedger
from gpuwaste.store.sqlite import SqliteFindingStore


@cache
def summary_service() -> SummaryService:
    """SummaryService over the DynamoDB lifecycle store, posting to every configured chat sink (Slack with the chart
    when matplotlib is there; Teams and the JSON webhook without it), each day's post per sink recorded in the same
    table (`store.once`: a retried invocation does not post it again).

    Raises:
        ConfigError: no configuration, no chat sink, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    store = delivery.lambda_store()
    return SummaryService(store=store, settings=settings, now=pipeline.SystemClock().now, serve=pipeline.config().serve,
                          notifiers=delivery.chat_notifiers(settings), chart=MatplotlibChartRenderer(),
                          ledger=DynamoDbOnceLedger(client=store.client, table_name=store.table_name))


def local_summary_service(config: GpuWasteConfig, state: Path) -> SummaryService:
    """SummaryService over a local SQLite state file (`gpuwaste run --state`).

    Raises:
        ConfigError: the file does not exist.
    """
    if not state.exists():
        raise ConfigError(f"{state}: no such state file (create it with `gpuwaste run --state {state}`)")
    return SummaryService(store=SqliteFindingStore(state), settings=config.delivery, now=pipeline.SystemClock().now,
                          chart=MatplotlibChartRenderer(), serve=config.serve)
