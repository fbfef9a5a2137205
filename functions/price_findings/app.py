"""price_findings: findings queue (FindingBatch | FindingMessage | ScanCompleted) → priced queue."""

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import price as bootstrap
from gpuwaste.models.messages import FindingMessage, ScanCompleted, StageBody, items_of

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
copy_config_to_registered_loggers(source_logger=logger, include={"gpuwaste"})  # shared/ logs as JSON too


class FindingRecord(SqsRecordModel):
    body: Json[StageBody]  # FindingBatch, or single messages sent before batching




def handle(message: FindingMessage | ScanCompleted) -> None:
    if isinstance(message, ScanCompleted):
        bootstrap.pricing_service().forward_completed(message)
    else:
        bootstrap.pricing_service().price_and_forward(message)


def record_handler(record: FindingRecord) -> None:
    bootstrap.each_message(items_of(record.body), handle)  # a bad finding is dead-lettered alone


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # Powertools BatchProcessor; poison messages → DLQ with the reason; outputs sent per batch
    return bootstrap.process_batch(event, context, model=FindingRecord, record_handler=record_handler)
