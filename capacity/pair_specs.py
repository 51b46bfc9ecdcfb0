"""The placeholder pairs' manifests for the current runner set, and the owner they name.

The owner the garbage collector follows. ARC removes a listener (uninstall, rollback, any
scale-set change that recreates it) by deleting its pod, config Secret, Role, RoleBinding and
ServiceAccount in the same second; the pod's token is dead at once, so the shutdown deletes
above all get 401, and on a rollback the EphemeralRunnerSet stays. So each placeholder's
ownerReference names ARC's *listener Role* in the runner namespace (``listener_role``; by
default the pod's own name, which is how ARC names both): when ARC deletes it, the garbage
collector deletes the placeholders, whoever is left to ask. A plain pod restart (crash, OOM,
eviction) leaves the Role alone, so the next listener adopts the placeholders as before
(adoption checks the owner annotation, the EphemeralRunnerSet's uid). When the Role cannot be
read (not running under ARC, or the RBAC rule missing) the EphemeralRunnerSet is the owner, as
before; the reason is logged.

Placeholders in another namespace than the runner set (``placeholder_namespace``) cannot
carry an ownerReference to it (the garbage collector would delete them at once), so there
ownership rests on the owner annotation alone, and deleting the runner set does not remove
them: the next listener sweeps them, or they end at their TTL.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from base.arc import ARC_GROUP, ARC_VERSION
from base.kube import KubeError
from capacity import specs
from capacity.cluster import Cluster
from capacity.model import Role
from capacity.pods import RunnerSet
from capacity.reconciler import Manifest
from capacity.settings import CapacitySettings

# The monitor's logger: these lines were the monitor's own, and log filters name it.
log = logging.getLogger("capacity.monitor")


class PairSpecs:
    """The template of the current runner set's placeholders (built once per runner set and
    owner), their spec hashes (adoption) and the two manifests of a pair."""

    def __init__(
        self,
        *,
        settings: CapacitySettings,
        kube: Cluster,
        scale_set_name: str,
        runner_namespace: str,
        placeholder_namespace: str,
        role_name: str,
    ) -> None:
        self.settings = settings
        self._kube = kube
        self.scale_set_name = scale_set_name
        self.runner_namespace = runner_namespace
        self.placeholder_namespace = placeholder_namespace
        self._role_name = role_name
        self._template_for: tuple[RunnerSet, specs.PlaceholderTemplate] | None = None
        self._role_owner: specs.OwnerRef | None = None

    def template(self, owner: RunnerSet) -> specs.PlaceholderTemplate:
        cached = self._template_for
        if cached is not None and (cached[0] is owner or cached[0] == owner):
            return cached[1]
        ref = None
        if self.placeholder_namespace == self.runner_namespace:
            ref = self._role_owner or specs.OwnerRef(
                api_version=f"{ARC_GROUP}/{ARC_VERSION}",
                kind="EphemeralRunnerSet",
                name=owner.name,
                uid=owner.uid,
                namespace=self.runner_namespace,
            )
        template = specs.build_template(
            self.settings,
            scale_set=self.scale_set_name,
            runner_namespace=self.runner_namespace,
            runner_pod_template={"spec": owner.pod_spec},
            owner_uid=owner.uid,
            owner=ref,
        )
        self._template_for = (owner, template)  # only the current owner's is kept
        return template

    def spec_hashes(self, owner: RunnerSet) -> Mapping[Role, str]:
        template = self.template(owner)
        return {role: specs.spec_hash(role, template) for role in Role}

    def build_pair(self, slot: str, owner: RunnerSet, now: float) -> tuple[Manifest, Manifest]:
        template = self.template(owner)
        return (
            specs.placeholder_pod(Role.RUNNER, slot, template=template, now=now),
            specs.placeholder_pod(Role.WORKFLOW, slot, template=template, now=now),
        )

    async def resolve_owner(self) -> specs.OwnerRef | None:
        """Find ARC's listener Role to own the placeholders (None: the runner set owns them)."""
        name = self._role_name
        if not name or self.placeholder_namespace != self.runner_namespace:
            return None
        try:
            uid = await self._kube.get_role_uid(self.runner_namespace, name)
        except KubeError as exc:
            log.warning(
                "cannot read the listener's Role; placeholders are owned by the runner set "
                "and may outlive a listener that ARC removes",
                extra={"role": name, "error": str(exc)},
            )
            return None
        if uid is None:
            log.warning(
                "listener Role not found; placeholders are owned by the runner set",
                extra={"role": name, "namespace": self.runner_namespace},
            )
            return None
        self._role_owner = specs.OwnerRef(
            api_version="rbac.authorization.k8s.io/v1",
            kind="Role",
            name=name,
            uid=uid,
            namespace=self.runner_namespace,
        )
        self._template_for = None
        log.info("placeholders are owned by the listener's Role", extra={"role": name})
        return self._role_owner
