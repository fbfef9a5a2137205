"""Adapter helper: EKS bearer tokens from IAM credentials, exactly as `aws eks get-token` makes them.

An EKS token is a presigned STS `GetCallerIdentity` URL whose signature covers the header
`x-k8s-aws-id: <cluster name>`, base64url-encoded without padding and prefixed `k8s-aws-v1.`. The
cluster's authenticator replays the URL against STS to learn the caller's IAM identity, then maps it
to Kubernetes groups through an access entry (see deploy/eks-access-entry.md). The URL's
`X-Amz-Expires` is 60 s, but EKS accepts a token for 15 minutes after it was signed; the provider
below reuses one token until about a minute before that.

No network call is made here: presigning is local. Only the cluster's API server talks to STS.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, NoCredentialsError

from gpuwaste.errors import SourceAuthError

if TYPE_CHECKING:
    import boto3

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "k8s-aws-v1."
K8S_AWS_ID_HEADER = "x-k8s-aws-id"
URL_EXPIRES_S = 60
TOKEN_LIFETIME = timedelta(minutes=15)
REFRESH_MARGIN = timedelta(minutes=1)


def sts_endpoint(region: str) -> str:
    """The regional STS endpoint for `region` (the `.cn` suffix for China regions).

    The endpoint is explicit so that an `AWS_ENDPOINT_URL` meant for other services (a local moto,
    a VPC endpoint for SQS) never leaks into a token the cluster must verify against real STS.
    """
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://sts.{region}.{suffix}"


def generate_eks_token(session: boto3.session.Session, cluster_name: str, region: str) -> str:
    """Build an EKS bearer token for `cluster_name` from the session's IAM credentials.

    Args:
        session: a boto3 session holding the caller's credentials (a Lambda role, a profile).
        cluster_name: the EKS cluster's name, signed into the `x-k8s-aws-id` header.
        region: the cluster's region; the token is a URL of that region's STS endpoint.

    Returns:
        `k8s-aws-v1.<base64url(presigned URL), no padding>`.

    Raises:
        SourceAuthError: when the session has no credentials or presigning fails.
    """
    try:
        sts = session.client("sts", region_name=region, endpoint_url=sts_endpoint(region))

        def keep_cluster_id(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            if K8S_AWS_ID_HEADER in params:
                context[K8S_AWS_ID_HEADER] = params.pop(K8S_AWS_ID_HEADER)

        def sign_cluster_id(request: Any, **_: Any) -> None:
            if K8S_AWS_ID_HEADER in request.context:
                request.headers[K8S_AWS_ID_HEADER] = request.context[K8S_AWS_ID_HEADER]

        sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", keep_cluster_id)
        sts.meta.events.register("before-sign.sts.GetCallerIdentity", sign_cluster_id)
        url = sts.generate_presigned_url(
            "get_caller_identity",
            Params={K8S_AWS_ID_HEADER: cluster_name},
            ExpiresIn=URL_EXPIRES_S,
            HttpMethod="GET",
        )
    except NoCredentialsError as exc:
        raise SourceAuthError(
            f"EKS cluster {cluster_name!r}: no AWS credentials to sign a token with "
            "(give the function an IAM role, or set AWS_PROFILE locally)"
        ) from exc
    except BotoCoreError as exc:
        raise SourceAuthError(f"EKS cluster {cluster_name!r}: cannot sign a token: {exc}") from exc
    encoded = base64.urlsafe_b64encode(url.encode("utf-8")).decode("ascii").rstrip("=")
    return TOKEN_PREFIX + encoded


def _utc_now() -> datetime:
    return datetime.now(UTC)


class EksTokenProvider:
    """A cached EKS token, renewed about a minute before its 15-minute life ends.

    Thread-safe; call it (`provider()`) for the current token. The clock is injected so tests can
    move time without sleeping.

    Args:
        session: boto3 session with the caller's credentials.
        cluster_name: EKS cluster name. region: the cluster's region.
        clock: returns tz-aware UTC now.
        generate: the token function (tests may replace it).
    """

    def __init__(
        self,
        session: boto3.session.Session,
        cluster_name: str,
        region: str,
        *,
        clock: Callable[[], datetime] = _utc_now,
        generate: Callable[[boto3.session.Session, str, str], str] = generate_eks_token,
    ) -> None:
        self.session = session
        self.cluster_name = cluster_name
        self.region = region
        self._clock = clock
        self._generate = generate
        self._token: str | None = None
        self._renew_at: datetime | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        """The current token (a new one when the cached one is within a minute of expiry).

        Raises:
            SourceAuthError: when no token can be signed.
        """
        with self._lock:
            now = self._clock()
            if self._token is None or self._renew_at is None or now >= self._renew_at:
                self._token = self._generate(self.session, self.cluster_name, self.region)
                self._renew_at = now + TOKEN_LIFETIME - REFRESH_MARGIN
                logger.debug("eks token signed", extra={"cluster": self.cluster_name, "renew_at": self._renew_at.isoformat()})
            return self._token
