"""End-to-end sites whose nodes come from Karpenter (test infrastructure).

A ``Site`` (tools/e2e_site.py) places runner and workflow pods with a pool label and a
matching NoSchedule taint. Here each pool of a site is one Karpenter NodePool whose nodes carry
that label and taint, so the site's pods provision their own nodes, of the pool's instance
types, with the node-registration delay of the KWOKNodeClass. ``NodeClaimLog`` samples the
NodeClaims of those pools, which is where launches and node-seconds are measured.

Karpenter is started on a control plane this process started, or found on one started with
``python -m tools.localcluster up --karpenter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.e2e_site import POOL_KEY, Site
from tools.localcluster import LocalCluster
from tools.localcluster.build import ensure_karpenter_built
from tools.localcluster.karpenter import (
    NODECLAIMS,
    NODEPOOL_LABEL,
    Karpenter,
    attach_karpenter,
    start_karpenter,
    timestamp,
)
from tools.localcluster.rest import TRANSIENT, KubeError
from tools.sampling import Sampler

POOLS = ("runner", "workflow")


def ensure_karpenter(cluster: LocalCluster, progress: Callable[[str], None]) -> Karpenter:
    """Karpenter on ``cluster``: the one already running, or one started now (stopped with
    the cluster)."""
    for comp in cluster.components:
        if comp.name == "karpenter" and comp.pid is not None:
            assert cluster.workdir is not None
            return Karpenter(cluster, cluster.workdir / "karpenter" / "capacity.json", comp.pid)
    if not cluster.components:  # attached to a control plane started elsewhere
        attached = attach_karpenter(cluster)
        if attached is None:
            raise RuntimeError(
                "the running control plane has no Karpenter: stop it "
                "(python -m tools.localcluster down) or start it with `up --karpenter`"
            )
        return attached
    artifacts = ensure_karpenter_built(progress)
    progress("starting Karpenter (kwok cloud provider)")
    return start_karpenter(cluster, artifacts)


def site_nodepool(
    site: Site,
    pool: str,
    types: Sequence[str],
    *,
    consolidate_after: str = "10s",
    limits: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A NodePool for one pool ("runner" or "workflow") of ``site``: its nodes carry the pool
    label and taint the site's pods select and tolerate. Consolidation on (empty and
    underutilized nodes), all at once (budget 100 %), as a cost-minded fleet runs it."""
    value = site.pool_value(pool)
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {POOL_KEY: value}},
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.kwok.sh",
                    "kind": "KWOKNodeClass",
                    "name": "default",
                },
                "requirements": [
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": list(types),
                    },
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                ],
                "taints": [{"key": POOL_KEY, "value": value, "effect": "NoSchedule"}],
                "expireAfter": "Never",
            },
        },
        "disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": consolidate_after,
            "budgets": [{"nodes": "100%"}],
        },
    }
    if limits:
        spec["limits"] = dict(limits)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": nodepool_name(site, pool)},
        "spec": spec,
    }


def nodepool_name(site: Site, pool: str) -> str:
    return f"{site.namespace}-{pool}"


def create_site_nodepools(
    karpenter: Karpenter,
    site: Site,
    types: Mapping[str, Sequence[str]],
    *,
    limits: Mapping[str, Mapping[str, str]] | None = None,
    consolidate_after: str = "10s",
) -> list[str]:
    """One NodePool per pool of ``site``; ``types`` and ``limits``: pool -> instance types,
    pool -> NodePool limits."""
    return [
        karpenter.create_nodepool(
            site_nodepool(
                site,
                pool,
                types[pool],
                consolidate_after=consolidate_after,
                limits=(limits or {}).get(pool),
            )
        )
        for pool in POOLS
    ]


def delete_nodepools(karpenter: Karpenter, names: Iterable[str], timeout: float = 180.0) -> None:
    """Delete NodePools and wait until their nodes are gone (blocking)."""
    for name in names:
        with contextlib.suppress(KubeError):
            karpenter.delete_nodepool(name, timeout)


