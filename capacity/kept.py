"""State a listener keeps across restarts in a ConfigMap of the placeholder namespace.

What a warm pool learns (the predictive pool's stage model) took hours or days of traffic
to learn; a restart should not start it over.
``keep`` reads it once at start and writes it every ``interval()`` seconds, as one JSON
value under one key. Every failure is logged and counted (``gha_capacity_kube_errors``)
and never fatal: without the ConfigMap (no RBAC rule, an apiserver outage, a value that
does not parse) the pool starts empty and learns again, and the next save tries again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from base.kube import KubeError
from capacity import contract
from capacity.cluster import Cluster
from capacity.metrics import CapacityMetrics

# The monitor's logger: these lines were the monitor's own, and log filters name it.
log = logging.getLogger("capacity.monitor")


async def keep(
    kube: Cluster,
    metrics: CapacityMetrics,
    *,
    namespace: str,
    name: str,
    key: str,
    what: str,
    load: Callable[[object], bool],
    dump: Callable[[], object],
    interval: Callable[[], float],
) -> None:
    """Load ``name``'s ``key`` with ``load`` (False or ValueError: not usable), then write
    ``dump()`` there every ``interval()`` seconds until cancelled. ``what`` names it in logs."""
    try:
        found = await kube.get_config_map(namespace, name)
    except KubeError as exc:
        metrics.record_kube_error("get configmaps", exc.kind.value)
        log.warning(
            f"cannot read the {what}; it starts empty",
            extra={"configmap": name, "error": str(exc)},
        )
        found = None
    if found is not None and key in found:
        try:
            loaded = load(json.loads(found[key]))
        except ValueError:
            loaded = False
        if loaded:
            log.info(f"{what} loaded", extra={"configmap": name})
        else:
            log.warning(f"{what} not usable; it starts empty", extra={"configmap": name})
    while True:
        await asyncio.sleep(interval())
        data = {key: json.dumps(dump(), separators=(",", ":"))}
        labels = {contract.LABEL_MANAGED_BY: contract.MANAGED_BY_VALUE}
        try:
            # A patch first: the ConfigMap exists on every save but the first.
            if not await kube.patch_config_map(namespace, name, data):
                await kube.create_config_map(namespace, name, data, labels)
        except KubeError as exc:
            metrics.record_kube_error("write configmaps", exc.kind.value)
            log.warning(f"cannot keep the {what}", extra={"configmap": name, "error": str(exc)})
