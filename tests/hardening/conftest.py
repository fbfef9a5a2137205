"""Hardening suite fixtures: the session's figures collector, printed at the end of the run.

Every test of this folder adds what it did to the :class:`Figures` of the session (``figures`` fixture):
faults injected (as counted by the fakes that injected them), bad inputs tried, and the invariant's counts
(alerts produced, accepted by the fakes, dead-lettered, lost, duplicates, and the product's records checked
against the fakes both ways). ``pytest_terminal_summary`` prints them, and ``pytest_sessionfinish`` fails the
run when a figure that must be zero is not (even if the test that added it did not assert).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from tests.hardening.harness import AuditedSlack

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.hardening.harness import InvariantReport


@dataclass
class Figures:
    """What the hardening suite did, summed over the session."""

    faults: Counter[str] = field(default_factory=Counter)
    bad_inputs: Counter[str] = field(default_factory=Counter)
    hostile_names: int = 0
    produced: int = 0
    delivered: int = 0
    dead_lettered: int = 0
    lost: int = 0
    duplicates: int = 0
    unconfirmed: int = 0
    unrecorded: int = 0
    scans: int = 0
    notes: dict[str, str] = field(default_factory=dict)

    def fault(self, dependency: str, count: int = 1) -> None:
        """Count `count` injected faults against `dependency` (e.g. "slack 429")."""
        self.faults[dependency] += count

    def bad_input(self, category: str, count: int = 1) -> None:
        """Count `count` bad inputs of `category` tried."""
        self.bad_inputs[category] += count

    def add(self, report: InvariantReport) -> None:
        """Add one invariant check's counts."""
        self.produced += report.produced
        self.delivered += report.delivered
        self.dead_lettered += report.dead_lettered
        self.lost += len(report.lost)
        self.duplicates += len(report.duplicates)
        self.unconfirmed += len(report.unconfirmed)
        self.unrecorded += len(report.unrecorded)

    def off(self) -> list[str]:
        """The figures that must be zero and are not."""
        named = {"lost": self.lost, "duplicates": self.duplicates, "recorded but not accepted": self.unconfirmed,
                 "accepted but not recorded": self.unrecorded}
        return [f"{k} {v}" for k, v in named.items() if v]

    def lines(self) -> list[str]:
        """The figures as printable lines."""
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        inputs = ", ".join(f"{k} {v}" for k, v in sorted(self.bad_inputs.items()))
        return [
            f"faults injected: {sum(self.faults.values())} ({faults or '-'})",
            f"bad inputs tried: {sum(self.bad_inputs.values())} ({inputs or '-'})",
            f"hostile names tried: {self.hostile_names}",
            f"scans run: {self.scans}",
            f"alerts produced: {self.produced} / accepted by the fakes: {self.delivered} / dead-lettered:"
            f" {self.dead_lettered} / lost: {self.lost} / duplicates: {self.duplicates}",
            f"product records vs the fakes: recorded but not accepted {self.unconfirmed} / accepted but not recorded"
            f" {self.unrecorded}",
            *(f"{k}: {v}" for k, v in sorted(self.notes.items())),
        ]


_FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    """The session's figures collector."""
    return _FIGURES


@pytest.fixture(scope="session")
def audited_slack_server() -> Iterator[AuditedSlack]:
    """A fake Slack that also records which calls it accepted (for the delivery invariant)."""
    with AuditedSlack() as server:
        yield server


@pytest.fixture
def audited_slack(audited_slack_server: AuditedSlack) -> AuditedSlack:
    """The audited fake Slack, reset."""
    audited_slack_server.reset()
    return audited_slack_server


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the hardening figures when any hardening test ran."""
    if not (_FIGURES.faults or _FIGURES.bad_inputs or _FIGURES.produced or _FIGURES.scans or _FIGURES.hostile_names
            or _FIGURES.notes):
        return
    terminalreporter.section("gpuwaste hardening figures")
    for line in _FIGURES.lines():
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when any figure that must be zero is not."""
    off = _FIGURES.off()
    if off:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"hardening figures off: {', '.join(off)}", red=True)
