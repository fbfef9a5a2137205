"""send_daily_summary: daily schedule → the fleet's cost summary (totals, trend, top offenders, savings) in Slack."""

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import summary as bootstrap

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    posted = bootstrap.summary_service().send()  # errors propagate: the invocation fails and shows in metrics
    return {"channel": posted.channel, "ts": posted.ts}
