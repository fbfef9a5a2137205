"""Adapter: whole objects written to one S3 bucket under a prefix (`ports.ObjectWriter`), for the daily FOCUS export.

A put of a key replaces the object, so a re-run of the same day writes the same key and leaves one object (the
export's idempotence). The body goes in one `PutObject` with its `Content-MD5` (S3 refuses a body that arrived
changed); S3's single-put limit (`MAX_PUT_BYTES`, 5 GiB) is enforced here, before the call — a larger body is a
`PermanentError` naming the limit, never a half-written object. The function's IAM grants `s3:PutObject` on
`<bucket>/<prefix>*` only.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpuwaste.errors import GpuWasteError, PermanentError, RetryableError

#: S3's limit on one PutObject (5 GiB; larger objects need a multipart upload)
MAX_PUT_BYTES = 5 * 1024**3
_RETRYABLE = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                        "ThrottlingException", "RequestTimeTooSkewed"})


class S3ObjectWriter:
    """`ObjectWriter` over one bucket and key prefix.

    Args:
        client: a boto3 S3 client (built by the bootstrap, with timeouts and bounded retries).
        bucket: the bucket.
        prefix: the key prefix ("" or ending in "/": "gpuwaste/focus/").
        max_put_bytes: the single-put limit (S3's; lower in tests).
    """

    def __init__(self, *, client: Any, bucket: str, prefix: str = "", max_put_bytes: int = MAX_PUT_BYTES) -> None:
        """Hold the client (no I/O)."""
        if not bucket:
            raise PermanentError("s3 export: no bucket named")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self.max_put_bytes = max_put_bytes

    def put(self, key: str, body: bytes, *, content_type: str) -> str:
        """Write `body` at prefix + `key`, replacing an object already there; return its s3:// URI.

        Raises:
            PermanentError: the body is over the single-put limit, access denied, no such bucket.
            RetryableError: throttling, 5xx, connection errors.
        """
        full = self.prefix + key.lstrip("/")
        if len(body) > self.max_put_bytes:
            raise PermanentError(f"s3://{self.bucket}/{full}: {len(body)} bytes is over S3's single-put limit of "
                                 f"{self.max_put_bytes} bytes")
        md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode("ascii")
        try:
            self.client.put_object(Bucket=self.bucket, Key=full, Body=body, ContentType=content_type, ContentMD5=md5)
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc) from exc
        return f"s3://{self.bucket}/{full}"


def _translate(exc: ClientError | BotoCoreError) -> GpuWasteError:
    """SDK error → RetryableError (throttling, 5xx, connection) or PermanentError (access, missing bucket)."""
    if isinstance(exc, BotoCoreError):
        return RetryableError(f"s3: {type(exc).__name__}: {exc}")
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in _RETRYABLE or status >= 500:
        return RetryableError(f"s3: {code or status}: {exc}")
    return PermanentError(f"s3: {code or status}: {exc}")


__all__ = ["MAX_PUT_BYTES", "S3ObjectWriter"]
