"""price_findings: findings queue (FindingMessage | ScanCompleted) → priced queue."""

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import price as bootstrap
from gpuwaste.models.messages import FindingMessage, ScanCompleted

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
copy_config_to_registered_loggers(source_logger=logger, include={"gpuwaste"})  # shared/ logs as JSON too


class FindingRecord(SqsRecordModel):
    body: Json[FindingMessage | ScanCompleted]




def record_handler(record: FindingRecord) -> None:
    if isinstance(record.body, ScanCompleted):
        bootstrap.pricing_service().forward_completed(record.body)
    else:
        bootstrap.pricing_service().price_and_forward(record.body)


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # Powertools BatchProcessor; poison messages → DLQ with the reason; outputs sent per batch
    return bootstrap.process_batch(event, context, model=FindingRecord, record_handler=record_handler)
