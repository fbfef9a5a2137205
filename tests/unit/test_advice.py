"""The advice table (`gpuwaste.advice`): one test per row (kind × situation), and a property test over the demo, the
scorecard fleet and random generated fleets: no advice names an object the cluster does not have, no drain is
advised on a node with GPUs in use, no resize is a no-op, and every command that ends or evicts work says so."""

from __future__ import annotations

import json
import re
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwaste.advice import TABLE, Owner, advise, situation, snooze_target
from gpuwaste.models.findings import Confidence, Evidence, Finding, Subject, WasteKind

T0 = datetime(2024, 1, 1, tzinfo=UTC)

#: (workload kind, owner_exists, extra details) that put a pod finding in each owner situation.
_POD_SITUATIONS: dict[Owner, tuple[str, bool | None, dict[str, Any]]] = {
    Owner.CONTROLLER: ("Deployment", True, {}),
    Owner.JOB: ("CronJob", True, {}),
    Owner.POD: ("Pod", None, {}),
    Owner.GONE: ("Deployment", False, {}),
    Owner.OPERATOR: ("PyTorchJob", None, {}),
}

#: Commands that end, restart or evict work: each must carry a warning.
_CHANGES = re.compile(r"\bkubectl\b.*\b(scale|delete|drain|cordon|set resources|annotate \S+ kubeflow-resource-stopped)\b")


def _finding(kind: WasteKind, owner: Owner, *, gpus: str = "2", confidence: Confidence = Confidence.HIGH,
             in_use: float = 0.0, details: dict[str, Any] | None = None) -> Finding:
    if owner in (Owner.NODE_FREE, Owner.NODE_IN_USE, Owner.NONE):
        node = None if owner is Owner.NONE else "gpu-node-1"
        subject = Subject(cluster="c", node=node, workload_kind="Node" if node else None, workload_name=node,
                          gpu_share=Decimal(1), physical_gpus_on_node=8 if node else None)
        evidence: tuple[Evidence, ...] = ()
        if kind is WasteKind.UNALLOCATED:
            evidence = (Evidence(signal="physical_gpus", unit="count", window_s=3600, avg=8.0),
                        Evidence(signal="requested_gpus", unit="count", window_s=3600,
                                 avg=in_use if owner is Owner.NODE_IN_USE else 0.0))
        d = {"gpu_pods": "ml/trainer-0 (7 GPUs)"} if owner is Owner.NODE_IN_USE else {}
        return Finding(kind=kind, detector=kind.value, subject=subject, title="t", recommendation="look at it (B16)",
                       observed_at=T0, window_s=3600, wasted_gpu_share=Decimal(1), evidence=evidence,
                       confidence=confidence, details={**d, **(details or {})})
    wk, exists, extra = _POD_SITUATIONS[owner]
    subject = Subject(cluster="c", namespace="ml", workload_kind=wk, workload_name="trainer" if wk != "Pod" else "trainer-0",
                      pod="trainer-0", node="gpu-node-1", gpu_share=Decimal(gpus), owner_exists=exists)
    return Finding(kind=kind, detector=kind.value, subject=subject, title="t", recommendation="do the thing (B16)",
                   observed_at=T0, window_s=3600, wasted_gpu_share=Decimal(gpus) * Decimal("0.85"), confidence=confidence,
                   details={"activity_avg_ratio": 0.15, "cpu_limit_cores": 4.0, "cheapest_option": "A100-SXM4-40GB MIG 1g.10gb",
                            **extra, **(details or {})})


def _names(text: str) -> set[str]:
    """The `kind/name` objects a command names (a `$(…)` lookup of the pod's own owner is not a name)."""
    return {m.group(0).lower() for m in re.finditer(r"(?<![\w.\\/-])[a-z]+/[\w.-]+", text) if "$(" not in text[m.start() - 2:m.start()]}


