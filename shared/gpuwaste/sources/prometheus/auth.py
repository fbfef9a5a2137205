"""Prometheus auth.

None, bearer token, basic, or AWS SigV4 (Amazon Managed Service for Prometheus), and the URL with its credentials
stripped for messages.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from requests.auth import AuthBase, HTTPBasicAuth

from gpuwaste.errors import (
    ConfigError,
    SourceAuthError,
)
from gpuwaste.models.settings import PrometheusSettings


class BearerAuth(AuthBase):
    """`Authorization: Bearer <token>` on every request."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self._token}"
        return r


class SigV4Auth(AuthBase):
    """AWS Signature Version 4 on every request (Amazon Managed Service for Prometheus).

    Credentials come from botocore's default chain (env, profile, web identity, instance/Lambda role)
    and are re-read for each request, so rotated role credentials keep working.

    Args:
        region: the workspace's region. service: "aps" for AMP.
    """

    def __init__(self, region: str, service: str = "aps", session: Any = None) -> None:
        import botocore.session

        self.region = region
        self.service = service
        self._session = session or botocore.session.get_session()

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        from botocore.auth import SigV4Auth as _BotoSigV4
        from botocore.awsrequest import AWSRequest

        creds = self._session.get_credentials()
        if creds is None:
            raise SourceAuthError("SigV4: no AWS credentials found (set AWS credentials or a role for the caller)")
        body = r.body or b""
        aws_req = AWSRequest(method=r.method, url=r.url, data=body)
        _BotoSigV4(creds.get_frozen_credentials(), self.service, self.region).add_auth(aws_req)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-SHA256"):
            if name in aws_req.headers:
                r.headers[name] = aws_req.headers[name]
        return r


def safe_url(url: str) -> str:
    """The URL without user-info, query or fragment (fit for messages and logs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def auth_from_settings(settings: PrometheusSettings) -> AuthBase | None:
    """The requests auth object for the settings (secrets must already be resolved into the settings).

    Raises:
        ConfigError: when a secret is only referenced by ARN (the bootstrap resolves it) or SigV4 has no region.
    """
    a = settings.auth
    if a.kind == "bearer":
        if a.bearer_token is None:
            raise ConfigError("prometheus.auth.bearer_token: not resolved (bearer_token_secret_arn must be fetched by the bootstrap)")
        return BearerAuth(a.bearer_token.get_secret_value())
    if a.kind == "basic":
        if a.password is None or a.username is None:
            raise ConfigError("prometheus.auth.password: not resolved (password_secret_arn must be fetched by the bootstrap)")
        return HTTPBasicAuth(a.username, a.password.get_secret_value())
    if a.kind == "sigv4":
        import botocore.session

        session = botocore.session.get_session()
        region = a.sigv4_region or session.get_config_variable("region")
        if not region:
            raise ConfigError("prometheus.auth.sigv4_region: required for SigV4 (or set AWS_REGION)")
        return SigV4Auth(region, a.sigv4_service, session)
    return None
