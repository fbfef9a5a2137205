"""scan_gpu_waste: ScanRequest (SQS) or a schedule tick → findings queue; evaluated at the requested time."""

from datetime import datetime

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser import BaseModel, parse
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import scan as bootstrap
from gpuwaste.models.messages import ScanRequest

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
metrics = Metrics(namespace=bootstrap.METRICS_NAMESPACE)  # EMF: docs/metrics.md (CloudWatch)
copy_config_to_registered_loggers(source_logger=logger, include={"gpuwaste"})  # shared/ logs as JSON too


class ScanRequestRecord(SqsRecordModel):
    body: Json[ScanRequest]


class ScheduledEvent(BaseModel):
    time: datetime




def record_handler(record: ScanRequestRecord) -> None:
    bootstrap.record_scan(metrics, bootstrap.scan(record.body))


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    if "Records" in event:
        # Powertools BatchProcessor; poison messages → DLQ with the reason; outputs sent per batch
        return bootstrap.process_batch(event, context, model=ScanRequestRecord, record_handler=record_handler)
    reports = bootstrap.scan_all(parse(event=event, model=ScheduledEvent).time)  # the schedule's time, not the clock
    for report in reports:
        bootstrap.record_scan(metrics, report)
    return {"scans": [{"cluster": r.cluster, "scan_id": r.scan_id, "findings": len(r.findings)} for r in reports]}
