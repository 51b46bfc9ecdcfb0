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
from capacity.stage_feed import StageFeed
from capacity.stages import MAX_PARENTS, StageModel

# The monitor's logger: these lines were the monitor's own, and log filters name it.
log = logging.getLogger("capacity.monitor")

# The predictive pool's stage model is kept in a ConfigMap of the placeholder namespace,
# read at start and written this often (a restart loses at most this much).
STAGE_MODEL_SAVE_INTERVAL = 300.0
STAGE_MODEL_KEY = "model.json"


def stage_model_config_map(scale_set_name: str) -> str:
    """The ConfigMap that keeps a scale set's stage model (predictive warm pool;
    ``ghalistener rbac`` grants get and patch on exactly this name). Named after the scale
    set, not its runner set: ARC 0.14 generates the runner set's name and replaces it when the
    runner spec changes, which would both lose the model and miss the Role's resourceNames."""
    return f"capacity-stage-model-{scale_set_name}"


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


async def keep_stage_model(
    kube: Cluster,
    metrics: CapacityMetrics,
    feed: StageFeed | None,
    *,
    namespace: str,
    scale_set_name: str,
) -> None:
    """Predictive pool only: load the stage model kept by the previous process, then keep
    it every STAGE_MODEL_SAVE_INTERVAL (a failure is logged and counted; the model then
    learns from scratch and predicts nothing until its parents have been seen `min_runs`
    times)."""
    if feed is None:
        return
    model = feed.model

    def load(data: object) -> bool:
        loaded = StageModel.from_dict(data, min_runs=model.min_runs, max_age=model.max_age)
        # What this process learned before the read came back is newer: it wins.
        merged = {**loaded.parents, **model.parents}
        latest = sorted(merged, key=lambda k: merged[k].updated_at)[-MAX_PARENTS:]
        model.parents = {k: merged[k] for k in latest}
        return True

    await keep(
        kube,
        metrics,
        namespace=namespace,
        name=stage_model_config_map(scale_set_name),
        key=STAGE_MODEL_KEY,
        what="stage model",
        load=load,
        dump=model.to_dict,
        interval=lambda: STAGE_MODEL_SAVE_INTERVAL,
    )
