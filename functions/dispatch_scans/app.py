"""dispatch_scans: schedule tick → one ScanRequest per configured cluster on the scan requests queue."""

from datetime import datetime

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser import BaseModel, parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import dispatch as bootstrap

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record
copy_config_to_registered_loggers(source_logger=logger, include={"gpuwaste"})  # shared/ logs as JSON too


class ScheduledEvent(BaseModel):
    """EventBridge Scheduler input (template.yaml) or a classic `aws.events` scheduled event: only `time` matters."""

    time: datetime


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    tick = parse(event=event, model=ScheduledEvent)
    requests = bootstrap.dispatch_service().dispatch(tick.time)
    return {"scan_requests": len(requests), "scheduled_time": tick.time.isoformat()}
