"""send_daily_summary: daily schedule → the fleet's cost summary (totals, trend, top offenders, savings) in Slack."""

from datetime import UTC, datetime

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.parser import BaseModel, parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import summary as bootstrap

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record


class ScheduledEvent(BaseModel):
    """EventBridge Scheduler input (template.yaml): the tick's time names the summary's day (the same on a retry)."""

    time: datetime


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    tick = parse(event=event, model=ScheduledEvent)
    # posted once per day and sink (a retried tick posts nothing again); errors propagate: the invocation fails
    sent = bootstrap.summary_service().send(day=tick.time.astimezone(UTC).date())
    return {"day": sent.day.isoformat(), "already_posted": list(sent.already_posted),
            "posted": [{"sink": p.sink, "destination": p.destination, "message_id": p.message_id} for p in sent.posted]}