def _check_invariants(f: Finding) -> None:
    """What every piece of advice must hold, whatever its row."""
    a = advise(f)
    s = f.subject
    allowed = {f"pod/{s.pod}", f"node/{s.node}"}
    if s.owner_exists is not False and s.workload_kind and s.workload_name:
        allowed.add(f"{s.workload_kind}/{s.workload_name}".lower())
    for c in a.commands:
        named = _names(c.text)
        assert named <= {n.lower() for n in allowed}, (a.row, c.text, named - allowed)
        if _CHANGES.search(c.text):
            assert c.warning, (a.row, c.text)
        if f.confidence is Confidence.LOW:
            assert not c.changes_things, (a.row, c.text)
    assert "(B16)" not in a.action and "_allocation" not in a.action


ROWS = sorted(TABLE, key=lambda k: (k[0].value, k[1].value))


@pytest.mark.parametrize(("kind", "owner"), ROWS, ids=[f"{k.value}-{o.name.lower()}" for k, o in ROWS])
def test_each_row_is_chosen_for_its_situation_and_holds_the_invariants(kind: WasteKind, owner: Owner) -> None:
    # GIVEN a finding of this kind in this situation
    f = _finding(kind, owner, in_use=7.0)
    # WHEN advised
    a = advise(f)
    # THEN the row for (kind, owner) wrote it, in people's words, and every invariant holds
    assert situation(f).owner is owner
    assert a.row.startswith(f"{kind.value} × {owner.value}"), a.row
    assert a.action and "(B16)" not in a.action
    _check_invariants(f)
    # AND the same finding at low confidence says "check first" and changes nothing
    low = _finding(kind, owner, in_use=7.0, confidence=Confidence.LOW)
    la = advise(low)
    assert la.action.startswith("Check first") and la.caution.startswith("Low confidence")
    assert not any(c.changes_things for c in la.commands)
    _check_invariants(low)


def test_a_gone_owner_gets_the_pod_never_a_scale_command() -> None:
    # GIVEN findings about a pod whose Deployment is gone (the orphan detector's, and an idle one)
    for kind in (WasteKind.ORPHANED, WasteKind.IDLE, WasteKind.INFERENCE_IDLE, WasteKind.STALLED):
        f = _finding(kind, Owner.GONE, details={"reason": "owner_gone"} if kind is WasteKind.ORPHANED else {})
        a = advise(f)
        text = " ".join(c.text for c in a.commands)
        # THEN no command scales or annotates the missing Deployment; the pod is what is acted on and snoozed
        assert "deployment/" not in text and "scale" not in text, (kind, text)
        assert "delete pod/trainer-0" in text
        assert snooze_target(f) == "pod/trainer-0"
    # AND when the owner exists the controller is what is scaled and snoozed
    f = _finding(WasteKind.IDLE, Owner.CONTROLLER)
    assert [c.text for c in advise(f).commands] == ["kubectl -n ml scale deployment/trainer --replicas=0"]
    assert snooze_target(f) == "deployment/trainer"


def test_a_node_with_gpus_in_use_is_never_drained_and_its_pods_are_named() -> None:
    # GIVEN free capacity on a node where 7 of 8 GPUs are requested by pods
    a = advise(_finding(WasteKind.UNALLOCATED, Owner.NODE_IN_USE, in_use=7.0))
    text = " ".join(c.text for c in a.commands)
    # THEN nothing drains or cordons it, the advice says why and names what runs there
    assert "drain" not in text and "cordon" not in text
    assert a.action.startswith("Do not drain gpu-node-1: 7 GPUs on it are in use.")
    assert a.caution == "In use on this node: ml/trainer-0 (7 GPUs)."
    # AND a node whose GPUs are all free gets cordon + drain, each with its warning, after a look at what runs there
    free = advise(_finding(WasteKind.UNALLOCATED, Owner.NODE_FREE))
    assert [c.text.split()[1] for c in free.commands] == ["get", "cordon", "drain"]
    assert "evicts every pod" in free.commands[2].warning and free.commands[0].warning == ""


