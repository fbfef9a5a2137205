"""Fleet generator: compare a scan's findings with the generated ground truth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwaste.models.findings import Finding, WasteKind


@dataclass
class TruthComparison:
    """Matched, missed and unexpected findings."""

    expected: int
    matched: int
    missed: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every expected finding was found and nothing else."""
        return not self.missed and not self.unexpected


def _key(kind: str, ns: str | None, pod: str | None, node: str | None, check: str | None) -> tuple[str, str]:
    if kind == WasteKind.UNALLOCATED.value:
        return (kind, f"node {node}")
    if kind == WasteKind.DATA_QUALITY.value:
        return (f"{kind}:{check}", f"{ns}/{pod}" if pod else f"node {node}")
    return (kind, f"{ns}/{pod}")


def compare(findings: Sequence[Finding], truth: Sequence[dict[str, Any]], *, ignore_checks: Sequence[str] = ("stale_pod_label",)) -> TruthComparison:
    """Compare findings with truth items (`kind` None = must not be flagged).

    Data-quality checks in `ignore_checks` are informational and not part of the truth.
    """
    want = {_key(t["kind"], t.get("namespace"), t.get("pod"), t.get("node"), t.get("check")) for t in truth if t.get("kind")}
    got: set[tuple[str, str]] = set()
    for f in findings:
        check = f.details.get("check") if f.kind is WasteKind.DATA_QUALITY else None
        if check in ignore_checks:
            continue
        got.add(_key(f.kind.value, f.subject.namespace, f.subject.pod, f.subject.node, str(check) if check else None))
    missed = sorted(f"missed {k} {w}" for k, w in want - got)
    unexpected = sorted(f"unexpected {k} {w}" for k, w in got - want)
    return TruthComparison(expected=len(want), matched=len(want & got), missed=missed, unexpected=unexpected)