def reset_cloud(karpenter: Karpenter) -> None:
    """Give the fake cloud its capacity back and make launches and registration instant
    again."""
    karpenter.launch_delay = None
    karpenter.set_capacity()
    with contextlib.suppress(KubeError):
        karpenter.set_registration_delay("0s")


@dataclass
class Claim:
    """One NodeClaim as sampled: when it was created and last seen (wall clock)."""

    name: str
    pool: str
    created: float
    last_seen: float
    launched: bool = False  # the cloud returned an instance (providerID set)
    registered: bool = False  # a Node joined for it
    gone: bool = False
    registered_at: float | None = None  # the first sample that saw its Node

    @property
    def ready_after(self) -> float | None:
        """Seconds from creation to its Node joining (to the sample's precision)."""
        return None if self.registered_at is None else self.registered_at - self.created

    def seconds_within(self, start: float, end: float) -> float:
        """Lifetime inside [start, end]: from creation (launch is billed from then) to the
        moment it was no longer listed."""
        return max(0.0, min(self.last_seen, end) - max(self.created, start))


@dataclass
class NodeClaimLog(Sampler):
    """Samples the NodeClaims of some NodePools every ``interval`` seconds (in a thread: the
    REST client blocks). ``counts`` keeps (wall, {pool: NodeClaims}) for timelines."""

    cluster: LocalCluster
    pools: Sequence[str]
    interval: float = 1.0
    claims: dict[str, Claim] = field(default_factory=dict)
    counts: list[tuple[float, dict[str, int]]] = field(default_factory=list)

    async def stop(self) -> None:
        await super().stop()
        await self.sample()  # the final state, for lifetimes that end now

    async def _sample_once(self) -> None:
        with contextlib.suppress(*TRANSIENT):  # a missed sample; the next one counts
            await self.sample()

    async def sample(self) -> None:
        selector = f"{NODEPOOL_LABEL} in ({','.join(self.pools)})"
        found = await asyncio.to_thread(
            self.cluster.rest.request, "GET", NODECLAIMS, params={"labelSelector": selector}
        )
        now = time.time()
        listed: set[str] = set()
        per_pool = dict.fromkeys(self.pools, 0)
        for item in found.get("items", []):
            meta, status = item["metadata"], item.get("status") or {}
            name = meta["name"]
            pool = meta.get("labels", {}).get(NODEPOOL_LABEL, "?")
            listed.add(name)
            claim = self.claims.get(name)
            if claim is None:
                created = timestamp(meta.get("creationTimestamp")) or now
                claim = self.claims[name] = Claim(name, pool, created, now)
            claim.last_seen = now
            claim.launched |= bool(status.get("providerID"))
            claim.registered |= bool(status.get("nodeName"))
            if claim.registered and claim.registered_at is None:
                claim.registered_at = now
            per_pool[pool] = per_pool.get(pool, 0) + 1
        for claim in self.claims.values():
            if claim.name not in listed:
                claim.gone = True
        self.counts.append((now, per_pool))

    def node_seconds(self, start: float, end: float) -> dict[str, float]:
        totals = dict.fromkeys(self.pools, 0.0)
        for claim in self.claims.values():
            totals[claim.pool] = totals.get(claim.pool, 0.0) + claim.seconds_within(start, end)
        return totals

    def ready_after(self, start: float, end: float) -> list[float]:
        """Creation to Node, of every NodeClaim created in [start, end] whose Node joined:
        the launch delays the cluster really had (a loaded machine adds to the configured
        ones), sorted."""
        found = []
        for claim in self.claims.values():
            after = claim.ready_after
            if start <= claim.created <= end and after is not None:
                found.append(after)
        return sorted(found)

    def launches(self, start: float, end: float) -> dict[str, dict[str, int]]:
        """NodeClaims created in [start, end] per pool: attempted and launched."""
        result = {p: {"attempted": 0, "launched": 0} for p in self.pools}
        for claim in self.claims.values():
            if start <= claim.created <= end:
                entry = result.setdefault(claim.pool, {"attempted": 0, "launched": 0})
                entry["attempted"] += 1
                entry["launched"] += int(claim.launched)
        return result
