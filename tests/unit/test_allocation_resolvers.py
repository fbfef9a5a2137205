"""Allocation resolvers (DRA, HAMi, KAI/Run:ai, vGPU) on the field guide's minimal inputs (B25, B27, B28).

Each input is written as a recording (text exposition + `kubectl get -o json` List with real
`resource.k8s.io/v1` objects), read by the recording adapters, and handed to the resolver, so the parsers
of the cluster and of the exporter's `dra_*` labels are on the path.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from gpuwaste.allocation import mix_text, resolve
from gpuwaste.allocation.dra import DraResolver
from gpuwaste.allocation.hami import HamiResolver, parse_allocated
from gpuwaste.allocation.kai import KaiResolver
from gpuwaste.allocation.physical import physical_gpu_count
from gpuwaste.allocation.vgpu import VgpuResolver, vgpu_fraction
from gpuwaste.models.telemetry import DeviceId, Signal
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.fixtures.allocation.objects import (
    claim_pod,
    device_classes,
    dra_node,
    hami_node,
    hami_pod,
    kai_pod,
    kai_reservation,
    resource_claim,
    resource_slice,
    uuid,
)
from tests.fixtures.field_guide.builders import EVAL, STEP_S, WINDOW, S, exposition, node, pod

GR = Signal.GR_ENGINE_ACTIVE.value
NONE: frozenset[tuple[str, str]] = frozenset()


def read(tmp, series, objects):
    (tmp / "telemetry.prom").write_text(exposition(series))
    (tmp / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    (tmp / "recording.json").write_text(json.dumps({"cluster": "fg", "eval_time": EVAL.isoformat(), "window_s": 3600,
                                                   "scrape_interval_s": STEP_S, "format": "text"}))
    tel = RecordingTelemetrySource(tmp).telemetry(at=EVAL, window=WINDOW)
    cluster = RecordingClusterSource(tmp).cluster_state(at=EVAL)
    return cluster, tuple(tel.gpus)


def rate(itype: str) -> Decimal:
    r = PriceBook.bundled().gpu_hour_rate(instance_type=itype, capacity_type="on-demand", gpu_model=None, physical_gpus=None)
    return r.usd_per_gpu_hour


# --- B25: DRA -----------------------------------------------------------------------------------------------
NODE25 = "ip-10-0-9-1.ec2.internal"
H100 = [uuid(0x64 + i) for i in range(8)]


def _b25_series(claimed: int = 4, report: int = 8) -> list[S]:
    out = []
    for i in range(report):
        labels = {"gpu": str(i), "UUID": H100[i], "modelName": "NVIDIA H100 80GB HBM3", "Hostname": NODE25}
        if i < claimed:
            labels |= {"container": "main", "namespace": "research", "pod": "trainer-0", "dra_claim_name": "trainer-0-gpus-x7k2p",
                       "dra_claim_namespace": "research", "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": NODE25,
                       "dra_device_name": f"gpu-{i}"}
        else:
            labels |= {"container": "", "namespace": "", "pod": ""}
        out.append(S(GR, labels, 0.001))
    return out


def _b25_objects(*, with_dra: bool = True) -> list[dict]:
    objs = [dra_node(NODE25), claim_pod("research", "trainer-0", NODE25, "trainer-0-gpus-x7k2p")]
    if with_dra:
        objs += [resource_claim("research", "trainer-0-gpus-x7k2p", NODE25, [f"gpu-{i}" for i in range(4)],
                                consumers=[("trainer-0", "uid-research-trainer-0")]),
                 resource_slice(NODE25, H100), *device_classes()]
    return objs


def test_b25_dra_claim_holder_holds_its_four_allocated_gpus(tmp_path):
    # GIVEN the B25 input: 8 x H100 (p5.48xlarge), trainer-0 holds 4 through a ResourceClaim, no nvidia.com/gpu anywhere
    cluster, devices = read(tmp_path, _b25_series(), _b25_objects())
    resolver = DraResolver()
    # WHEN the DRA resolver runs
    assert resolver.applies(cluster, devices)
    result = resolver.resolve(cluster, devices, handled=NONE)
    # THEN trainer-0 holds exactly the 4 claimed GPUs, measured per pod, and the node has 8 physical GPUs
    [h] = result.holdings
    assert (h.pod.namespace, h.pod.name, h.share, h.mechanism) == ("research", "trainer-0", Decimal(4), "DRA")
    assert set(h.devices) == {DeviceId(uuid=u) for u in H100[:4]}
    assert h.per_pod_activity is True
    assert {k[:2] for k in result.handled_pods} == {("research", "trainer-0")}  # (namespace, name, uid)
    assert result.physical_gpus == {NODE25: 8}
    assert result.unmonitored == ()
    # AND priced at $55.04/h for 8 GPUs: trainer-0's idle GPUs are $660.48/day, the 4 unallocated another $660.48/day
    per_gpu_day = rate("p5.48xlarge") * 24
    assert h.share * per_gpu_day == Decimal("660.48")
    count = physical_gpu_count(cluster.nodes[0], len({d.device.uuid for d in devices}), known_by_resolvers=result.physical_gpus[NODE25])
    assert (count.gpus, count.basis, count.notes) == (8, "dcgm", ())
    assert (count.gpus - h.share) * per_gpu_day == Decimal("660.48")


def test_b25_claim_reader_tolerates_v1beta1_objects(tmp_path):
    # GIVEN the same cluster served as resource.k8s.io/v1beta1 (requests without `exactly`, slice devices under `basic`)
    objs = [dra_node(NODE25), claim_pod("research", "trainer-0", NODE25, "trainer-0-gpus-x7k2p", via_template=True),
            resource_claim("research", "trainer-0-gpus-x7k2p", NODE25, ["gpu-0", "gpu-1"], api_version="resource.k8s.io/v1beta1"),
            resource_slice(NODE25, H100, v1beta1=True)]
    cluster, devices = read(tmp_path, _b25_series(claimed=0), objs)
    # WHEN resolved (the pod names its claim only through status.resourceClaimStatuses; reservedFor is empty)
    [h] = DraResolver().resolve(cluster, devices, handled=NONE).holdings
    # THEN the generated claim is found and its 2 GPUs are the pod's
    assert h.pod.name == "trainer-0" and h.share == 2
    assert set(h.devices) == {DeviceId(uuid=H100[0]), DeviceId(uuid=H100[1])}


def test_b25_gpus_missing_from_the_exporter_after_a_claim_are_unmonitored_not_dropped(tmp_path):
    # GIVEN the exporter reports only the 4 claimed GPUs once any GPU is claimed
    cluster, devices = read(tmp_path, _b25_series(report=4), _b25_objects())
    result = DraResolver().resolve(cluster, devices, handled=NONE)
    # WHEN the node's physical GPUs are counted
    count = physical_gpu_count(cluster.nodes[0], 4, known_by_resolvers=result.physical_gpus[NODE25])
    # THEN the slices say 8, DCGM 4: 4 are unmonitored (billed), and said so
    assert (count.gpus, count.expected, count.unmonitored) == (4, 8, 4)
    assert any("4 unmonitored" in n for n in count.notes)


def test_b25_claimed_gpu_the_exporter_does_not_report_is_returned_as_unmonitored(tmp_path):
    # GIVEN trainer-0's claim covers gpu-0..3 but the exporter reports gpu-1..7 only (gpu-0 is broken, B23)
    series = _b25_series()[1:]
    cluster, devices = read(tmp_path, series, _b25_objects())
    result = DraResolver().resolve(cluster, devices, handled=NONE)
    # THEN the claim still holds 4 GPUs and gpu-0 is unmonitored, not dropped
    [h] = result.holdings
    assert h.share == 4 and DeviceId(uuid=H100[0]) in h.devices
    assert result.unmonitored == (DeviceId(uuid=H100[0]),)
    assert "unmonitored" in h.note


def test_b25_claim_shared_by_two_pods_is_split_and_activity_is_not_attributable(tmp_path):
    # GIVEN one claim of 1 GPU reserved for two pods (shared claim)
    objs = [dra_node(NODE25), claim_pod("serve", "a", NODE25, "shared-gpu"), claim_pod("serve", "b", NODE25, "shared-gpu"),
            resource_claim("serve", "shared-gpu", NODE25, ["gpu-5"], consumers=[("a", "uid-serve-a"), ("b", "uid-serve-b")]),
            resource_slice(NODE25, H100)]
    cluster, devices = read(tmp_path, _b25_series(claimed=0), objs)
    holdings = DraResolver().resolve(cluster, devices, handled=NONE).holdings
    # THEN each pod holds half of GPU 5, device-level activity
    assert sorted((h.pod.name, h.share) for h in holdings) == [("a", Decimal("0.5")), ("b", Decimal("0.5"))]
    assert all(h.devices == (DeviceId(uuid=H100[5]),) and not h.per_pod_activity for h in holdings)


def test_b25_mig_device_claim_is_its_slice_fraction(tmp_path):
    # GIVEN a claim of one MIG device (3g.40gb of an H100) from the mig.nvidia.com class
    mig = [("gpu-2-mig-3g40gb-0", "MIG-1b2c3d4e-0000-5555-aaaa-000000000001", H100[2], "3g.40gb")]
    objs = [dra_node(NODE25), claim_pod("research", "tune-0", NODE25, "tune-mig"),
            resource_claim("research", "tune-mig", NODE25, ["gpu-2-mig-3g40gb-0"], device_class="mig.nvidia.com"),
            resource_slice(NODE25, H100, mig=mig), *device_classes()]
    cluster, devices = read(tmp_path, _b25_series(claimed=0), objs)
    [h] = DraResolver().resolve(cluster, devices, handled=NONE).holdings
    # THEN the pod holds 3/7 of a GPU
    assert h.share == Decimal(3) / 7


def test_b25_without_claim_access_the_exporters_dra_labels_still_attribute(tmp_path):
    # GIVEN the scan could not list ResourceClaims (RBAC), but the exporter labels the claimed GPUs with dra_*
    cluster, devices = read(tmp_path, _b25_series(), _b25_objects(with_dra=False))
    assert not cluster.dra_listed
    result = DraResolver().resolve(cluster, devices, handled=NONE)
    # THEN trainer-0 still holds its 4 GPUs, taken from the dra_* labels
    [h] = result.holdings
    assert h.share == 4 and set(h.devices) == {DeviceId(uuid=u) for u in H100[:4]}


def test_b25_without_claim_access_or_labels_the_pod_is_named_with_what_to_grant(tmp_path):
    # GIVEN no DRA objects readable and an exporter without DRA attribution
    cluster, devices = read(tmp_path, _b25_series(claimed=0), _b25_objects(with_dra=False))
    result = DraResolver().resolve(cluster, devices, handled=NONE)
    # THEN no holding is invented and the note says what RBAC to add
    assert result.holdings == ()
    assert any("trainer-0" in n and "deploy/rbac.yaml" in n for n in result.notes)


def test_b25_allocated_claim_without_running_pod_is_noted(tmp_path):
    # GIVEN a claim allocated for a pod that has finished
    objs = _b25_objects()
    objs[1]["status"]["phase"] = "Succeeded"
    cluster, devices = read(tmp_path, _b25_series(claimed=0), objs)
    result = DraResolver().resolve(cluster, devices, handled=NONE)
    # THEN nobody holds the GPUs and the claim is reported
    assert result.holdings == ()
    assert any("trainer-0-gpus-x7k2p" in n and "no running pod" in n for n in result.notes)


# --- B27: HAMi ----------------------------------------------------------------------------------------------
NODE27 = "ip-10-0-7-7.ec2.internal"
A10G = [uuid(0xC8 + i) for i in range(4)]


def _b27(tmp_path, *, annotated: bool = True):
    objs = [hami_node(NODE27)] + [hami_pod("embed", f"embed-k-{i}", NODE27, A10G[0] if annotated else None) for i in range(4)]
    series = [S(GR, {"gpu": str(i), "UUID": u, "modelName": "NVIDIA A10G", "Hostname": NODE27, "pod": "", "namespace": ""}, 0.001)
              for i, u in enumerate(A10G)]
    return read(tmp_path, series, objs)


def test_b27_hami_pods_hold_a_quarter_each_of_the_gpu_in_their_annotation(tmp_path):
    # GIVEN 4 HAMi pods, each gpucores 25 on GPU 0, node capacity 40 nvidia.com/gpu on 4 A10G
    cluster, devices = _b27(tmp_path)
    resolver = HamiResolver()
    assert resolver.applies(cluster, devices)
    result = resolver.resolve(cluster, devices, handled=NONE)
    # THEN each holds 0.25 of GPU 0 (not a whole GPU), device-level activity, and the capacity mismatch is explained
    assert sorted((h.pod.name, h.share) for h in result.holdings) == [(f"embed-k-{i}", Decimal("0.25")) for i in range(4)]
    assert all(h.devices == (DeviceId(uuid=A10G[0]),) and not h.per_pod_activity for h in result.holdings)
    assert result.notes == (f"node {NODE27} advertises 40 nvidia.com/gpu, DCGM sees 4 GPUs: HAMi shares",)
    # AND the money: 4 x 0.25 GPU idle + 3 GPUs unallocated = 4 GPUs at $5.672/h = $136.13/day
    count = physical_gpu_count(cluster.nodes[0], 4, share_reason="HAMi shares")
    assert count.gpus == 4 and count.notes == (f"node {NODE27} advertises 40 nvidia.com/gpu, DCGM sees 4 GPUs: HAMi shares",)
    held = sum(h.share for h in result.holdings)
    total = (held + (count.gpus - held)) * rate("g5.12xlarge") * 24
    assert held == 1 and total.quantize(Decimal("0.01")) == Decimal("136.13")


def test_b27_hami_pod_without_device_annotation_falls_back_to_its_requests(tmp_path):
    # GIVEN the same pods before HAMi wrote the allocation annotation
    cluster, devices = _b27(tmp_path, annotated=False)
    result = HamiResolver().resolve(cluster, devices, handled=NONE)
    # THEN each still holds 0.25 (gpucores 25), with no device named
    assert {h.share for h in result.holdings} == {Decimal("0.25")} and all(h.devices == () for h in result.holdings)


def test_hami_annotation_parser_reads_every_container_and_device():
    # GIVEN an annotation of two containers, the second with two devices
    devs = parse_allocated("GPU-a,NVIDIA,5000,25:;GPU-b,NVIDIA,1000,0:GPU-c,NVIDIA,2000,50:;")
    # THEN three devices with their memory and cores
    assert [(d.uuid, d.mem_mib, d.cores) for d in devs] == [("GPU-a", 5000, 25), ("GPU-b", 1000, 0), ("GPU-c", 2000, 50)]
    assert parse_allocated("garbage;;GPU-x,NVIDIA,notanumber,1:") == []


def test_hami_memory_only_grant_is_its_share_of_the_models_memory(tmp_path):
    # GIVEN a HAMi grant of 12288 MiB with no core limit on an A10G (24 GB)
    objs = [hami_node(NODE27), hami_pod("embed", "mem-only", NODE27, A10G[1], cores=0, mem=12288)]
    series = [S(GR, {"gpu": "1", "UUID": A10G[1], "modelName": "NVIDIA A10G", "Hostname": NODE27}, 0.2)]
    cluster, devices = read(tmp_path, series, objs)
    [h] = HamiResolver().resolve(cluster, devices, handled=NONE).holdings
    # THEN it holds half the GPU
    assert h.share == Decimal("0.5")


# --- B28: KAI / Run:ai --------------------------------------------------------------------------------------
NODE28 = "ip-10-0-3-3.ec2.internal"
A10G28 = [uuid(0x12C + i) for i in range(4)]


def _b28(tmp_path, notebooks=("notebook-0", "notebook-1")):
    res = kai_reservation(NODE28, A10G28[0], "grp-1")
    objs = [node(NODE28, itype="g5.12xlarge", gpus=4), res] + [kai_pod("ml", n, NODE28, "grp-1") for n in notebooks]
    series = [S(GR, {"gpu": "0", "UUID": A10G28[0], "modelName": "NVIDIA A10G", "Hostname": NODE28, "namespace": "runai-reservation",
                     "pod": res["metadata"]["name"], "container": "runai-reservation"}, 0.001)]
    series += [S(GR, {"gpu": str(i), "UUID": u, "modelName": "NVIDIA A10G", "Hostname": NODE28}, 0.001) for i, u in enumerate(A10G28) if i]
    return (*read(tmp_path, series, objs), res["metadata"]["name"])


def test_b28_kai_fractions_charge_the_notebooks_never_the_reservation_pod(tmp_path):
    # GIVEN GPU 0 reserved by a runai-reservation pod for two notebooks at gpu-fraction 0.5 each (group grp-1)
    cluster, devices, reservation = _b28(tmp_path)
    resolver = KaiResolver()
    assert resolver.applies(cluster, devices)
    result = resolver.resolve(cluster, devices, handled=NONE)
    # THEN the notebooks (team ml) hold 0.5 each of GPU 0; the reservation pod is infrastructure and holds nothing
    assert sorted((h.pod.namespace, h.pod.name, h.share) for h in result.holdings) == [
        ("ml", "notebook-0", Decimal("0.5")), ("ml", "notebook-1", Decimal("0.5"))]
    assert all(h.devices == (DeviceId(uuid=A10G28[0]),) and not h.per_pod_activity for h in result.holdings)
    assert result.infrastructure_pods == {("runai-reservation", reservation)}
    assert ("runai-reservation", reservation) in {k[:2] for k in result.handled_pods}
    assert all(h.pod.namespace != "runai-reservation" for h in result.holdings)


def test_b28_reservation_without_users_is_noted_and_charges_nobody(tmp_path):
    # GIVEN the reservation pod alone (the notebooks ended)
    cluster, devices, reservation = _b28(tmp_path, notebooks=())
    result = KaiResolver().resolve(cluster, devices, handled=NONE)
    # THEN no holding, the reservation pod is still infrastructure, and the empty reservation is reported
    assert result.holdings == () and result.infrastructure_pods == {("runai-reservation", reservation)}
    assert any(reservation in n and "no running pod" in n for n in result.notes)


def test_kai_gpu_memory_request_is_its_share_of_the_models_memory(tmp_path):
    # GIVEN a fractional pod asking gpu-memory 6144 MiB on an A10G (24 GB)
    res = kai_reservation(NODE28, A10G28[2], "grp-9")
    objs = [node(NODE28, itype="g5.12xlarge", gpus=4), res, kai_pod("ml", "small", NODE28, "grp-9", fraction=None, memory="6144")]
    series = [S(GR, {"gpu": "2", "UUID": A10G28[2], "modelName": "NVIDIA A10G", "Hostname": NODE28}, 0.3)]
    cluster, devices = read(tmp_path, series, objs)
    [h] = KaiResolver().resolve(cluster, devices, handled=NONE).holdings
    assert h.share == Decimal("0.25") and h.devices == (DeviceId(uuid=A10G28[2]),)


# --- vGPU guests --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "fraction"), [
    ("GRID A100-40C", Decimal(1)), ("NVIDIA H100-20C", Decimal("0.25")), ("GRID A100-20C", Decimal("0.5")),
    ("NVIDIA-A100D-40C", Decimal("0.5")), ("A100-3-20C", Decimal(3) / 7), ("NVIDIA L40S-24Q", Decimal("0.5")),
])
def test_vgpu_type_names_are_fractions_of_a_physical_gpu(name, fraction):
    found = vgpu_fraction(name)
    assert found is not None and found[0] == fraction


@pytest.mark.parametrize("name", ["NVIDIA A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3", "nvidia-h100-80gb", "Tesla T4", "NVIDIA-A10G", "NVIDIA L4", None])
def test_physical_gpu_names_are_not_vgpu_types(name):
    assert vgpu_fraction(name) is None


def test_vgpu_guest_pod_is_charged_its_fraction_not_a_whole_gpu(tmp_path):
    # GIVEN a vSphere VM node whose GPU is "GRID H100-20C" and a pod requesting nvidia.com/gpu 1
    objs = [node("vks-worker-1", itype=None, gpus=1, labels={"nvidia.com/gpu.product": "GRID-H100-20C"}), pod("cv", "infer-0", "vks-worker-1")]
    series = [S(GR, {"gpu": "0", "UUID": uuid(0x300), "modelName": "GRID H100-20C", "Hostname": "vks-worker-1", "namespace": "cv", "pod": "infer-0"}, 0.0)]
    cluster, devices = read(tmp_path, series, objs)
    resolver = VgpuResolver()
    assert resolver.applies(cluster, devices)
    result = resolver.resolve(cluster, devices, handled=NONE)
    [h] = result.holdings
    assert (h.pod.name, h.share, h.mechanism) == ("infer-0", Decimal("0.25"), "vGPU")
    assert any("vks-worker-1" in n for n in result.notes)


# --- selection and the header -------------------------------------------------------------------------------
def test_resolvers_do_not_apply_to_a_plain_device_plugin_cluster(tmp_path):
    cluster, devices = read(tmp_path, [S(GR, {"gpu": "0", "UUID": uuid(1), "modelName": "NVIDIA A10G", "Hostname": "n1",
                                              "namespace": "a", "pod": "p"}, 0.5)],
                            [node("n1", itype="g5.xlarge"), pod("a", "p", "n1")])
    assert not any(r.applies(cluster, devices) for r in (DraResolver(), HamiResolver(), KaiResolver(), VgpuResolver()))


def test_header_names_each_mechanism_with_gpus_or_shares(tmp_path):
    cluster, devices = _b27(tmp_path)
    resolved = resolve(cluster, devices)
    assert mix_text(resolved.mix) == "HAMi 1 GPU (4 pods)"


def test_b25_claim_pod_that_finished_mid_window_held_its_gpus_until_it_ended(tmp_path):
    # GIVEN trainer-0 Succeeded 20 minutes before the evaluation time, its claim still allocated
    objs = _b25_objects()
    objs[1]["status"] = {"phase": "Succeeded", "startTime": "2024-01-01T00:00:00Z",
                         "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": "2024-01-01T01:40:00Z"}}}]}
    cluster, devices = read(tmp_path, _b25_series(claimed=0), objs)
    # WHEN resolved
    [h] = DraResolver().resolve(cluster, devices, handled=NONE).holdings
    # THEN it held the 4 GPUs from the claim's allocation until it ended, not after
    assert h.share == 4 and h.held_until is not None and h.held_until.isoformat() == "2024-01-01T01:40:00+00:00"
    assert h.held_from is not None and h.held_from.isoformat() == "2024-01-01T00:00:00+00:00"
