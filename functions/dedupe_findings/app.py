"""dedupe_findings: priced queue → finding lifecycle (DynamoDB, conditional writes) → alerts / tickets queues."""

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import dedupe as bootstrap
from gpuwaste.models.messages import FindingMessage, ScanCompleted

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
metrics = Metrics(namespace=bootstrap.METRICS_NAMESPACE)  # EMF: docs/metrics.md (CloudWatch)
copy_config_to_registered_loggers(source_logger=logger, include={"gpuwaste"})  # shared/ logs as JSON too


class PricedRecord(SqsRecordModel):
    body: Json[FindingMessage | ScanCompleted]




def record_handler(record: PricedRecord) -> None:
    if isinstance(record.body, ScanCompleted):
        outcome = bootstrap.lifecycle_service().handle_scan_completed(record.body)
        bootstrap.record_open_waste(record.body.cluster)
    else:
        outcome = bootstrap.lifecycle_service().handle_finding(record.body)
    bootstrap.record_lifecycle(metrics, [outcome])


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # Powertools BatchProcessor; records read ahead in one batch; poison messages → DLQ with the reason
    return bootstrap.process(event, context, model=PricedRecord, record_handler=record_handler)
