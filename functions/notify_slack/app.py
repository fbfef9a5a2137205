"""notify_slack: alerts queue → Slack (Block Kit alerts, one digest per owner and scan, thread updates, resolved edits)."""

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import notify as bootstrap
from gpuwaste.models.messages import AlertMessage

logger = Logger()
metrics = Metrics(namespace=bootstrap.METRICS_NAMESPACE)  # EMF: docs/metrics.md (CloudWatch)


class AlertRecord(SqsRecordModel):
    body: Json[AlertMessage]


processor = bootstrap.DeadLetterBatchProcessor(model=AlertRecord)  # PermanentDeliveryError → DLQ with the reason


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # The batch is planned first (NEW alerts of one owner and scan → one digest); each record then reports
    # its group's outcome, so a failed post fails exactly its records and SQS redelivers them.
    plan = bootstrap.notify_service().plan_bodies(r.get("body", "") for r in event.get("Records", []))
    response = process_partial_response(event=event, record_handler=lambda record: plan.deliver(record.body),
                                        processor=processor, context=context)
    bootstrap.record_delivery(metrics, records=len(event.get("Records", [])), response=response)
    return response
