"""Recordings that are Prometheus API JSON answers: a matrix scans like the recording it came from, a vector is
one instant, and malformed answers get clear errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.config import GpuWasteConfig

DEMO = local.demo_recording()


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=env)


def _api_answers(kind: str) -> list[dict]:  # type: ignore[type-arg]
    """The demo's telemetry as the Prometheus HTTP API would answer it (vector: the last sample of each series)."""
    import gzip

    from gpuwaste.sources.exposition import parse_exposition

    # every sample of the demo (RecordingTelemetrySource.parsed() is an index without samples: it streams)
    parsed = parse_exposition(gzip.decompress((DEMO / "telemetry.om.gz").read_bytes()), fmt="openmetrics")
    answers = []
    for s in parsed.series.values():
        metric = {"__name__": s.name, **s.labels}
        if kind == "matrix":
            item = {"metric": metric, "values": [[t / 1000, repr(v)] for t, v in zip(s.timestamps_ms, s.values, strict=True)]}
        else:
            item = {"metric": metric, "value": [s.timestamps_ms[-1] / 1000, repr(s.values[-1])]}
        answers.append(item)
    return [{"status": "success", "data": {"resultType": kind, "result": answers}}]


def test_prometheus_api_json_matrix_scans_like_the_recording(tmp_path: Path) -> None:
    # GIVEN the demo's series saved as a /api/v1/query_range answer, with its cluster objects
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(_api_answers("matrix")[0]))
    # WHEN scanned as a recording (the window and time given, as a bare answer carries no metadata)
    result = invoke("scan", "-r", str(path), "--cluster-json", str(DEMO / "cluster.json"), "--at", "2024-01-01T01:20:00Z",
                    "-w", "70m", "--cluster", "demo", "-o", "json", "-q")
    # THEN the same findings as the recording scanned with the same (default) settings
    assert result.exit_code == 0, result.output
    sources = local.recording_sources(DEMO, GpuWasteConfig())
    report = local.scan_service(sources, GpuWasteConfig(), window_s=4200).scan(at=datetime(2024, 1, 1, 1, 20, tzinfo=UTC))
    got = {(f["kind"], f["fingerprint"], (f["cost"] or {}).get("usd_per_day")) for f in json.loads(result.stdout)["findings"]}
    want = {(f.kind.value, f.fingerprint, str(f.cost.usd_per_day) if f.cost and f.cost.usd_per_day is not None else None)
            for f in report.findings}
    assert got == want and len(got) > 20


def test_prometheus_api_json_vector_is_one_instant_and_errors_are_clear(tmp_path: Path) -> None:
    # GIVEN a /api/v1/query vector answer, an error answer and a scalar answer
    vector, error, scalar = tmp_path / "v.json", tmp_path / "e.json", tmp_path / "s.json"
    vector.write_text(json.dumps(_api_answers("vector")))
    error.write_text(json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}))
    scalar.write_text(json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}))
    # WHEN scanned
    ok = invoke("scan", "-r", str(vector), "--cluster-json", str(DEMO / "cluster.json"), "-q", env={"COLUMNS": "120"})
    bad = [invoke("scan", "-r", str(p), "-q") for p in (error, scalar)]
    # THEN the vector is read as one sample per series (no sustained-use verdict); the others say what is wrong
    assert ok.exit_code == 0, ok.output and "ONE sample per series" in ok.stdout
    assert bad[0].exit_code == 2 and "error answer: bad_data: parse error" in bad[0].output
    assert bad[1].exit_code == 2 and "resultType 'scalar'" in bad[1].output
