"""A real local Kubernetes control plane for the tests, built from the Go module proxy.

``build.ensure_built()`` compiles etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok from the consumer modules in ``go/`` (cached by input hash), and
fetches ARC's CRDs and kwok's stage files. ``harness.LocalCluster`` runs them on loopback.
CLI: ``python -m tools.localcluster build|up|down|status``.
"""

from .build import Artifacts, BuildError, ensure_built
from .harness import ClusterError, LocalCluster

__all__ = ["Artifacts", "BuildError", "ClusterError", "LocalCluster", "ensure_built"]
