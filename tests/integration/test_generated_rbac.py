"""The least-privilege RBAC printed by `ghalistener rbac`, applied to a real API server: it
lets exactly the ServiceAccount ARC creates for the scale set's listener make every call, on
that scale set's objects only."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from base.kube import Kube, KubeError, Resource
from tests.support.deploy_cluster_kit import (
    SCALE_SET,
    apply,
    arc_listener_role,
    as_pod,
    dynamic,
    impersonating,
    status_of,
    watch_status,
)
from tools.capacity_kit import create_runner_set, runner_pod_spec
from tools.localcluster import LocalCluster
from tools.localcluster.testkit import PAUSE_IMAGE
from tools.waits import eventually

pytestmark = pytest.mark.cluster


async def _status_of(call: Awaitable[Any]) -> int:
    """200 when the call is allowed (a missing object's 404 counts as allowed), else its
    HTTP status."""
    try:
        await call
    except KubeError as exc:
        return exc.status
    return 200


async def test_generated_rbac_binds_exactly_arcs_listener_service_account(
    local_cluster: LocalCluster,
    kube_api: client.ApiClient,
    namespace: str,
    controller_namespace: str,
    tmp_path: Path,
) -> None:
    """Applied as printed, the Role and RoleBinding let exactly the ServiceAccount ARC creates
    for this scale set's listener make every call, on this scale set's objects only; any
    other account of the controller namespace gets nothing."""
    from listener.rbac import listener_name, manifests

    url = "https://github.com/acme"
    account = listener_name(SCALE_SET, namespace, "", url)
    # ARC 0.14 names the runner set `<scale set>-xxxxx` (generateName), and makes a new one
    # (a new name) when the runner spec changes; another scale set's sits next to it.
    ours = await create_runner_set(
        kube_api,
        namespace,
        SCALE_SET,
        runner_pod_spec(namespace, cpu="100m"),
        generate_name=True,
    )
    ours_name = ours["metadata"]["name"]
    other = await create_runner_set(
        kube_api, namespace, "arc-gpu", runner_pod_spec(namespace), generate_name=True
    )
    other_name = other["metadata"]["name"]
    assert ours_name.startswith(f"{SCALE_SET}-")
    assert ours_name != SCALE_SET
    rbac_api = client.RbacAuthorizationV1Api(kube_api)
    arc_role = await rbac_api.create_namespaced_role(
        namespace, {"metadata": {"name": account}, "rules": []}
    )
    await rbac_api.create_namespaced_role(namespace, {"metadata": {"name": "unrelated"}})
    docs = [
        *manifests(
            scale_set=SCALE_SET,
            namespace=namespace,
            runner_group="",
            github_config_url=url,
            controller_namespace=controller_namespace,
        ),
        # ARC's own Role for the listener: patch on the runner set, by its generated name.
        *arc_listener_role(ours_name, account, controller_namespace),
    ]
    async with dynamic(kube_api, tmp_path) as dyn:
        for body in docs:
            await apply(dyn, body, namespace, dry_run=False)

    pods = Resource.pods(namespace)
    sets = Resource.arc("ephemeralrunnersets", namespace)
    runners = Resource.arc("ephemeralrunners", namespace)
    by_name = {"fieldSelector": f"metadata.name={ours_name}"}
    placeholder = as_pod("ph-1", {"containers": [{"name": "c", "image": PAUSE_IMAGE}]})
    replicas = {"spec": {"replicas": 0}}

    async def calls(kube: Kube, api: client.ApiClient) -> dict[str, int]:
        return {
            "list pods": await _status_of(kube.list_objects(pods, lambda o: o)),
            "watch pods": await watch_status(api, pods.path, {}),
            "create pod": await _status_of(kube.create_pod(namespace, placeholder)),
            "delete pod": await _status_of(kube.delete_pod(namespace, "ph-1")),
            "list runners": await _status_of(kube.list_objects(runners, lambda o: o)),
            "watch runners": await watch_status(api, runners.path, {}),
            "list our set": await _status_of(
                kube.list_objects(sets, lambda o: o, field_selector=by_name["fieldSelector"])
            ),
            "watch our set": await watch_status(api, sets.path, by_name),
            "patch our set": await status_of(
                api, "PATCH", f"{sets.path}/{ours_name}", body=replicas
            ),
            "get ARC's listener role": await _status_of(kube.get_role_uid(namespace, account)),
            # Read-only on every runner set of the namespace: a name fixed at install time
            # cannot follow ARC's generated (and changing) runner-set name.
            "list every set": await _status_of(kube.list_objects(sets, lambda o: o)),
            "list another set": await _status_of(
                kube.list_objects(sets, lambda o: o, field_selector=f"metadata.name={other_name}")
            ),
            "patch another set": await status_of(
                api, "PATCH", f"{sets.path}/{other_name}", body=replicas
            ),
            "delete our set": await status_of(api, "DELETE", f"{sets.path}/{ours_name}"),
            "get another role": await _status_of(kube.get_role_uid(namespace, "unrelated")),
        }

    allowed = {
        "list pods", "watch pods", "create pod", "delete pod", "list runners", "watch runners",
        "list our set", "watch our set", "patch our set", "get ARC's listener role",
        "list every set", "list another set",
    }  # fmt: skip

    async def as_account(name: str) -> dict[str, int]:
        # The user alone, without the controller namespace's group: only a binding to this
        # exact account can authorise it.
        user = f"system:serviceaccount:{controller_namespace}:{name}"
        async with impersonating(local_cluster, user, "system:authenticated") as api:
            return await calls(Kube(api, request_timeout=15.0), api)

    last: dict[str, int] = {}

    async def listener_sees_all() -> dict[str, int] | None:
        last.update(await as_account(account))
        return dict(last) if all(last[k] == 200 for k in allowed) else None

    # RBAC changes reach the authorizer through a watch: give it a moment.
    try:
        seen = await eventually(listener_sees_all, "the generated RBAC in effect", within=15)
    except AssertionError:
        refused = {k: last[k] for k in sorted(allowed) if last[k] != 200}
        raise AssertionError(f"the listener's calls refused: {refused}") from None
    assert {k for k, status in seen.items() if status == 200} == allowed, seen
    assert {seen[k] for k in set(seen) - allowed} == {403}
    listed, _ = await Kube(kube_api).list_objects(
        sets, lambda o: o["metadata"]["uid"], field_selector=by_name["fieldSelector"]
    )
    assert listed == {ours_name: ours["metadata"]["uid"]}
    assert arc_role.metadata.uid == await Kube(kube_api).get_role_uid(namespace, account)

    stranger = await as_account(f"{SCALE_SET}-00000000-listener")
    assert set(stranger.values()) == {403}, stranger
