"""Helpers for the waste-catalogue tests: minimal recordings with per-minute values and counters, scanned with every detector."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpuwaste.detectors import DetectorSettings, run_detectors
from gpuwaste.join import join
from gpuwaste.models.telemetry import Signal
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding
from gpuwaste.pricing.power import power_limits_w
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.fixtures.field_guide.builders import EVAL, STEP_S, WINDOW, Scan

Value = float | Callable[[float], float]
Series = tuple[str, dict[str, str], Value]

SM = Signal.SM_ACTIVE.value
GR = Signal.GR_ENGINE_ACTIVE.value
UTIL = Signal.GPU_UTIL.value
TENSOR = Signal.TENSOR_ACTIVE.value
DRAM = Signal.DRAM_ACTIVE.value
FB = Signal.FB_USED.value
FB_FREE = Signal.FB_FREE.value
POWER = Signal.POWER_USAGE.value
LIMIT = Signal.POWER_LIMIT.value


def counter(per_s: float, start: float = 1000.0) -> Callable[[float], float]:
    """A counter growing by `per_s` per second (value at a minute offset)."""
    return lambda minute: start + per_s * minute * 60


def exposition(series: list[Series]) -> str:
    """Text exposition (ms timestamps), one sample per 30 s over the hour ending at EVAL; values may depend on the minute."""
    start = EVAL - WINDOW
    n = int(WINDOW.total_seconds() // STEP_S)
    lines = []
    for metric, labels, value in series:
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for i in range(n + 1):
            minute = i * STEP_S / 60
            t = start + timedelta(seconds=i * STEP_S)
            v = value(minute) if callable(value) else value
            lines.append(f"{metric}{{{lab}}} {float(v)!r} {int(t.timestamp() * 1000)}")
    return "\n".join(lines) + "\n"


def gpu(uuid: str, *, node: str = "n1", model: str = "NVIDIA A10G", ns: str | None = "ml", pod: str | None = "p",
        gi: str | None = None, profile: str | None = None, index: str = "0") -> dict[str, str]:
    """dcgm-exporter labels of one device, attributed to `ns/pod` when given."""
    lab = {"gpu": index, "UUID": uuid, "modelName": model, "Hostname": node}
    if gi is not None:
        lab.update(GPU_I_ID=gi, GPU_I_PROFILE=profile or "1g.5gb")
    if ns and pod:
        lab.update(namespace=ns, pod=pod)
    return lab


def pod_labels(ns: str = "ml", pod: str = "p", **extra: str) -> dict[str, str]:
    """Labels of a pod-level series (cAdvisor / serving metrics)."""
    return {"namespace": ns, "pod": pod, **extra}


def scan(tmp: Path, series: list[Series], objects: list[dict[str, Any]], *, settings: DetectorSettings | None = None) -> Scan:
    """Write the input as a recording, read it through the recording adapters, run every detector (or `settings.enabled`), price."""
    (tmp / "telemetry.prom").write_text(exposition(series))
    (tmp / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    (tmp / "recording.json").write_text(json.dumps({"cluster": "cat", "eval_time": EVAL.isoformat(), "window_s": 3600,
                                                   "scrape_interval_s": STEP_S, "format": "text"}))
    tel = RecordingTelemetrySource(tmp).telemetry(at=EVAL, window=WINDOW)
    cl = RecordingClusterSource(tmp).cluster_state(at=EVAL)
    settings = settings or DetectorSettings()
    ctx = join(cl, tel, settings.common, power_limits_w=power_limits_w(g.model_name for g in tel.gpus))
    result = run_detectors(ctx, settings.by_name(), settings.enabled)
    book = PriceBook.bundled()
    return Scan(ctx, result, [price_finding(f, book) for f in result.findings])


def kinds(sc: Scan, pod: str = "p") -> set[str]:
    """Kinds of the findings on one pod."""
    return {f.kind.value for f in sc.for_pod(pod)}


def reasons(sc: Scan, detector: str) -> set[str]:
    """NoVerdict reasons of one detector."""
    return {nv.reason for nv in sc.result.no_verdict if nv.detector == detector}
