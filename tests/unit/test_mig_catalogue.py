"""MIG from the GPU catalogue (field guide B31): slices per model, profile variants, single and mixed strategies."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuwaste.allocation.physical import physical_gpu_count
from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import Node, gpu_share_for_request, mig_total_slices
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.gpu_models import GpuModelCatalog, mig_total_slices_of, parse_mig_profile, split_gfd_product
from gpuwaste.models.telemetry import Signal
from tests.fixtures.field_guide.builders import S, node, pod, scan

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
RTX_GFD = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


@pytest.mark.parametrize(("model", "slices"), [
    (RTX, 4), (RTX_GFD, 4), ("nvidia-rtx-pro-6000", 4), ("NVIDIA A30", 4), ("NVIDIA B200", 7), ("NVIDIA GB200", 7),
    ("NVIDIA H200", 7), ("NVIDIA H100 NVL", 7), ("NVIDIA A100-SXM4-40GB", 7), ("NVIDIA A100 80GB PCIe", 7),
    (f"{RTX_GFD}-MIG-1g.24gb+gfx", 4), ("NVIDIA-A30-MIG-1g.6gb", 4), ("NVIDIA L4", None), ("Unknown GPU", None),
])
def test_slices_per_gpu_come_from_the_catalogue(model, slices):
    assert mig_total_slices_of(model) == slices


@pytest.mark.parametrize(("text", "slices", "variant", "media"), [
    ("1g.24gb+gfx", 1, "+gfx", False), ("1g.24gb+me.all", 1, "+me.all", True), ("1g.24gb-me", 1, "-me", False),
    ("1g.24gb+me", 1, "+me", True), ("nvidia.com/mig-2g.48gb", 2, "", False), ("4g.96gb", 4, "", False),
])
def test_profile_names_parse_with_any_suffix(text, slices, variant, media):
    p = parse_mig_profile(text, total_slices=4)
    assert (p.compute_slices, p.variant, p.media_extensions, p.fraction) == (slices, variant, media, Decimal(slices) / 4)


def test_a_profile_larger_than_the_gpu_is_refused():
    with pytest.raises(InputFormatError):
        parse_mig_profile("7g.96gb", total_slices=4)


def test_gfd_mig_single_product_with_a_variant_splits():
    p = split_gfd_product(f"{RTX_GFD}-MIG-1g.24gb+gfx")
    assert (p.model_name, p.mig_profile) == (RTX_GFD, "1g.24gb+gfx")


def test_every_catalogue_mig_table_fits_its_slice_count():
    # every listed profile parses with its model's slice count (the catalogue validates on load) and the
    # models the issue names are present with a MIG table
    cat = GpuModelCatalog.bundled()
    for key in ("RTX-PRO-6000-BLACKWELL-SERVER", "B200", "GB200", "H200-SXM", "H100-NVL", "A30", "A100-SXM4-40GB", "A100-SXM4-80GB"):
        spec = cat.get(key)
        assert spec.mig_profiles and spec.mig_total_slices
        assert all(p.compute_slices <= spec.mig_total_slices for p in spec.mig_profiles)
    assert cat.get("RTX-PRO-6000-BLACKWELL-SERVER").mig_total_slices == 4


def test_mixed_strategy_units_are_quarters_on_rtx_pro_6000_and_sevenths_on_b200():
    rtx = Node(name="n", gpu_product=RTX_GFD)
    b200 = Node(name="m", gpu_product="NVIDIA-B200")
    assert gpu_share_for_request("nvidia.com/mig-1g.24gb", 1, rtx) == Decimal("0.25")
    assert gpu_share_for_request("nvidia.com/mig-1g.24gb+gfx", 2, rtx) == Decimal("0.5")
    assert gpu_share_for_request("nvidia.com/mig-2g.48gb", 1, rtx) == Decimal("0.5")
    assert gpu_share_for_request("nvidia.com/mig-1g.23gb", 1, b200) == Decimal(1) / 7
    # the DCGM model name wins over a node without GFD labels
    assert gpu_share_for_request("nvidia.com/mig-1g.24gb", 1, Node(name="x"), model_name=RTX) == Decimal("0.25")
    assert mig_total_slices(None) == 7


def test_single_strategy_unit_uses_the_catalogue_slice_count():
    single = Node(name="n", gpu_product=f"{RTX_GFD}-MIG-1g.24gb-me", mig_strategy="single")
    assert gpu_share_for_request("nvidia.com/gpu", 1, single) == Decimal("0.25")


def test_single_strategy_physical_count_comes_from_mig_config_not_gpu_count():
    # GIVEN an RTX PRO 6000 node in MIG single mode: gpu.count 8 counts 1g slices of 2 GPUs (B08), no DCGM yet
    n = Node(name="n", gpu_product=f"{RTX_GFD}-MIG-1g.24gb", mig_strategy="single", gpu_count_label=8,
             labels={"nvidia.com/mig.config": "all-1g.24gb"}, capacity_gpu={"nvidia.com/gpu": 8})
    count = physical_gpu_count(n, 0)
    # THEN 2 physical GPUs, and MIG devices in capacity are not a disagreement
    assert (count.gpus, count.basis, count.notes) == (2, "gfd-mig-config", ())


def test_physical_count_falls_back_to_the_instance_type_then_unknown():
    assert physical_gpu_count(Node(name="n", instance_type="p5en.48xlarge"), 0).gpus == 8
    assert physical_gpu_count(Node(name="n", instance_type="on-prem-box"), 0).basis == "unknown"


GR = Signal.GR_ENGINE_ACTIVE.value


def test_b31_blackwell_mig_slices_idle_quarter_quarter_half_nothing_unallocated(tmp_path):
    # GIVEN the B31 input: RTX PRO 6000 split 1g.24gb+gfx, 1g.24gb, 2g.48gb (all 4 slices), each idle, mixed strategy
    uuid = "GPU-00000258-7e1c-4b2a-9f0d-000000000258"
    host = "gke-g4-pool-1"
    base = {"gpu": "0", "UUID": uuid, "modelName": RTX, "Hostname": host, "namespace": "viz"}
    series = [S(GR, base | {"GPU_I_PROFILE": prof, "GPU_I_ID": gi, "pod": p, "container": "r"}, 0.001)
              for prof, gi, p in (("1g.24gb+gfx", "1", "render-1"), ("1g.24gb", "2", "render-2"), ("2g.48gb", "3", "render-3"))]
    n = node(host, itype="g4-standard-48", gpus=None, labels={"nvidia.com/gpu.product": RTX_GFD, "nvidia.com/mig.strategy": "mixed",
                                                             "nvidia.com/gpu.count": "1"})
    n["status"] = {"capacity": {"nvidia.com/mig-1g.24gb": "2", "nvidia.com/mig-2g.48gb": "1"},
                   "allocatable": {"nvidia.com/mig-1g.24gb": "2", "nvidia.com/mig-2g.48gb": "1"}}
    objs = [n, pod("viz", "render-1", host, resource="nvidia.com/mig-1g.24gb"), pod("viz", "render-2", host, resource="nvidia.com/mig-1g.24gb"),
            pod("viz", "render-3", host, resource="nvidia.com/mig-2g.48gb")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs, priced=False)
    # THEN 0.25 + 0.25 + 0.5 GPU idle, nothing unallocated
    idle = {f.subject.pod: f.subject.gpu_share for f in sc.of_kind(WasteKind.IDLE)}
    assert idle == {"render-1": Decimal("0.25"), "render-2": Decimal("0.25"), "render-3": Decimal("0.5")}
    assert not sc.of_kind(WasteKind.UNALLOCATED)


# --- prices for the new hardware (issue 11 §6) --------------------------------------------------------------
def test_new_hardware_with_a_cited_price_is_priced_per_gpu():
    from gpuwaste.pricing.catalog import PriceBook  # noqa: PLC0415

    book = PriceBook.bundled()
    for itype, per_gpu in (("p5en.48xlarge", "7.912"), ("p6-b200.48xlarge", "14.2416"), ("g6e.12xlarge", "2.62316"), ("g6e.24xlarge", "3.7663975")):
        rate = book.gpu_hour_rate(instance_type=itype, capacity_type="on-demand", gpu_model=None, physical_gpus=None)
        assert rate.usd_per_gpu_hour == Decimal(per_gpu), itype
        assert rate.source and rate.effective_date


@pytest.mark.parametrize(("itype", "model"), [("g7e.12xlarge", RTX), ("a4-highgpu-8g", "NVIDIA B200"),
                                             ("Standard_ND96isr_H200_v5", "NVIDIA H200"), ("p6e-gb200.36xlarge", "NVIDIA GB200")])
def test_new_hardware_without_a_cited_price_is_unpriced_naming_the_setting(itype, model):
    from gpuwaste.pricing.catalog import PriceBook  # noqa: PLC0415
    from gpuwaste.pricing.prices import Unpriced  # noqa: PLC0415

    result = PriceBook.bundled().gpu_hour_rate(instance_type=itype, capacity_type="on-demand", gpu_model=model, physical_gpus=8)
    assert isinstance(result, Unpriced)
    assert "pricing.instance_types" in result.reason and GpuModelCatalog.bundled().resolve(model).key in result.reason


def test_b31_without_gfd_labels_the_slice_count_comes_from_the_dcgm_model(tmp_path):
    # GIVEN the B31 slices on a node without GFD labels (e.g. cluster state from kube-state-metrics without allow-lists)
    uuid = "GPU-00000259-7e1c-4b2a-9f0d-000000000259"
    host = "worker-rtx-1"
    base = {"gpu": "0", "UUID": uuid, "modelName": RTX, "Hostname": host, "namespace": "viz", "container": "r"}
    series = [S(GR, base | {"GPU_I_PROFILE": "1g.24gb+gfx", "GPU_I_ID": "1", "pod": "render-1"}, 0.001)]
    n = node(host, itype=None, gpus=None)
    n["status"] = {"capacity": {"nvidia.com/mig-1g.24gb": "4"}, "allocatable": {"nvidia.com/mig-1g.24gb": "4"}}
    sc = scan(tmp_path, series, [n, pod("viz", "render-1", host, resource="nvidia.com/mig-1g.24gb")], priced=False)
    # THEN the slice is a quarter of the RTX PRO 6000 (4 slices), not a seventh
    assert [(f.subject.pod, f.subject.gpu_share) for f in sc.of_kind(WasteKind.IDLE)] == [("render-1", Decimal("0.25"))]
