"""dedupe_findings: priced queue → finding lifecycle (DynamoDB, conditional writes) → alerts / tickets queues."""

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import dedupe as bootstrap
from gpuwaste.models.messages import FindingMessage, ScanCompleted, StageBody, items_of

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
metrics = Metrics(namespace=bootstrap.METRICS_NAMESPACE)  # EMF: docs/metrics.md (CloudWatch)
copy_config_to_registered_loggers(source_logger=logger, include={"gpuwaste"})  # shared/ logs as JSON too


class PricedRecord(SqsRecordModel):
    body: Json[StageBody]  # FindingBatch, or single messages sent before batching




def handle(message: FindingMessage | ScanCompleted, batch: bootstrap.LifecycleBatch) -> bootstrap.Outcome:
    outcome = bootstrap.lifecycle_service().handle(message, batch)
    if isinstance(message, ScanCompleted) and outcome.applied:  # once per scan, not per completion part
        bootstrap.record_open_waste(message.cluster)
    return outcome


def record_handler(record: PricedRecord, batch: bootstrap.LifecycleBatch) -> None:
    # a bad finding is dead-lettered alone; the outcomes of the others are counted even when one fails
    outcomes: list[bootstrap.Outcome] = []
    try:
        bootstrap.each_message(items_of(record.body), lambda m: outcomes.append(handle(m, batch)))
    finally:
        bootstrap.record_lifecycle(metrics, outcomes)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # the invocation is one LifecycleBatch (records read ahead, outputs sent together, outboxes cleared in one write,
    # the invocation's deadline); poison messages → DLQ with the reason
    return bootstrap.process(event, context, model=PricedRecord, record_handler=record_handler)
