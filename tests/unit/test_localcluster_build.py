"""The local control plane's build cache: what decides a rebuild of the Karpenter and Helm
binaries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tools.localcluster import build


@pytest.fixture
def go_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "go"
    shutil.copytree(build.GO_DIR, copy)
    monkeypatch.setattr(build, "GO_DIR", copy)
    return copy / build.KARPENTER_MODULE


def test_karpenter_key_follows_pins_and_our_main(go_dir: Path) -> None:
    key = build.karpenter_cache_key()
    assert key.startswith("karpenter-")
    assert build.karpenter_cache_key() == key  # stable
    main = go_dir / "main.go"
    main.write_text(main.read_text() + "\n// changed\n")
    changed = build.karpenter_cache_key()
    assert changed != key  # our main is in the binary: a change rebuilds it
    (go_dir / "go.sum").write_text((go_dir / "go.sum").read_text() + "\n")
    assert build.karpenter_cache_key() not in (key, changed)


def test_control_plane_key_ignores_karpenter(go_dir: Path) -> None:
    # Moving Karpenter's pin must not rebuild the control plane.
    before = build.cache_key()
    (go_dir / "main.go").write_text("package main\n")
    (go_dir / "go.sum").write_text("")
    assert build.cache_key() == before


def test_incomplete_karpenter_build_is_not_found(tmp_path: Path) -> None:
    root = tmp_path / "karpenter-x"
    (root / "bin").mkdir(parents=True)
    (root / "crds").mkdir()
    (root / "manifest.json").write_text(json.dumps({"versions": {"karpenter": "v1.8.0"}}))
    assert build.find_karpenter(root) is None
    (root / "bin" / "karpenter").write_bytes(b"")
    assert build.find_karpenter(root) is None  # CRDs missing
    for rel in build.KARPENTER_CRDS:
        (root / "crds" / Path(rel).name).write_text("{}")
    found = build.find_karpenter(root)
    assert found is not None
    assert found.version == "v1.8.0"


def test_helm_key_follows_its_pins_only(go_dir: Path) -> None:
    helm_dir = go_dir.parent / build.HELM_MODULE
    key = build.helm_cache_key()
    assert key.startswith("helm-")
    control_plane = build.cache_key()
    (go_dir / "go.sum").write_text("")  # Karpenter's pin moves: Helm stays
    assert build.helm_cache_key() == key
    (helm_dir / "go.sum").write_text((helm_dir / "go.sum").read_text() + "\n")
    assert build.helm_cache_key() != key
    assert build.cache_key() == control_plane  # and the control plane stays


def test_helm_is_stamped_like_its_release_build() -> None:
    flags = build.helm_ldflags("v3.22.0", "v0.37.0").split()
    assert "helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    # `helm template` and `helm lint` assume the Kubernetes version of its client-go.
    assert "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in flags
    assert "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1" in flags
    with pytest.raises(build.BuildError, match="client-go"):
        build.helm_ldflags("v3.22.0", "v1.0.0")


def test_incomplete_helm_build_is_not_found(tmp_path: Path) -> None:
    root = tmp_path / "helm-x"
    (root / "bin").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"versions": {"helm": "v3.22.0"}}))
    assert build.find_helm(root) is None
    (root / "bin" / "helm").write_bytes(b"")
    found = build.find_helm(root)
    assert found is not None
    assert found.version == "v3.22.0"


def test_kubectl_key_follows_the_control_plane_pins_and_its_own_sums(go_dir: Path) -> None:
    k8s_dir = go_dir.parent / build.KUBECTL_MODULE
    key = build.kubectl_cache_key()
    assert key.startswith("kubectl-")
    control_plane = build.cache_key()
    (go_dir / "go.sum").write_text("")  # Karpenter's pin moves: kubectl stays
    assert build.kubectl_cache_key() == key
    sums = k8s_dir / build.KUBECTL_SUM
    sums.write_text(sums.read_text() + "\n")
    changed = build.kubectl_cache_key()
    assert changed != key
    # kubectl's own checksums sit beside go/k8s's go.mod, outside the control plane's key.
    assert build.cache_key() == control_plane
    (k8s_dir / "go.sum").write_text((k8s_dir / "go.sum").read_text() + "\n")
    assert build.kubectl_cache_key() not in (key, changed)  # a moved k8s pin rebuilds it


def test_kubectl_modfile_is_go_mod_with_both_sums(tmp_path: Path) -> None:
    modfile = build._kubectl_modfile(tmp_path)
    k8s_dir = build.GO_DIR / build.KUBECTL_MODULE
    assert modfile.read_text() == (k8s_dir / "go.mod").read_text()
    sums = modfile.with_suffix(".sum").read_text().splitlines()
    assert set(sums) >= set((k8s_dir / "go.sum").read_text().splitlines())
    assert set(sums) >= set((k8s_dir / build.KUBECTL_SUM).read_text().splitlines())


def test_incomplete_kubectl_build_is_not_found(tmp_path: Path) -> None:
    root = tmp_path / "kubectl-x"
    (root / "bin").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"versions": {"kubectl": "v1.36.4"}}))
    assert build.find_kubectl(root) is None
    (root / "bin" / "kubectl").write_bytes(b"")
    found = build.find_kubectl(root)
    assert found is not None
    assert found.version == "v1.36.4"