def test_a_resize_is_never_a_no_op() -> None:
    # GIVEN an under-used Deployment holding 2 GPUs at 15 % activity, and one holding 1 GPU
    two = advise(_finding(WasteKind.UNDERUSED, Owner.CONTROLLER, gpus="2"))
    one = advise(_finding(WasteKind.UNDERUSED, Owner.CONTROLLER, gpus="1"))
    # THEN the first is told to request 1 GPU (restart warned), the second is never told "fewer GPUs"
    assert two.commands[0].text == ("kubectl -n ml set resources deployment/trainer --limits=nvidia.com/gpu=1 "
                                    "--requests=nvidia.com/gpu=1")
    assert "rolling restart" in two.commands[0].warning
    assert not any("set resources" in c.text for c in one.commands)
    assert "no smaller whole-GPU request" in one.action and "MIG slice" in one.action
    # AND a MIG-slice holder is told a smaller profile, never "fewer GPUs" or "move to a MIG slice"
    share = advise(_finding(WasteKind.UNDERUSED, Owner.CONTROLLER, gpus="0.1428571428571428571428571429"))
    assert "0.14-GPU share" in share.action and "smaller MIG profile" in share.action
    assert not any("set resources" in c.text for c in share.commands)
    # AND a busy 2-GPU holder (activity 90 %) gets no resize either
    busy = advise(_finding(WasteKind.UNDERUSED, Owner.CONTROLLER, gpus="2", details={"activity_avg_ratio": 0.9}))
    assert not any("set resources" in c.text for c in busy.commands)
    # AND a wrong-hardware finding already on the advised MIG profile gets no resize
    same = advise(_finding(WasteKind.WRONG_HARDWARE, Owner.CONTROLLER, gpus="1", details={"current_mig_profile": "1g.10gb"}))
    assert not any("set resources" in c.text for c in same.commands)
    mig = advise(_finding(WasteKind.WRONG_HARDWARE, Owner.CONTROLLER, gpus="1"))
    assert "nvidia.com/mig-1g.10gb=1" in mig.commands[-1].text


def test_low_confidence_says_check_first_and_keeps_only_read_only_commands() -> None:
    # GIVEN a low-confidence idle Deployment (a short observation)
    f = _finding(WasteKind.IDLE, Owner.CONTROLLER, confidence=Confidence.LOW,
                 details={"short_observation": "only 12 min observed (< 30 min)"})
    a = advise(f)
    # THEN it says check first, why, and gives a look, not a scale-to-zero
    assert a.action.startswith("Check first: confidence is low (only 12 min observed (< 30 min)).")
    assert [c.text for c in a.commands] == ["kubectl -n ml describe pod/trainer-0"]
    assert "left out" in a.caution


# -- the property test over real scans -------------------------------------------------------------------------


def _objects(cluster_json: Path) -> tuple[set[str], dict[str, float], set[str]]:
    """(every kind/name and node/name in the recording, GPUs requested by live pods per node, kinds listed)."""
    items = json.loads(cluster_json.read_text())["items"]
    names: set[str] = set()
    in_use: dict[str, float] = {}
    kinds: set[str] = set()
    for it in items:
        kind, name = it["kind"].lower(), it["metadata"]["name"]
        kinds.add(kind)
        names.add(f"{kind}/{name}")
        if kind == "pod" and it.get("status", {}).get("phase") in ("Running", "Pending", None):
            node = it.get("spec", {}).get("nodeName")
            for c in it.get("spec", {}).get("containers", []):
                lim = c.get("resources", {}).get("limits", {})
                n = sum(float(v) for k, v in lim.items() if k.startswith("nvidia.com/"))
                if node and n:
                    in_use[node] = in_use.get(node, 0.0) + n
    return names, in_use, kinds


