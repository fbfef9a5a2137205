"""notify_slack: alerts queue → Slack (Block Kit alerts, one digest per owner and scan, thread updates, resolved edits)."""

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import notify as bootstrap
from gpuwaste.models.messages import AlertMessage

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
metrics = Metrics(namespace=bootstrap.METRICS_NAMESPACE)  # EMF: docs/metrics.md (CloudWatch)


class AlertRecord(SqsRecordModel):
    body: Json[AlertMessage]




@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # The batch is planned first (NEW alerts of one owner and scan → one digest); each record then reports
    # its group's outcome, so a failed post fails exactly its records and SQS redelivers them.
    # Records received before are looked up in Slack before posting; waits are bounded by the remaining time.
    plan = bootstrap.delivery_plan(event, context)
    response = bootstrap.process_batch(event, context, model=AlertRecord,
                                       record_handler=lambda record: plan.deliver(record.body))
    bootstrap.record_delivery(metrics, records=len(event.get("Records", [])), response=response)
    return response
