"""`gpuwaste explain`'s text: GPU shares with at most four decimals, node-level findings say free GPUs with
their counts, pod findings say held and never print an empty note."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from gpuwaste.bootstrap import local
from gpuwaste.commands.explain import explain_text, found_list, share_text
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.findings import WasteKind

DEMO = local.demo_recording()


@pytest.fixture(scope="module")
def demo_findings():  # type: ignore[no-untyped-def]
    cfg = GpuWasteConfig()
    sources = local.recording_sources(DEMO, cfg)
    assert sources.recording is not None
    window_s = sources.recording.meta.window_s or cfg.scan.window_s
    return local.scan_service(sources, cfg, window_s=window_s).scan(at=sources.recording.end_time()).findings


def test_explain_share_text_keeps_at_most_four_decimals() -> None:
    # GIVEN shares with long and short expansions
    # WHEN formatted
    # THEN at most 4 decimals, trailing zeros dropped
    assert share_text(Decimal(1) / Decimal(7)) == "0.1429"
    assert share_text(Decimal("1.0")) == "1"
    assert share_text(0.714285714) == "0.7143"


def test_explain_node_level_finding_says_free_and_prints_counts(demo_findings) -> None:  # type: ignore[no-untyped-def]
    # GIVEN an unallocated-capacity (node-level) finding of the demo
    finding = next(f for f in demo_findings if f.kind is WasteKind.UNALLOCATED)
    # WHEN explained
    text = explain_text(finding)
    subject = next(line for line in text.splitlines() if line.startswith("subject:"))
    counts = [line for line in text.splitlines() if line.startswith("  - ") and line.split()[1].endswith("_gpus:")]
    # THEN the share is "free", with at most 4 decimals, and count evidence prints its value and note only
    assert "GPU(s) free" in subject and "held" not in subject
    assert not re.search(r"\d\.\d{5,}", subject)
    assert counts and all("samples" not in line and "coverage" not in line for line in counts)
    assert any(re.search(r"physical_gpus: \d+ · note: \w", line) for line in counts), counts


def test_explain_pod_finding_says_held_and_never_prints_an_empty_note(demo_findings) -> None:  # type: ignore[no-untyped-def]
    # GIVEN every finding of the demo
    texts = [explain_text(f) for f in demo_findings]
    idle = explain_text(next(f for f in demo_findings if f.kind is WasteKind.IDLE))
    # WHEN explained
    # THEN pod findings say "held", no text carries an empty note=, and no share has more than 4 decimals
    assert "GPU(s) held" in idle
    for text in texts:
        assert not re.search(r"note=(,|$)", text, flags=re.MULTILINE), text
        assert not re.search(r"\b\d+\.\d{5,} GPU\(s\)", text), text


def test_explain_unknown_id_lists_node_findings_as_the_scan_table_does(demo_findings) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the demo's findings, node-level (unallocated) ones among them
    # WHEN listed as `explain` lists them for an ID that matches none
    lines = found_list(demo_findings).splitlines()
    # THEN one line per finding; a node finding names "node NAME" (never "/NAME"), a pod finding "namespace/pod"
    assert len(lines) == len(demo_findings)
    nodes = [f for f in demo_findings if not f.subject.pod]
    assert nodes, "the demo has node-level findings"
    for f in nodes:
        assert any(line.endswith(f"node {f.subject.node}") for line in lines)
    assert not any(" /" in line for line in lines)
    assert any(line.endswith("inference/llama-70b-vllm-6d5-wq2") for line in lines)
