"""Fleet generator: the detector scorecard — precision and recall per waste kind on the generated scenarios.

Generates the "scorecard" layout (every catalogue kind several times plus look-alikes that must not be
flagged), scans it through the same recording path as `gpuwaste scan`, and compares the findings with the
ground truth per kind. The wrong-hardware look-back is set to the generated window (the default is 7 days,
see docs/catalogue.md); every other setting is the default.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.fleet.generator import generate_fleet
from gpuwaste.fleet.parts import TruthItem
from gpuwaste.fleet.recording import write_recording
from gpuwaste.fleet.spec import FleetSpec
from gpuwaste.models.findings import Finding, WasteKind

IGNORED_CHECKS = ("stale_pod_label",)


@dataclass
class KindScore:
    """Counts for one kind: true positives, false positives (with their subjects), false negatives."""

    kind: str
    tp: int = 0
    fp: list[str] = field(default_factory=list)
    fn: list[str] = field(default_factory=list)
    usd_per_day: float = 0.0

    @property
    def precision(self) -> float:
        """TP ÷ (TP + FP); 1.0 when nothing was reported."""
        n = self.tp + len(self.fp)
        return self.tp / n if n else 1.0

    @property
    def recall(self) -> float:
        """TP ÷ (TP + FN); 1.0 when nothing was expected."""
        n = self.tp + len(self.fn)
        return self.tp / n if n else 1.0


@dataclass
class Scorecard:
    """The per-kind scores of one scan, and the look-alikes that were flagged."""

    scores: dict[str, KindScore]
    lookalikes: int
    lookalikes_flagged: list[str]
    findings: list[Finding]


def _key(kind: str, ns: str | None, pod: str | None, node: str | None) -> str:
    return f"node {node}" if kind == WasteKind.UNALLOCATED.value else f"{ns}/{pod}"


def score(findings: Sequence[Finding], truth: Sequence[TruthItem]) -> Scorecard:
    """Compare findings with truth items per kind (truth kind None = a look-alike: any finding on it is a false positive)."""
    want: dict[str, set[str]] = {}
    lookalike_subjects: set[str] = set()
    for t in truth:
        if t.kind:
            kind = t.kind if t.kind != "data_quality" else f"data_quality:{t.check}"
            want.setdefault(kind, set()).add(_key(t.kind, t.namespace, t.pod, t.node))
        elif t.pod:
            lookalike_subjects.add(f"{t.namespace}/{t.pod}")
    got: dict[str, set[str]] = {}
    money: dict[str, float] = {}
    for f in findings:
        kind = f.kind.value
        if f.kind is WasteKind.DATA_QUALITY:
            check = str(f.details.get("check"))
            if check in IGNORED_CHECKS:
                continue
            kind = f"data_quality:{check}"
        got.setdefault(kind, set()).add(_key(f.kind.value, f.subject.namespace, f.subject.pod, f.subject.node))
        money[kind] = money.get(kind, 0.0) + float(f.usd_per_day or 0)
    scores: dict[str, KindScore] = {}
    for kind in sorted(set(want) | set(got)):
        w, g = want.get(kind, set()), got.get(kind, set())
        scores[kind] = KindScore(kind, tp=len(w & g), fp=sorted(g - w), fn=sorted(w - g), usd_per_day=round(money.get(kind, 0.0), 2))
    flagged = sorted(f"{f.kind.value} {f.subject.namespace}/{f.subject.pod}" for f in findings
                     if f.subject.pod and f"{f.subject.namespace}/{f.subject.pod}" in lookalike_subjects)
    return Scorecard(scores, len(lookalike_subjects), flagged, list(findings))


def scorecard_settings(window_s: int) -> DetectorSettings:
    """Default detector settings, with the wrong-hardware look-back shortened to the generated window (as
    `gpuwaste scan` reads a generated recording)."""
    from gpuwaste.bootstrap.local import generated_fleet_settings

    return generated_fleet_settings(window_s)


def run_scorecard(repetitions: int = 3, seed: int = 7, workdir: Path | None = None) -> Scorecard:
    """Generate the scorecard fleet, scan its recording like `gpuwaste scan --recording`, and score it."""
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig

    spec = FleetSpec(layout="scorecard", nodes=repetitions, seed=seed, cluster="scorecard")
    fleet = generate_fleet(spec)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_recording(fleet, Path(workdir or tmp) / "scorecard", compress=False)
        window_s = spec.history_s - 600
        cfg = GpuWasteConfig(detectors=scorecard_settings(window_s))
        sources = local.recording_sources(path, cfg)
        service = local.scan_service(sources, cfg, window_s=window_s)
        report = service.scan(at=spec.eval_time)
    return score(report.findings, fleet.truth)


def format_table(card: Scorecard) -> str:
    """The per-kind table as text."""
    lines = [f"{'kind':34} {'expected':>8} {'found':>6} {'FP':>4} {'FN':>4} {'precision':>9} {'recall':>7} {'USD/day':>10}"]
    for s in card.scores.values():
        lines.append(f"{s.kind:34} {s.tp + len(s.fn):8d} {s.tp + len(s.fp):6d} {len(s.fp):4d} {len(s.fn):4d} "
                     f"{s.precision:9.3f} {s.recall:7.3f} {s.usd_per_day:10.2f}")
    lines.append(f"look-alikes: {card.lookalikes} subjects must not be flagged; flagged: {len(card.lookalikes_flagged)}")
    lines.extend(f"  {x}" for x in card.lookalikes_flagged)
    for s in card.scores.values():
        lines.extend(f"  FP {s.kind} {x}" for x in s.fp)
        lines.extend(f"  FN {s.kind} {x}" for x in s.fn)
    return "\n".join(lines)


__all__ = ["KindScore", "Scorecard", "format_table", "run_scorecard", "score", "scorecard_settings"]
