"""Outbound URLs in the configuration: only http/https, and no link-local or cloud-metadata host (server-side
request forgery: `file:///etc/passwd` as a webhook, `http://169.254.169.254/…` as Prometheus) unless the section
opts in with `allow_link_local_urls: true`; loopback and private networks stay allowed."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from gpuwaste.config import parse_config
from gpuwaste.errors import ConfigError

SECTIONS = {  # field path → document holding the URL there
    "clusters.0.prometheus": lambda u: {"clusters": [{"name": "a", "prometheus": {"url": u}}]},
    "delivery.webhook": lambda u: {"delivery": {"webhook": {"url": u}}},
    "delivery.msteams": lambda u: {"delivery": {"msteams": {"webhooks": {"general": u}, "default_webhook": "general"}}},
    "delivery.jira": lambda u: {"delivery": {"jira": {"base_url": u}}},
    "delivery.slack": lambda u: {"delivery": {"slack": {"base_url": u}}},
    "delivery.links": lambda u: {"delivery": {"links": {"grafana": u}}},
}
REFUSED = ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://metadata.google.internal/",
           "http://2852039166/", "http://0xa9.0xfe.0xa9.0xfe/", "http://[::ffff:169.254.169.254]/",
           "http://169.254.10.1:9090", "http://[fe80::1%25eth0]/", "http://100.100.100.200/", "http://METADATA./"]
NOT_HTTP = ["file:///etc/passwd", "gopher://127.0.0.1:6379/_FLUSHALL", "ftp://x.example/", "javascript:alert(1)"]
ALLOWED = ["http://127.0.0.1:9090", "http://localhost:9090/", "http://[::1]:9090", "http://10.0.0.5:9090",
           "https://prometheus.monitoring.svc:9090", "https://example.atlassian.net"]


def _error(doc: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(json.dumps(doc))
    return str(err.value)


@pytest.mark.parametrize("where", sorted(SECTIONS))
@pytest.mark.parametrize("url", REFUSED + NOT_HTTP)
def test_outbound_url_refused_with_its_field_path(where: str, url: str) -> None:
    # GIVEN a metadata / link-local host or a scheme other than http(s) in any URL field
    # WHEN the configuration is loaded
    message = _error(SECTIONS[where](url))
    # THEN it is refused, naming the section (and field); a secret URL (webhooks) is not echoed
    assert re.search(rf": {re.escape(where)}[.:]", message), message
    if where in ("delivery.webhook", "delivery.msteams"):
        assert url not in message and "169.254" not in message


@pytest.mark.parametrize("where", sorted(SECTIONS))
@pytest.mark.parametrize("url", ALLOWED)
def test_outbound_url_loopback_and_private_networks_allowed(where: str, url: str) -> None:
    # GIVEN a loopback, private-network or public URL WHEN loaded THEN it is accepted
    parse_config(json.dumps(SECTIONS[where](url)))


@pytest.mark.parametrize("where", sorted(SECTIONS))
def test_outbound_url_link_local_allowed_only_by_the_section_opt_in(where: str) -> None:
    # GIVEN the metadata address with the section's allow_link_local_urls
    doc = SECTIONS[where]("http://169.254.169.254/")
    section = doc
    for part in where.split("."):
        section = section[int(part)] if part.isdigit() else section[part]  # type: ignore[index]
    section["allow_link_local_urls"] = True  # type: ignore[index]
    # WHEN loaded THEN accepted; a non-HTTP scheme stays refused even then
    parse_config(json.dumps(doc))
    if where == "delivery.webhook":
        doc["delivery"]["webhook"]["url"] = "file:///etc/passwd"  # type: ignore[index]
        assert "scheme 'file'" in _error(doc)


def test_outbound_url_cli_prometheus_flag_refuses_the_metadata_service() -> None:
    # GIVEN `scan --prometheus http://169.254.169.254/` WHEN run THEN exit 2 with one error line, no request made
    from gpuwaste.cli import app

    result = CliRunner().invoke(app, ["scan", "--prometheus", "http://169.254.169.254/"])
    assert result.exit_code == 2 and "cloud metadata service" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("secret", "section"), [
    ('{"general": "http://169.254.169.254/latest?sig=CANARYsig123"}', "msteams"),
    ('{"url": "file:///etc/passwd", "signing_secret": "s"}', "webhook"),
])
def test_outbound_url_read_from_a_secret_is_checked_too(secret: str, section: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the Teams / webhook URLs in Secrets Manager (Lambda), one pointing at the metadata service or a file
    from gpuwaste.bootstrap import delivery
    from gpuwaste.models.settings import DeliverySettings

    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hooks"
    monkeypatch.setattr(delivery, "_secret", lambda _arn: secret)
    settings = DeliverySettings.model_validate({"msteams": {"secret_arn": arn, "default_webhook": "general"},
                                                "webhook": {"secret_arn": arn}})
    # WHEN the sinks are built
    with pytest.raises(ConfigError) as err:
        delivery.teams_notifier(settings) if section == "msteams" else delivery.webhook_notifier(settings)
    # THEN refused, naming the secret and the key, never the URL
    assert arn in str(err.value) and "169.254" not in str(err.value) and "CANARY" not in str(err.value)
