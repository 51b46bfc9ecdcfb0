"""ARC's custom resources as this project addresses them (EphemeralRunnerSet,
EphemeralRunner, AutoscalingListener): the group and version, named once for the Kubernetes
client, the listener's patches and the RBAC the listener prints. No imports, so the
``ghalistener rbac`` command stays light."""

from __future__ import annotations

ARC_GROUP = "actions.github.com"
ARC_VERSION = "v1alpha1"
