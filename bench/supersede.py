"""Supersession (`detectors.registry._supersede`, and `superseded_now` during detection): identical output to the
pairwise comparison it replaced, and its time when many findings share one subject key.

1. Identity: the bundled demo fleet and generated scorecard/random fleets are detected twice — with the indexed
   `_Presence.covers` and with a pairwise reference (`_overlap` against every entry at the key, the code before) in
   its place — and every finding (canonical JSON, in order) must be the same.
2. Timing: N synthetic findings at one subject key (what 20,000 GPUs whose Hostname matches no node produce), half of
   a detector and half of one that supersedes it, with episodes that never overlap (the pairwise code's worst
   case: every pair compared), through the old pairwise `_supersede` and the new one; the outputs compared too.

    PYTHONPATH=shared:. .venv/bin/python -m bench.supersede [N ...]   (default N: 1000 2000 5000 20000 50000;
                                                                       the pairwise code is timed up to 5000)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpuwaste.bootstrap import local
from gpuwaste.detectors import registry
from gpuwaste.detectors.registry import REGISTRY, _overlap, _supersede, run_detectors, subject_key
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.findings import Episode

PAIRWISE_UP_TO = 5000


def _supersede_pairwise(findings: list[Any], present: dict[Any, list[Any]]) -> list[Any]:
    """The code before: every finding against every entry at its subject key (quadratic in a shared key)."""
    out = []
    for f in findings:
        spec = REGISTRY.get(f.detector)
        if spec and any(o.detector in spec.superseded_by and _overlap(o.episodes, f.episodes) for o in present.get(subject_key(f), [])):
            continue
        out.append(f)
    return out


class _PairwisePresence:
    """`registry._Presence` as the code before answered it: `_overlap` against every entry at the key."""

    def __init__(self) -> None:
        self.entries: dict[Any, list[tuple[str, tuple[Episode, ...]]]] = {}

    def add(self, key: Any, detector: str, episodes: tuple[Episode, ...]) -> None:
        self.entries.setdefault(key, []).append((detector, episodes))

    def covers(self, key: Any, detectors: Iterable[str], episodes: tuple[Episode, ...]) -> bool:
        wanted = set(detectors)
        return any(d in wanted and _overlap(e, episodes) for d, e in self.entries.get(key, ()))


def _fleets(tmp: Path) -> Iterator[tuple[str, Path, int | None]]:
    yield "demo", local.demo_recording(), None
    yield "demo-30m", local.demo_recording(), 1800
    for layout, nodes, seed in (("scorecard", 2, 7), ("random", 30, 3), ("random", 120, 11)):
        path = write_recording(generate_fleet(FleetSpec(layout=layout, nodes=nodes, seed=seed, cluster=layout)),
                               tmp / f"{layout}-{nodes}", compress=False)
        yield f"{layout}-{nodes}", path, None


def _detect(path: Path, window_s: int | None) -> list[str]:
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.join import join
    from gpuwaste.pricing.power import power_limits_w

    cfg = GpuWasteConfig()
    sources = local.recording_sources(path, cfg)
    cfg, _ = local.recording_config(cfg, sources, config_given=False)
    assert sources.recording is not None
    at = sources.recording.end_time()
    telemetry = sources.telemetry.telemetry(at=at, window=timedelta(seconds=window_s or sources.recording.meta.window_s or 3600))
    cluster = sources.cluster.cluster_state(at=at)
    ctx = join(cluster, telemetry, cfg.detectors.common, power_limits_w=power_limits_w(g.model_name for g in telemetry.gpus))
    result = run_detectors(ctx, cfg.detectors.by_name(), cfg.detectors.enabled)
    return [json.dumps(f.model_dump(mode="json"), sort_keys=True) for f in result.findings]


def identity() -> bool:
    ok = True
    with tempfile.TemporaryDirectory(prefix="supersede-") as tmp:
        for name, path, window_s in _fleets(Path(tmp)):
            new = _detect(path, window_s)
            indexed = registry._Presence
            registry._Presence = _PairwisePresence  # type: ignore[misc, assignment]
            try:
                old = _detect(path, window_s)
            finally:
                registry._Presence = indexed  # type: ignore[misc]
            same = new == old
            ok &= same
            print(f"identity {name:14} findings {len(new):5}  {'identical' if same else 'DIFFERENT'}")
    return ok


def _synthetic(n: int) -> tuple[list[Any], dict[Any, list[Any]]]:
    """n findings at one key: half `idle_allocation`, half `stalled` (which supersedes it), 5-minute episodes; one
    `stalled` in four overlaps the `idle_allocation` before it (that one is superseded), the rest are disjoint."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    subject = SimpleNamespace(namespace=None, pod=None, node=None)
    findings = []
    for i in range(n):
        start = t0 + timedelta(minutes=10 * i - (8 if i % 4 == 1 else 0))
        ep = Episode(start=start, end=start + timedelta(minutes=5))
        findings.append(SimpleNamespace(detector="stalled" if i % 2 else "idle_allocation", episodes=(ep,), subject=subject))
    return findings, {subject_key(findings[0]): list(findings)}  # type: ignore[arg-type]


def timing(sizes: list[int]) -> bool:
    ok = True
    for n in sizes:
        findings, present = _synthetic(n)
        t = time.perf_counter()
        new = _supersede(findings, present)  # type: ignore[arg-type]
        new_s = time.perf_counter() - t
        line = f"timing n={n:6}  indexed {new_s:8.3f} s"
        if n <= PAIRWISE_UP_TO:
            t = time.perf_counter()
            old = _supersede_pairwise(findings, present)
            old_s = time.perf_counter() - t
            same = [id(f) for f in new] == [id(f) for f in old]
            ok &= same
            line += f"  pairwise {old_s:8.3f} s  ({old_s / max(new_s, 1e-9):,.0f}×)  {'identical' if same else 'DIFFERENT'}"
        else:
            line += "  pairwise (not run: quadratic)"
        print(line + f"  kept {len(new)}")
    return ok


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1000, 2000, 5000, 20000, 50000]
    ok = identity() & timing(sizes)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
