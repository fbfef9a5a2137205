"""export_focus: daily schedule → each cluster's FOCUS rows of the day before, one S3 object per cluster and day."""

from datetime import UTC, date, datetime

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser import BaseModel, parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import export as bootstrap

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
copy_config_to_registered_loggers(source_logger=logger, include={"gpuwaste"})  # shared/ logs as JSON too


class ScheduledEvent(BaseModel):
    """EventBridge Scheduler input (template.yaml): the tick's time; `day` (optional) re-exports that UTC day."""

    time: datetime
    day: date | None = None


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    """Export the day before the tick (or the event's `day`) for every configured cluster."""
    tick = parse(event=event, model=ScheduledEvent)
    # the same day writes the same keys (a retried tick replaces its objects); errors propagate: the invocation fails
    done = bootstrap.export_service().export(tick.day or bootstrap.day_before(tick.time.astimezone(UTC)))
    return {"exported": [{"cluster": d.cluster, "day": d.day.isoformat(), "uri": d.uri, "rows": d.rows,
                          "unpriced_rows": d.unpriced_rows, "bytes": d.bytes} for d in done]}
