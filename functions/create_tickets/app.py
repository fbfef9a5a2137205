"""create_tickets: tickets queue → Jira Cloud (open once per finding, comment when worse, resolve), with the ticket
caps per run and per team, the quiet start and the overflow ticket per team that the local chain applies."""

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import tickets as bootstrap
from gpuwaste.models.messages import AlertMessage

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record


class TicketRecord(SqsRecordModel):
    body: Json[AlertMessage]


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    # the batch is planned first (caps, quiet start, overflow), then each record acts as planned through Powertools'
    # BatchProcessor; poison messages → DLQ with the reason
    service = bootstrap.ticket_service()
    plan = bootstrap.plan_batch(service, event)

    def record_handler(record: TicketRecord) -> None:
        plan.handle(service, record.body)

    return bootstrap.process_batch(event, context, model=TicketRecord, record_handler=record_handler)
