"""Unit tests: GPU model catalog, MIG profile parsing and the bundled price book."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from importlib import resources

import pytest
import yaml
from pydantic import ValidationError

from gpuwaste.errors import InputFormatError
from gpuwaste.pricing import (
    GpuHourRate,
    GpuModelCatalog,
    PriceBook,
    PriceOverrides,
    Unpriced,
    normalise_model_name,
    parse_mig_profile,
)

ONE_SEVENTH = Decimal(1) / Decimal(7)


@pytest.fixture
def catalog() -> GpuModelCatalog:
    return GpuModelCatalog.bundled()


@pytest.fixture
def book() -> PriceBook:
    return PriceBook.bundled()


def _rate(result: GpuHourRate | Unpriced) -> GpuHourRate:
    assert isinstance(result, GpuHourRate), result
    return result


# -- model names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        # DCGM modelName (formats.md §a.2/§a.5, field guide B05/B06/B07/B21)
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("Tesla V100-PCIE-32GB", "V100-PCIE-32GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"),
        # GFD nvidia.com/gpu.product (formats.md §c)
        ("Tesla-T4", "T4"),
        ("NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-SXM-80GB"),
        ("NVIDIA-H100-NVL", "H100-NVL"),
        # GKE cloud.google.com/gke-accelerator (KSM test fixture, autoscaler GCE table)
        ("nvidia-tesla-t4", "T4"),
        ("nvidia-l4", "L4"),
        ("nvidia-tesla-a100", "A100-SXM4-40GB"),
        ("nvidia-tesla-v100", "V100-SXM2"),
        # lower-cased pipeline spelling and dcgm-exporter replaceBlanksInModelName
        ("nvidia a100 80gb pcie", "A100-PCIE-80GB"),
        ("NVIDIA-A100-80GB-PCIe", "A100-PCIE-80GB"),
        # canonical key itself
        ("H200-SXM", "H200-SXM"),
    ],
)
def test_catalog_resolve_maps_real_spellings_to_canonical_model(
    catalog: GpuModelCatalog, spelling: str, key: str
) -> None:
    # GIVEN a model spelling seen in DCGM, GFD or GKE labels
    # WHEN it is resolved against the bundled catalog
    spec = catalog.resolve(spelling)
    # THEN it names the canonical model
    assert spec is not None
    assert spec.key == key


@pytest.mark.parametrize("spelling", [None, "", "   ", "NVIDIA Quadro Imaginary 9000"])
def test_catalog_resolve_returns_none_for_unknown_or_empty(catalog: GpuModelCatalog, spelling: str | None) -> None:
    # GIVEN an empty or unknown model name
    # WHEN it is resolved
    # THEN nothing is guessed
    assert catalog.resolve(spelling) is None


def test_normalise_model_name_unifies_case_separators_and_vendor_prefix() -> None:
    # GIVEN three spellings of one GPU
    spellings = ["NVIDIA-A100-SXM4-40GB", "nvidia a100_sxm4 40gb", "A100-SXM4-40GB"]
    # WHEN they are normalised
    normalised = {normalise_model_name(s) for s in spellings}
    # THEN they compare equal
    assert normalised == {"a100 sxm4 40gb"}


@pytest.mark.parametrize(
    ("product", "key", "slices", "shared"),
    [
        ("NVIDIA-H100-NVL-MIG-1g.12gb", "H100-NVL", 1, False),  # dcgm-exporter#397, field guide B08
        ("A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB", 1, False),  # GFD doc
        ("A100-SXM4-40GB-MIG-1g.5gb-SHARED", "A100-SXM4-40GB", 1, True),  # GFD README
        ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "A100-SXM4-80GB", 3, False),
        ("Tesla-T4-SHARED", "T4", None, True),
    ],
)
def test_catalog_resolve_product_strips_mig_and_shared_suffix(
    catalog: GpuModelCatalog, product: str, key: str, slices: int | None, shared: bool
) -> None:
    # GIVEN a GFD gpu.product label from a MIG-single or time-sliced node
    # WHEN it is resolved
    resolved = catalog.resolve_product(product)
    # THEN the parent model, the MIG profile and the SHARED flag come back
    assert resolved is not None
    assert resolved.model.key == key
    assert resolved.shared is shared
    if slices is None:
        assert resolved.mig_profile is None
    else:
        assert resolved.mig_profile is not None
        assert resolved.mig_profile.compute_slices == slices
    assert catalog.resolve(product) == resolved.model


def test_catalog_resolve_product_h100_nvl_mig_single_is_one_seventh(catalog: GpuModelCatalog) -> None:
    # GIVEN the B08 node label nvidia.com/gpu.product=NVIDIA-H100-NVL-MIG-1g.12gb
    # WHEN it is resolved
    resolved = catalog.resolve_product("NVIDIA-H100-NVL-MIG-1g.12gb")
    # THEN one unit is 1/7 of an H100 NVL
    assert resolved is not None and resolved.mig_profile is not None
    assert resolved.model.key == "H100-NVL"
    assert resolved.mig_profile.fraction == ONE_SEVENTH


@pytest.mark.parametrize(
    ("key", "watts"),
    [("H100-SXM-80GB", 700), ("L4", 72), ("T4", 70), ("A10G", 300), ("H100-PCIE-80GB", 350), ("B200", None)],
)
def test_catalog_power_limit_comes_from_reference(catalog: GpuModelCatalog, key: str, watts: int | None) -> None:
    # GIVEN the bundled catalog
    # WHEN a model's board power limit is read
    spec = catalog.get(key)
    # THEN it is the formats.md §e.4 figure (None where §e.4 has none) and carries its source
    assert spec.power_limit_w == watts
    assert spec.power_source


def test_catalog_mig_profiles_use_device_plugin_names(catalog: GpuModelCatalog) -> None:
    # GIVEN the bundled catalog
    # WHEN the MIG profiles of A100 40GB, A100 80GB and H100 NVL are listed
    names = {
        key: [p.name for p in catalog.get(key).mig_profiles] for key in ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-NVL")
    }
    # THEN they are spelled as the device plugin advertises them
    assert {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"} <= set(names["A100-SXM4-40GB"])
    assert {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"} <= set(names["A100-SXM4-80GB"])
    assert "1g.12gb" in names["H100-NVL"]
    assert catalog.get("A100-SXM4-40GB").mig_total_slices == 7


def test_gpu_model_spec_mig_profile_uses_a30_four_slices(catalog: GpuModelCatalog) -> None:
    # GIVEN an A30, which has 4 compute slices (field guide B06 input)
    a30 = catalog.get("A30")
    # WHEN its 1g.6gb profile is parsed through the model
    profile = a30.mig_profile("1g.6gb")
    # THEN one slice is a quarter of the GPU, not a seventh
    assert profile.fraction == Decimal("0.25")


# -- MIG profiles -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "slices", "memory_gb"),
    [
        ("1g.5gb", 1, 5),
        ("3g.40gb", 3, 40),
        ("1g.11gb", 1, 11),
        ("nvidia.com/mig-1g.12gb", 1, 12),
        ("mig-2g.10gb", 2, 10),
        ("1g.10gb+me", 1, 10),
        ("7g.80gb", 7, 80),
        ("MIG 3g.20gb", 3, 20),
    ],
)
def test_parse_mig_profile_accepts_every_spelling(text: str, slices: int, memory_gb: int) -> None:
    # GIVEN a MIG profile in a DCGM, device-plugin or resource-name spelling
    # WHEN it is parsed
    profile = parse_mig_profile(text)
    # THEN the slice count, memory figure and fraction come from the text
    assert profile.compute_slices == slices
    assert profile.memory_gb == memory_gb
    assert profile.fraction == Decimal(slices) / Decimal(7)


def test_parse_mig_profile_dcgm_and_device_plugin_spellings_agree() -> None:
    # GIVEN the DCGM spelling and the device-plugin spelling of one H100 NVL profile (field guide B07)
    # WHEN both are parsed
    dcgm = parse_mig_profile("1g.11gb")
    plugin = parse_mig_profile("nvidia.com/mig-1g.12gb")
    # THEN they give the same compute fraction, 1/7
    assert dcgm.fraction == plugin.fraction == ONE_SEVENTH


@pytest.mark.parametrize("text", ["", "gpu", "g.5gb", "0g.5gb", "8g.80gb", "1g.0gb", "1g.5", "1x.5gb"])
def test_parse_mig_profile_rejects_garbage(text: str) -> None:
    # GIVEN text that is not a MIG profile
    # WHEN it is parsed
    # THEN an InputFormatError is raised
    with pytest.raises(InputFormatError):
        parse_mig_profile(text)


# -- price book data --------------------------------------------------------------------------------


def test_prices_yaml_every_row_carries_source_and_effective_date() -> None:
    # GIVEN the raw bundled prices.yaml
    raw = yaml.safe_load(resources.files("gpuwaste.pricing").joinpath("data/prices.yaml").read_text("utf-8"))
    # WHEN every row is inspected
    rows = raw["prices"]
    # THEN each has a non-empty source, a date, an exact string price and a catalog model
    assert len(rows) >= 40
    catalog = GpuModelCatalog.bundled()
    for row in rows:
        assert isinstance(row["source"], str) and row["source"].strip(), row
        assert isinstance(row["effective_date"], date), row
        assert isinstance(row["usd_per_hour"], str), row
        assert catalog.resolve(row["gpu_model"]) is not None, row


@pytest.mark.parametrize(
    "instance_type",
    [
        "p5.48xlarge", "p5.4xlarge", "p5en.48xlarge", "p4d.24xlarge", "p4de.24xlarge", "p6-b200.48xlarge",
        "p3.2xlarge", "p3.16xlarge", "g5.xlarge", "g5.2xlarge", "g5.12xlarge", "g5.48xlarge", "g6.xlarge",
        "g6.12xlarge", "g6.48xlarge", "g6e.xlarge", "g6e.12xlarge", "g6e.48xlarge", "g4dn.xlarge",
        "g4dn.12xlarge", "g4dn.metal", "a2-highgpu-1g", "a2-highgpu-8g", "a2-megagpu-16g", "a2-ultragpu-1g",
        "a2-ultragpu-8g", "g2-standard-4", "g2-standard-8", "g2-standard-96", "Standard_ND96isr_H100_v5",
        "Standard_ND96amsr_A100_v4", "Standard_ND96asr_v4", "Standard_NC40ads_H100_v5",
        "Standard_NC80adis_H100_v5", "Standard_NC24ads_A100_v4", "Standard_NC4as_T4_v3",
        "Standard_NC64as_T4_v3", "Standard_NC6s_v3", "Standard_NV36ads_A10_v5",
    ],
)  # fmt: skip
def test_price_book_covers_every_reference_instance(book: PriceBook, instance_type: str) -> None:
    # GIVEN an instance type listed in formats.md §e.1-e.3
    # WHEN it is priced on demand
    result = book.gpu_hour_rate(
        instance_type=instance_type, capacity_type="on-demand", gpu_model=None, physical_gpus=None
    )
    # THEN the bundled book has a price for it
    assert isinstance(result, GpuHourRate)


def test_price_book_azure_nd_h100_uses_eight_gpus(book: PriceBook) -> None:
    # GIVEN the ND H100 v5 row whose catalog source wrongly says 12 GPUs
    # WHEN it is priced
    rate = _rate(
        book.gpu_hour_rate(
            instance_type="Standard_ND96isr_H100_v5", capacity_type="on-demand", gpu_model=None, physical_gpus=8
        )
    )
    # THEN the split uses the VM's real 8 GPUs
    assert rate.gpus_per_instance == 8
    assert rate.usd_per_gpu_hour == Decimal("98.32") / 8
    assert rate.warnings == ()


@pytest.mark.parametrize(("physical", "words"), [(1, "DCGM sees 1 physical GPU on"), (2, "DCGM sees 2 physical GPUs on")])
def test_gpu_count_warning_counts_gpus_in_plain_english(book: PriceBook, physical: int, words: str) -> None:
    # GIVEN a p4d.24xlarge (8 GPUs in the price book) on which DCGM sees fewer physical GPUs
    # WHEN one GPU-hour is priced
    rate = _rate(book.gpu_hour_rate(instance_type="p4d.24xlarge", capacity_type="on-demand", gpu_model=None,
                                    physical_gpus=physical))
    # THEN the warning says "1 physical GPU" / "2 physical GPUs", and the price book's 8
    (warning,) = [w for w in rate.warnings if "DCGM sees" in w]
    assert warning.startswith(words) and "price book says 8" in warning


# -- price lookups ----------------------------------------------------------------------------------


def test_gpu_hour_rate_p4d_is_exact_decimal_split(book: PriceBook) -> None:
    # GIVEN an on-demand p4d.24xlarge whose DCGM shows 8 A100 40GB
    # WHEN one GPU-hour is priced
    rate = _rate(
        book.gpu_hour_rate(
            instance_type="p4d.24xlarge", capacity_type="on-demand", gpu_model="NVIDIA A100-SXM4-40GB", physical_gpus=8
        )
    )
    # THEN it is the published instance price divided by 8, exactly, with its provenance
    assert rate.usd_per_gpu_hour == Decimal("21.957642") / 8 == Decimal("2.74470525")
    assert rate.instance_usd_per_hour == Decimal("21.957642")
    assert rate.gpus_per_instance == 8
    assert rate.effective_date == date(2026, 7, 20)
    assert rate.capacity_type_used == "on-demand"
    assert rate.method == "price_book_instance"
    assert rate.warnings == ()
    assert rate.basis == (
        "p4d.24xlarge on-demand $21.957642/h ÷ 8 GPUs = $2.7447/GPU-h "
        "(aws us-east-1, karpenter-provider-aws zz_generated.pricing_aws.go, 2026-07-20)"
    )


def test_gpu_hour_rate_spot_without_spot_price_falls_back_with_warning(book: PriceBook) -> None:
    # GIVEN a spot g5.xlarge (the book has only on-demand rows for AWS) and no spot discount configured
    # WHEN it is priced
    rate = _rate(
        book.gpu_hour_rate(instance_type="g5.xlarge", capacity_type="spot", gpu_model="NVIDIA A10G", physical_gpus=1)
    )
    # THEN it is priced at on-demand and says so
    assert rate.usd_per_gpu_hour == Decimal("1.006")
    assert rate.capacity_type_used == "on-demand"
    assert (
        "spot node priced at on-demand: no spot price known; set pricing.spot_discount to estimate it" in rate.warnings
    )


def test_gpu_hour_rate_spot_discount_applies_to_on_demand(book: PriceBook) -> None:
    # GIVEN a rate card with a 70 % spot discount
    priced = book.with_overrides(PriceOverrides(spot_discount=Decimal("0.7")))
    # WHEN a spot p4d.24xlarge is priced
    rate = _rate(
        priced.gpu_hour_rate(instance_type="p4d.24xlarge", capacity_type="SPOT", gpu_model=None, physical_gpus=8)
    )
    # THEN the on-demand price is discounted and no fallback warning is given
    assert rate.usd_per_gpu_hour == Decimal("21.957642") * Decimal("0.3") / 8
    assert rate.capacity_type_used == "spot"
    assert rate.warnings == ()


def test_gpu_hour_rate_gcp_preemptible_t4_uses_spot_row(book: PriceBook) -> None:
    # GIVEN a GKE preemptible N1 node with an attached T4
    # WHEN it is priced through its accelerator label
    rate = _rate(
        book.gpu_hour_rate(
            instance_type="n1-standard-8",
            capacity_type="preemptible",
            gpu_model="Tesla T4",
            physical_gpus=1,
            accelerator="nvidia-tesla-t4",
        )
    )
    # THEN the preemptible T4 price from the autoscaler table applies
    assert rate.usd_per_gpu_hour == Decimal("0.11")
    assert rate.capacity_type_used == "spot"
    assert rate.method == "price_book_accelerator"
    assert rate.warnings == ()


def test_gpu_hour_rate_override_beats_bundled_price(book: PriceBook) -> None:
    # GIVEN a dated rate card for p5.48xlarge and a per-model rate for H100
    overrides = PriceOverrides.model_validate(
        {
            "instance_types": {"p5.48xlarge": {"usd_per_hour": "40.00", "effective_date": "2026-09-01"}},
            "usd_per_gpu_hour_by_model": {"H100-SXM-80GB": "1.00"},
        }
    )
    priced = book.with_overrides(overrides)
    # WHEN a p5.48xlarge is priced
    rate = _rate(
        priced.gpu_hour_rate(
            instance_type="p5.48xlarge", capacity_type="on-demand", gpu_model="NVIDIA H100 80GB HBM3", physical_gpus=8
        )
    )
    # THEN the instance override wins, split by the book's GPU count
    assert rate.usd_per_gpu_hour == Decimal(5)
    assert rate.method == "rate_card_instance"
    assert rate.source == "user rate card"
    assert rate.effective_date == date(2026, 9, 1)


def test_gpu_hour_rate_model_rate_card_prices_bare_metal(book: PriceBook) -> None:
    # GIVEN an on-prem rate card keyed by an alias
    priced = book.with_overrides(PriceOverrides(usd_per_gpu_hour_by_model={"NVIDIA A100 80GB PCIe": Decimal("1.25")}))
    # WHEN a node with no instance type and that GPU is priced
    rate = _rate(
        priced.gpu_hour_rate(instance_type=None, capacity_type=None, gpu_model="nvidia a100 80gb pcie", physical_gpus=4)
    )
    # THEN the per-model rate applies
    assert rate.usd_per_gpu_hour == Decimal("1.25")
    assert rate.method == "rate_card_model"
    assert rate.gpus_per_instance is None


def test_gpu_hour_rate_default_rate_is_last_resort(book: PriceBook) -> None:
    # GIVEN only a default rate
    priced = book.with_overrides(PriceOverrides(default_usd_per_gpu_hour=Decimal(2)))
    # WHEN an unknown instance is priced
    rate = _rate(
        priced.gpu_hour_rate(instance_type="x1.foo", capacity_type="on-demand", gpu_model=None, physical_gpus=1)
    )
    # THEN the default applies, with a warning
    assert rate.usd_per_gpu_hour == Decimal(2)
    assert rate.method == "default_rate"
    assert rate.warnings


def test_gpu_hour_rate_unknown_instance_is_unpriced_with_reason(book: PriceBook) -> None:
    # GIVEN no rate card
    # WHEN an instance type missing from the book is priced
    result = book.gpu_hour_rate(
        instance_type="x1.foo", capacity_type="on-demand", gpu_model="NVIDIA L4", physical_gpus=1
    )
    # THEN it stays unpriced and the reason says what to configure
    assert isinstance(result, Unpriced)
    assert "instance type 'x1.foo' is not in the price book" in result.reason
    assert "pricing.instance_types" in result.reason
    assert "pricing.usd_per_gpu_hour_by_model" in result.reason


def test_gpu_hour_rate_physical_gpu_mismatch_keeps_book_count(book: PriceBook) -> None:
    # GIVEN a p4d.24xlarge where DCGM sees only 7 GPUs (one fell off the bus)
    # WHEN it is priced
    rate = _rate(
        book.gpu_hour_rate(instance_type="p4d.24xlarge", capacity_type="on-demand", gpu_model=None, physical_gpus=7)
    )
    # THEN the book's 8 is used and the mismatch is reported
    assert rate.gpus_per_instance == 8
    assert any("DCGM sees 7" in w for w in rate.warnings)


def test_gpu_hour_rate_azure_size_matches_case_insensitively(book: PriceBook) -> None:
    # GIVEN an Azure node label spelled in lower case
    # WHEN it is priced
    rate = _rate(
        book.gpu_hour_rate(
            instance_type="standard_nc80adis_h100_v5",
            capacity_type="regular",
            gpu_model="NVIDIA-H100-NVL-MIG-1g.12gb",
            physical_gpus=2,
        )
    )
    # THEN the Standard_NC80adis_H100_v5 row applies: 13.96 / 2 per H100 NVL
    assert rate.usd_per_gpu_hour == Decimal("6.98")
    assert rate.warnings == ()


def test_gpu_hour_rate_aws_instance_match_is_case_sensitive(book: PriceBook) -> None:
    # GIVEN an AWS instance type in the wrong case
    # WHEN it is priced
    result = book.gpu_hour_rate(
        instance_type="P4D.24XLARGE", capacity_type="on-demand", gpu_model=None, physical_gpus=8
    )
    # THEN it is not matched
    assert isinstance(result, Unpriced)


def test_gpu_hour_rate_region_picks_regional_row(book: PriceBook) -> None:
    # GIVEN ND H100 v5 priced in eastus and westus
    # WHEN a westus node is priced
    rate = _rate(
        book.gpu_hour_rate(
            instance_type="Standard_ND96isr_H100_v5",
            capacity_type="on-demand",
            gpu_model=None,
            physical_gpus=8,
            region="westus",
        )
    )
    # THEN the westus price applies
    assert rate.instance_usd_per_hour == Decimal("127.816")


# -- overrides validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        (
            {"instance_types": {"p5.48xlarge": {"usd_per_hour": "-1"}}},
            ("instance_types", "p5.48xlarge", "usd_per_hour"),
        ),
        (
            {"instance_types": {"p5.48xlarge": {"usd_per_hour": "1", "gpu": 8}}},
            ("instance_types", "p5.48xlarge", "gpu"),
        ),
        ({"spot_discount": "1.5"}, ("spot_discount",)),
        ({"usd_per_gpu_hour_by_model": {"H100-SXM-80GB": "cheap"}}, ("usd_per_gpu_hour_by_model", "H100-SXM-80GB")),
        ({"default_rate": "1"}, ("default_rate",)),
    ],
)
def test_price_overrides_bad_input_names_field_path(payload: dict[str, object], path: tuple[str, ...]) -> None:
    # GIVEN a malformed rate card
    # WHEN it is validated
    with pytest.raises(ValidationError) as info:
        PriceOverrides.model_validate(payload)
    # THEN the error names the offending field path
    assert tuple(str(p) for p in info.value.errors()[0]["loc"]) == path


def test_price_overrides_float_rate_keeps_written_digits() -> None:
    # GIVEN a rate card read from YAML, where 2.7447 arrives as a float
    overrides = PriceOverrides.model_validate({"default_usd_per_gpu_hour": 2.7447})
    # WHEN it is validated
    # THEN the Decimal holds exactly the digits written
    assert overrides.default_usd_per_gpu_hour == Decimal("2.7447")
