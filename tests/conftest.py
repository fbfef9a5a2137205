"""Test fixtures shared by every test tree: local wire-format servers, moto and a backfilled Prometheus.

Every server binds 127.0.0.1 on a random port and is stopped by handle at teardown, so tests behave the
same on a laptop and in CI and nothing leaks. Fixtures here stay generic; tree-specific ones live in
``tests/unit/conftest.py`` and ``tests/integration/conftest.py``.

============================  ==========  ==================================================================
fixture                       scope       gives
============================  ==========  ==================================================================
``kube_api``                  session     factory ``(pods, nodes, others=None, token=None) -> FakeKubeApi``
``slack_server``              session     the one :class:`FakeSlack` of the session
``slack_api``                 function    ``slack_server`` after ``reset()``
``jira_server``               session     the one :class:`FakeJira` of the session
``jira_api``                  function    ``jira_server`` after ``reset()``
``teams_server`` / ``teams``  session/fn  :class:`FakeTeams` (Workflows webhooks; ``teams`` is reset)
``webhook_server`` / ``json_webhook``  session/fn  :class:`FakeJsonWebhook` (``json_webhook`` is reset)
``moto``                      session     a started :class:`MotoServer`
``aws``                       function    ``moto`` reset, with ``AWS_ENDPOINT_URL`` + dummy creds in the env
``prometheus_factory``        session     factory ``(openmetrics_path) -> PrometheusServer`` (cached per file)
============================  ==========  ==================================================================
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.servers.jira_api import FakeJira
from tests.servers.json_webhook import FakeJsonWebhook
from tests.servers.kube_api import FakeKubeApi, KubeApiFactory
from tests.servers.moto_server import MotoServer
from tests.servers.prometheus import INSTALL_HINT, PrometheusFactory, PrometheusServer, prometheus_available
from tests.servers.slack_api import FakeSlack
from tests.servers.teams_webhook import FakeTeams

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's markers."""
    config.addinivalue_line("markers", "slow: takes more than a few seconds; deselect with -m 'not slow'")
    config.addinivalue_line(
        "markers", "integration: runs against real or wire-format servers on 127.0.0.1 (Prometheus, moto, fakes)"
    )


# -- Kubernetes -----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kube_api() -> Iterator[KubeApiFactory]:
    """Factory: start a fake kube-apiserver serving the given objects; every one is stopped at session end."""
    started: list[FakeKubeApi] = []

    def start(
        pods: Iterable[Mapping[str, Any]] = (),
        nodes: Iterable[Mapping[str, Any]] = (),
        others: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
        token: str | None = None,
        **options: Any,
    ) -> FakeKubeApi:
        server = FakeKubeApi(pods, nodes, others, token=token, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# -- Slack / Jira ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def slack_server() -> Iterator[FakeSlack]:
    """The session's fake Slack Web API (token ``FakeSlack().token``); prefer ``slack_api`` in tests."""
    with FakeSlack() as server:
        yield server


@pytest.fixture
def slack_api(slack_server: FakeSlack) -> FakeSlack:
    """The fake Slack, reset: no calls, messages, faults or missing channels; ts restarts."""
    slack_server.reset()
    return slack_server


@pytest.fixture(scope="session")
def jira_server() -> Iterator[FakeJira]:
    """The session's fake Jira Cloud (Basic auth ``jira.auth``); prefer ``jira_api`` in tests."""
    with FakeJira() as server:
        yield server


@pytest.fixture
def jira_api(jira_server: FakeJira) -> FakeJira:
    """The fake Jira, reset: no issues, requests or faults; keys restart at ``<PROJECT>-1``."""
    jira_server.reset()
    return jira_server


@pytest.fixture(scope="session")
def teams_server() -> Iterator[FakeTeams]:
    """The session's fake Teams Workflows webhooks; prefer ``teams`` in tests."""
    with FakeTeams() as server:
        yield server


@pytest.fixture
def teams(teams_server: FakeTeams) -> FakeTeams:
    """The fake Teams, reset: no flows, posts or faults."""
    teams_server.reset()
    return teams_server


@pytest.fixture(scope="session")
def webhook_server() -> Iterator[FakeJsonWebhook]:
    """The session's fake JSON webhook receiver; prefer ``json_webhook`` in tests."""
    with FakeJsonWebhook() as server:
        yield server


@pytest.fixture
def json_webhook(webhook_server: FakeJsonWebhook) -> FakeJsonWebhook:
    """The fake JSON webhook receiver, reset."""
    webhook_server.reset()
    return webhook_server


# -- AWS (moto) -----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """A moto server for the session. Tests use ``aws``, which resets it and points boto3 at it."""
    with MotoServer() as server:
        yield server


@pytest.fixture
def aws(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """Empty moto state, with ``AWS_ENDPOINT_URL``, dummy credentials and us-east-1 set in the environment."""
    moto.reset()
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    return moto


# -- Prometheus -----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusFactory]:
    """Factory: a real Prometheus backfilled from an OpenMetrics file, one per file (cached for the session).

    Without the binaries the calling test fails when ``CI=true`` (so a missing install step cannot go
    green) and is skipped with the install hint otherwise.
    """
    servers: dict[tuple[Path, int, int], PrometheusServer] = {}

    def start(openmetrics: Path) -> PrometheusServer:
        if not prometheus_available():
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI=true but {INSTALL_HINT}", pytrace=False)
            pytest.skip(INSTALL_HINT)
        path = Path(openmetrics).resolve()
        stat = path.stat()
        key = (path, stat.st_mtime_ns, stat.st_size)
        if key not in servers:
            workdir = tmp_path_factory.mktemp(f"prometheus-{path.stem}")
            servers[key] = PrometheusServer(path, workdir=workdir).start()
        return servers[key]

    yield start
    for server in servers.values():
        server.terminate()  # all at once: each Prometheus takes about 2 s to exit
    for server in servers.values():
        server.stop()
