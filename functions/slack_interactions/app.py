"""slack_interactions: Lambda Function URL for Slack buttons (signature verified) → finding lifecycle."""

import base64
import json

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwaste.bootstrap import interactions as bootstrap

logger = Logger(logger_handler=bootstrap.LOG_HANDLER)  # the process stdout, looked up per record


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    body = event.get("body") or ""
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()  # the signature covers raw bytes
    reply = bootstrap.handle(event.get("headers") or {}, raw)  # signature verified before any config is loaded
    return {"statusCode": reply.status, "headers": {"Content-Type": "application/json"}, "body": json.dumps(reply.body)}
