"""create_tickets: tickets queue → Jira Cloud (open once per finding, comment when worse, resolve)."""

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import tickets as bootstrap
from gpuwaste.bootstrap.pipeline import LOG_HANDLER
from gpuwaste.models.messages import AlertMessage

logger = Logger(logger_handler=LOG_HANDLER)  # writes to the current stdout (tests swap it)


class TicketRecord(SqsRecordModel):
    body: Json[AlertMessage]




def record_handler(record: TicketRecord) -> None:
    bootstrap.ticket_service().handle(record.body)


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # Powertools BatchProcessor; poison messages → DLQ with the reason; outputs sent per batch
    return bootstrap.process_batch(event, context, model=TicketRecord, record_handler=record_handler)