def _check_scan(recording: Path, findings: list[Finding]) -> int:
    """Every finding's advice against the recorded cluster; returns the number checked."""
    names, in_use, kinds = _objects(recording / "cluster.json")
    for f in findings:
        _check_invariants(f)
        a = advise(f)
        for c in a.commands:
            for n in _names(c.text):
                kind = n.split("/", 1)[0]
                if kind in ("nvidia.com", "app.kubernetes"):
                    continue
                # an object of a kind the recording lists must be in it (an unlisted kind's existence is unknown)
                assert kind not in kinds or n in names, (a.row, c.text, n)
            m = re.search(r"spec\.nodeName=(\S+)|\b(?:cordon|drain) (\S+)", c.text)
            if m:
                assert f"node/{m.group(1) or m.group(2)}" in names, c.text
            if " drain " in c.text:
                node = c.text.split(" drain ", 1)[1].split()[0]
                assert in_use.get(node, 0.0) == 0, (c.text, in_use.get(node))
            if "set resources" in c.text and "nvidia.com/gpu=" in c.text:
                new = Decimal(re.search(r"nvidia\.com/gpu=(\d+)", c.text).group(1))  # type: ignore[union-attr]
                mig = "mig-" in c.text
                assert mig or new != f.subject.gpu_share, c.text
    return len(findings)


def _scan_recording(path: Path, *, generated_window_s: int | None = None) -> list[Finding]:
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig

    if generated_window_s is None:
        sources = local.recording_sources(path, GpuWasteConfig())
        cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
        assert sources.recording is not None
        report = local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s).scan(at=sources.recording.end_time())
    else:
        from gpuwaste.fleet.scorecard import scorecard_settings

        cfg = GpuWasteConfig(detectors=scorecard_settings(generated_window_s))
        sources = local.recording_sources(path, cfg)
        assert sources.recording is not None
        report = local.scan_service(sources, cfg, window_s=generated_window_s).scan(at=sources.recording.end_time())
    return list(report.findings)


def _generated(layout: str, nodes: int, seed: int, tmp: Path) -> tuple[Path, list[Finding]]:
    from gpuwaste.fleet.generator import generate_fleet
    from gpuwaste.fleet.recording import write_recording
    from gpuwaste.fleet.spec import FleetSpec

    spec = FleetSpec(layout=layout, nodes=nodes, seed=seed, cluster=layout)
    path = write_recording(generate_fleet(spec), tmp / f"{layout}-{seed}", compress=False)
    return path, _scan_recording(path, generated_window_s=spec.history_s - 600)


CHECKED: dict[str, int] = {}


def test_advice_holds_on_the_demo() -> None:
    from gpuwaste.bootstrap import local

    demo = local.demo_recording()
    findings = _scan_recording(demo)
    CHECKED["demo"] = _check_scan(demo, findings)
    kinds = {f.kind for f in findings}
    assert len(kinds) >= 10 and CHECKED["demo"] >= 20  # the demo's every kind was advised, not a few
    # AND the situations the invariants guard are in it: nodes with GPUs in use, a gone owner, a 1-GPU under-use
    rows = {advise(f).row for f in findings}
    assert {"unallocated_capacity × node, GPUs in use", "orphaned × owner gone",
            "underused_allocation × controller × at most 1 GPU"} <= rows, rows


def test_advice_holds_on_the_scorecard_fleet(tmp_path: Path) -> None:
    path, findings = _generated("scorecard", 3, 7, tmp_path)
    CHECKED["scorecard"] = _check_scan(path, findings)
    assert CHECKED["scorecard"] >= 45  # 3 repetitions of the catalogue


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), nodes=st.integers(2, 8))
def test_advice_holds_on_random_generated_fleets(seed: int, nodes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, findings = _generated("random", nodes, seed, Path(tmp))
        CHECKED[f"random-{seed}-{nodes}"] = _check_scan(path, findings)


def test_zz_report_size() -> None:
    """Prints how much the property tests checked (fleets × findings), for the report."""
    print(f"\nadvice property test: {len(CHECKED)} fleets, {sum(CHECKED.values())} findings checked: {CHECKED}")
