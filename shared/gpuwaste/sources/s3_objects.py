"""Adapter: one S3 object read whole and bounded (the bill the price function prices from).

`read` refuses an object larger than its bound from the `ContentLength` S3 answers, before reading the body, and
reads at most the bound (a body longer than announced is refused too). S3 errors are translated: throttling, 5xx and
connection errors are `RetryableError`; a missing object or access denied is a `ConfigError` naming the URI (the
stack parameter names it). The function's IAM grants `s3:GetObject` on that one object.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError

from gpuwaste.errors import ConfigError, GpuWasteError, RetryableError

_RETRYABLE = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                        "ThrottlingException"})


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`.

    Raises:
        ConfigError: not an s3:// URI with a bucket and a key.
    """
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise ConfigError(f"expected s3://bucket/key, got {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


class S3ObjectReader:
    """Reads whole S3 objects, each bounded.

    Args:
        client: a boto3 S3 client (built by the bootstrap, with timeouts and bounded retries).
    """

    def __init__(self, *, client: Any) -> None:
        """Hold the client (no I/O)."""
        self.client = client

    def read(self, uri: str, *, max_bytes: int) -> bytes:
        """The bytes of the object at `uri` (s3://bucket/key), at most `max_bytes`.

        Raises:
            ConfigError: a bad URI, no such object or bucket, access denied, or the object is over `max_bytes`.
            RetryableError: throttling, 5xx, connection errors.
        """
        bucket, key = split_s3_uri(uri)
        try:
            answer = self.client.get_object(Bucket=bucket, Key=key)
            size = int(answer.get("ContentLength") or 0)
            if size > max_bytes:
                answer["Body"].close()
                raise ConfigError(f"{uri}: {size} bytes is over the {max_bytes}-byte limit")
            data: bytes = answer["Body"].read(max_bytes + 1)
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, uri) from exc
        if len(data) > max_bytes:
            raise ConfigError(f"{uri}: over the {max_bytes}-byte limit")
        return data


def _translate(exc: ClientError | BotoCoreError, uri: str) -> GpuWasteError:
    if isinstance(exc, BotoCoreError):
        return RetryableError(f"{uri}: {type(exc).__name__}: {exc}")
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in _RETRYABLE or status >= 500:
        return RetryableError(f"{uri}: {code or status}: {exc}")
    return ConfigError(f"{uri}: cannot read: {code or status}")


__all__ = ["S3ObjectReader", "split_s3_uri"]
