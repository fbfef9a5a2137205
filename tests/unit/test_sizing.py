"""The one scan sizing table (issue 23 item 6): the template, docs/deploy.md and the projection agree with
`bench/sizing.py`, which is derived from the benchmark's two measured sizes."""

from __future__ import annotations

import pytest

from bench.projection import project
from bench.sizing import MEASURED, SHARD_GPUS, markdown_table, scan_size, shards_for
from tests.aws_resources import ROOT, load_template


def test_template_scan_function_is_the_tables_row_for_its_shard_size() -> None:
    # GIVEN the template's scan function
    props = load_template()["Resources"]["ScanGpuWasteFunction"]["Properties"]
    # WHEN compared with the table's row for the shard size the template is sized for
    row = scan_size(SHARD_GPUS)
    # THEN memory and timeout are that row's
    assert (int(props["MemorySize"]), int(props["Timeout"])) == (row.memory_mb, row.timeout_s)


def test_deploy_guide_prints_the_table_as_generated() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    assert markdown_table() in text, "regenerate it: python -m bench.sizing"


def test_projection_sizes_the_scan_with_the_table() -> None:
    # GIVEN a report with the measured 10,004-GPU size
    report = {"sizes": [{"gpus": 10_004, "ours_s": 8.4, "ours_cpu_s": 6.35, "peak_rss_mb": 433.0, "findings": 2510,
                         "rss_before_scan_mb": 95.0, "usd_per_day": 1.0}], "chain": {}}
    # WHEN projected
    scan = project(report)["scan"]
    # THEN its memory and timeout are the table's row (one shard per 10,000 GPUs)
    row = scan_size(SHARD_GPUS)
    assert (scan["memory_mb"], scan["timeout_s"], scan["shards"]) == (row.memory_mb, row.timeout_s, 1)


def test_the_model_goes_through_the_measurements_and_grows_with_the_shard() -> None:
    for gpus, (peak, _wall, cpu) in MEASURED.items():
        row = scan_size(gpus)
        assert row.peak_mb == pytest.approx(peak, abs=0.1) and row.cpu_s == pytest.approx(cpu, abs=0.01)
        assert row.memory_mb >= 2 * peak and row.timeout_s >= 20 * row.lambda_wall_s
    sizes = [scan_size(g) for g in (1_000, 10_000, 40_000, 100_000)]
    assert [s.memory_mb for s in sizes] == sorted(s.memory_mb for s in sizes)
    with pytest.raises(ValueError, match="more shards"):
        scan_size(400_000)
    assert (shards_for(500), shards_for(10_000), shards_for(10_001), shards_for(100_000)) == (1, 1, 2, 10)
