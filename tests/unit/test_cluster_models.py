"""Unit tests: GPU share of a request (MIG slices per GPU model, time-slicing replicas)."""

from __future__ import annotations

from decimal import Decimal

from gpuwaste.models.cluster import Node, gpu_share_for_request


def test_gpu_share_mig_slice_on_a30_is_a_quarter() -> None:
    # GIVEN an A30 node (4 compute slices per GPU, NVIDIA MIG user guide)
    node = Node(name="n", gpu_product="NVIDIA-A30")
    # WHEN a pod requests one 1g.6gb slice (mixed strategy) or one MIG-single device
    mixed = gpu_share_for_request("nvidia.com/mig-1g.6gb", 1, node)
    single = gpu_share_for_request("nvidia.com/gpu", 1, Node(name="n", gpu_product="NVIDIA-A30-MIG-1g.6gb"))
    # THEN each is 1/4 of a physical GPU
    assert mixed == Decimal(1) / 4
    assert single == Decimal(1) / 4


def test_gpu_share_mig_slice_on_a100_is_a_seventh() -> None:
    # GIVEN an A100 node
    node = Node(name="n", gpu_product="NVIDIA-A100-SXM4-40GB")
    # WHEN a pod requests two 3g.20gb slices
    share = gpu_share_for_request("nvidia.com/mig-3g.20gb", 2, node)
    # THEN the share is 6/7 of a GPU
    assert share.quantize(Decimal("1e-20")) == (Decimal(6) / 7).quantize(Decimal("1e-20"))


def test_gpu_share_time_sliced_replica_is_one_over_replicas() -> None:
    # GIVEN a node that advertises each GPU as 4 time-sliced replicas
    node = Node(name="n", gpu_product="NVIDIA-A10G", gpu_replicas=4)
    # WHEN a pod requests one shared unit
    share = gpu_share_for_request("nvidia.com/gpu.shared", 1, node)
    # THEN it holds a quarter of a GPU
    assert share == Decimal("0.25")


def test_kubernetes_source_file_that_is_not_a_kubeconfig_is_a_config_error(tmp_path) -> None:
    # GIVEN a file that is YAML but not a kubeconfig (a list, not a mapping with clusters/users/contexts)
    import pytest

    from gpuwaste.errors import ConfigError
    from gpuwaste.models.settings import KubernetesSettings
    from gpuwaste.sources.kubernetes import KubernetesClusterSource

    bad = tmp_path / "kubeconfig"
    bad.write_text("- just\n- a list\n")
    # WHEN the source is built from it
    with pytest.raises(ConfigError) as err:
        KubernetesClusterSource.from_settings(KubernetesSettings(kubeconfig=str(bad)), cluster="c")
    # THEN the error names the file and what a kubeconfig needs
    assert str(bad) in str(err.value)
