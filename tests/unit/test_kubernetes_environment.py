"""Where Kubernetes access comes from: KUBERNETES_SERVICE_HOST (in a pod) and KUBECONFIG (kubectl's file list),
read through one settings model (`bootstrap.sources.KubernetesEnvironment`, issue 27 §3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwaste.bootstrap.sources import KubernetesEnvironment, kubernetes_configured
from gpuwaste.models.settings import ClusterConfig


def _cluster(**kubernetes: object) -> ClusterConfig:
    return ClusterConfig.model_validate({"name": "c", "kubernetes": kubernetes})


def test_kubeconfig_lists_files_and_any_that_exists_counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    present = tmp_path / "b.yaml"
    present.write_text("apiVersion: v1\n")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "a.yaml"), "", str(present)]))
    assert KubernetesEnvironment().kubeconfig_files() == [tmp_path / "a.yaml", present]
    assert kubernetes_configured(_cluster(mode="kubeconfig"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a.yaml"))
    assert not kubernetes_configured(_cluster(mode="kubeconfig"))


def test_without_kubeconfig_the_default_file_is_looked_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert KubernetesEnvironment().kubeconfig_files() == [tmp_path / ".kube" / "config"]
    assert not kubernetes_configured(_cluster(mode="kubeconfig"))
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("apiVersion: v1\n")
    assert kubernetes_configured(_cluster(mode="kubeconfig"))


def test_in_cluster_needs_the_service_host_the_kubelet_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert not KubernetesEnvironment().in_cluster
    assert not kubernetes_configured(_cluster(mode="in-cluster"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert KubernetesEnvironment().in_cluster
    assert kubernetes_configured(_cluster(mode="in-cluster"))
