"""Unit: EKS bearer tokens, built like `aws eks get-token`, and their cache."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import boto3
import botocore.auth
import pytest

from gpuwaste.errors import SourceAuthError
from gpuwaste.sources.eks_token import TOKEN_PREFIX, EksTokenProvider, generate_eks_token, sts_endpoint

SIGNED_AT = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> boto3.session.Session:
    """A session with fixed dummy credentials, signing at a frozen time, whatever the environment says."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: SIGNED_AT)
    return boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        region_name="eu-west-1",
    )


def _decode(token: str) -> tuple[str, dict[str, list[str]]]:
    body = token.removeprefix(TOKEN_PREFIX)
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    return url, parse_qs(urlsplit(url).query)


def test_generate_eks_token_is_a_presigned_get_caller_identity_url(
    session: boto3.session.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN fixed credentials, a frozen clock, and an AWS_ENDPOINT_URL meant for other services
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5999")
    # WHEN a token is generated for cluster "prod" in us-east-2
    token = generate_eks_token(session, "prod", "us-east-2")
    # THEN it is k8s-aws-v1.<base64url, unpadded> of a presigned STS URL of that region
    assert token.startswith("k8s-aws-v1.")
    assert "=" not in token
    url, query = _decode(token)
    parts = urlsplit(url)
    assert (parts.scheme, parts.hostname) == ("https", "sts.us-east-2.amazonaws.com")
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["Version"] == ["2011-06-15"]
    assert query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Date"] == ["20260301T120000Z"]
    assert query["X-Amz-Credential"] == ["AKIDEXAMPLE/20260301/us-east-2/sts/aws4_request"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert len(query["X-Amz-Signature"][0]) == 64


def test_generate_eks_token_signature_covers_the_cluster_name(session: boto3.session.Session) -> None:
    # GIVEN the same credentials and time
    # WHEN tokens are made for two clusters and twice for one
    first, again, other = (generate_eks_token(session, name, "eu-west-1") for name in ("prod", "prod", "staging"))
    # THEN signing is deterministic and the cluster name changes the signature
    assert first == again
    assert _decode(first)[1]["X-Amz-Signature"] != _decode(other)[1]["X-Amz-Signature"]


def test_sts_endpoint_uses_the_china_partition_suffix() -> None:
    # GIVEN / WHEN / THEN
    assert sts_endpoint("cn-north-1") == "https://sts.cn-north-1.amazonaws.com.cn"
    assert sts_endpoint("us-west-2") == "https://sts.us-west-2.amazonaws.com"


def test_generate_eks_token_without_credentials_is_auth_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    # GIVEN an environment with no credentials anywhere (and no instance metadata lookup)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    empty = boto3.session.Session(region_name="us-east-1")
    # WHEN / THEN
    with pytest.raises(SourceAuthError, match="no AWS credentials"):
        generate_eks_token(empty, "prod", "us-east-1")


def test_eks_token_provider_reuses_a_token_until_a_minute_before_expiry() -> None:
    # GIVEN a provider with a movable clock and a counting generator
    now = [SIGNED_AT]
    made: list[str] = []

    def generate(_session: object, cluster: str, region: str) -> str:
        made.append(f"{cluster}/{region}/{len(made)}")
        return made[-1]

    provider = EksTokenProvider(object(), "prod", "us-east-1", clock=lambda: now[0], generate=generate)  # type: ignore[arg-type]
    # WHEN it is asked at 0, 13m59s and 14m
    first = provider()
    now[0] = SIGNED_AT + timedelta(minutes=13, seconds=59)
    cached = provider()
    now[0] = SIGNED_AT + timedelta(minutes=14)
    renewed = provider()
    # THEN the token is reused within its life and renewed one minute before the 15-minute expiry
    assert first == cached == "prod/us-east-1/0"
    assert renewed == "prod/us-east-1/1"
    assert len(made) == 2
