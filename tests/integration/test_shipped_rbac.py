"""The RBAC in deploy/rbac on a real API server, impersonating a listener's ServiceAccount (as
ARC creates them, in the controller namespace):

- it is sufficient: the program's own code (capacity.view's watches, base.kube's
  create/delete/get and the scaler's merge-patches) performs every call;
- each rule is needed: with one verb removed, exactly the calls that need it get 403;
- the ServiceAccounts of other namespaces get nothing.

The set-up (the Role, bindings and scale-set objects) is tests/support/deploy_cluster_kit.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from base.arc import ARC_GROUP, ARC_VERSION
from base.kube import Kube, KubeError, Resource
from capacity.event_watch import events_resource
from capacity.model import Role
from capacity.pod_refusals import FIELD_SELECTOR as REFUSALS
from capacity.settings import load_capacity_settings
from capacity.specs import OwnerRef, build_template, placeholder_pod
from capacity.view import View
from tests.support.deploy_cluster_kit import (
    SCALE_SET,
    Listener,
    apply,
    dynamic,
    impersonating,
    listener_with_shipped_rbac,
    our_role,
    watch_status,
)
from tests.support.deploy_files import DEPLOY, yaml_docs
from tools.localcluster import LocalCluster
from tools.waits import eventually

pytestmark = pytest.mark.cluster


ARC_SCALE_SET_LABEL = "actions.github.com/scale-set-name"


@pytest.fixture
async def listener(
    local_cluster: LocalCluster,
    kube_api: client.ApiClient,
    namespace: str,
    controller_namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Listener]:
    async with listener_with_shipped_rbac(
        local_cluster, kube_api, namespace, controller_namespace, tmp_path
    ) as identity:
        yield identity


class Forbidden(Exception):
    pass


def forbidden_on_403(status: int, what: str) -> None:
    if status == 403:
        raise Forbidden(what)
    assert 200 <= status < 300 or status == 404, (what, status)


async def as_listener(call: Awaitable[Any], what: str) -> Any:
    try:
        return await call
    except KubeError as exc:
        forbidden_on_403(exc.status, what)
        raise


# Every call the program makes, keyed by the (resource, verb) it needs. Each returns normally
# when allowed and raises Forbidden on 403.
Operation = Callable[[Listener], Awaitable[Any]]


async def _list(listener: Listener, resource: Resource, **selectors: str) -> Any:
    return await as_listener(
        listener.kube.list_objects(resource, lambda obj: obj, **selectors), f"list {resource}"
    )


async def _watch(listener: Listener, resource: Resource, **query: str) -> None:
    forbidden_on_403(
        await watch_status(listener.api, resource.path, query), f"watch {resource.plural}"
    )


def _runner_set_name(listener: Listener) -> str:
    return str(listener.runner_set["metadata"]["name"])


async def _create_placeholder(listener: Listener) -> None:
    settings = load_capacity_settings(
        {"CAPACITY_CONFIG_FILE": str(DEPLOY / "config" / "capacity-cpu.yaml")}
    )
    owner = OwnerRef(
        api_version=f"{ARC_GROUP}/{ARC_VERSION}",
        kind="EphemeralRunnerSet",
        name=_runner_set_name(listener),
        uid=listener.runner_set["metadata"]["uid"],
        namespace=listener.namespace,
    )
    template = build_template(
        settings,
        scale_set=SCALE_SET,
        runner_namespace=listener.namespace,
        runner_pod_template={"spec": listener.runner_set["spec"]["ephemeralRunnerSpec"]["spec"]},
        owner_uid=owner.uid,
        owner=owner,
    )
    pod = placeholder_pod(Role.RUNNER, listener.unique("s"), template=template, now=time.time())
    created = await as_listener(listener.kube.create_pod(listener.namespace, pod), "create pod")
    assert created


async def _delete_pod(listener: Listener) -> None:
    # Authorization comes before the lookup: a missing pod answers 404 only when allowed.
    await as_listener(
        listener.kube.delete_pod(listener.namespace, listener.unique("no-such-pod")), "delete pod"
    )


async def _get_role(listener: Listener) -> None:
    await as_listener(
        listener.kube.get_role_uid(listener.namespace, listener.service_account), "get role"
    )


async def _get_node(listener: Listener) -> None:
    await as_listener(listener.kube.get_node("no-such-node"), "get node")


async def _patch_runner_set(listener: Listener) -> None:
    found = await as_listener(
        listener.kube.merge_patch(
            group=ARC_GROUP,
            version=ARC_VERSION,
            plural="ephemeralrunnersets",
            namespace=listener.namespace,
            name=_runner_set_name(listener),
            body={"spec": {"replicas": 0, "patchID": len(listener.unique("patch"))}},
        ),
        "patch ERS",
    )
    assert found


async def _patch_runner_status(listener: Listener) -> None:
    found = await as_listener(
        listener.kube.merge_patch(
            group=ARC_GROUP,
            version=ARC_VERSION,
            plural="ephemeralrunners",
            namespace=listener.namespace,
            name=listener.runner,
            body={"status": {"jobId": "4711"}},
            subresource="status",
        ),
        "patch ER status",
    )
    assert found


async def _get_config_map(listener: Listener) -> None:
    await as_listener(
        listener.kube.get_config_map(listener.namespace, listener.unique("no-such-cm")),
        "get configmap",
    )


async def _create_config_map(listener: Listener) -> None:
    created = await as_listener(
        listener.kube.create_config_map(
            listener.namespace, listener.unique("stage-model"), {"k": "v"}, {}
        ),
        "create configmap",
    )
    assert created


async def _patch_config_map(listener: Listener) -> None:
    # The ConfigMap exists (the admin made it): only the patch itself is under test.
    name = listener.unique("existing-stage-model")
    assert await Kube(listener.admin).create_config_map(listener.namespace, name, {}, {})
    patched = await as_listener(
        listener.kube.patch_config_map(listener.namespace, name, {"k": "v"}), "patch configmap"
    )
    assert patched
    assert await Kube(listener.admin).get_config_map(listener.namespace, name) == {"k": "v"}


def _pods(listener: Listener) -> Resource:
    return Resource.pods(listener.namespace)


def _arc(listener: Listener, plural: str) -> Resource:
    return Resource.arc(plural, listener.namespace)


OUR_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("pods", "list"): lambda li: _list(
        li, _pods(li), label_selector="app.kubernetes.io/managed-by=capacity-listener"
    ),
    ("pods", "watch"): lambda li: _watch(
        li, _pods(li), labelSelector="app.kubernetes.io/managed-by=capacity-listener"
    ),
    ("pods", "create"): _create_placeholder,
    ("pods", "delete"): _delete_pod,
    ("ephemeralrunners", "list"): lambda li: _list(
        li, _arc(li, "ephemeralrunners"), label_selector=f"{ARC_SCALE_SET_LABEL}={SCALE_SET}"
    ),
    ("ephemeralrunners", "watch"): lambda li: _watch(li, _arc(li, "ephemeralrunners")),
    ("ephemeralrunnersets", "list"): lambda li: _list(
        li,
        _arc(li, "ephemeralrunnersets"),
        field_selector=f"metadata.name={_runner_set_name(li)}",
    ),
    ("ephemeralrunnersets", "watch"): lambda li: _watch(
        li,
        _arc(li, "ephemeralrunnersets"),
        fieldSelector=f"metadata.name={_runner_set_name(li)}",
    ),
    ("nodes", "get"): _get_node,
    ("roles", "get"): _get_role,
    ("configmaps", "get"): _get_config_map,
    ("configmaps", "create"): _create_config_map,
    ("configmaps", "patch"): _patch_config_map,
    # capacity/pod_refusals.py's informer, with its own field selector.
    ("events", "list"): lambda li: _list(
        li, events_resource(li.namespace), field_selector=REFUSALS
    ),
    ("events", "watch"): lambda li: _watch(
        li, events_resource(li.namespace), fieldSelector=REFUSALS
    ),
}
ARC_OPERATIONS: dict[str, Operation] = {
    "patch ephemeralrunnersets": _patch_runner_set,
    "patch ephemeralrunners/status": _patch_runner_status,
}


def shipped_rules() -> set[tuple[str, str]]:
    rules = {
        (resource, verb)
        for rule in our_role()["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    (cluster_role, _) = yaml_docs(DEPLOY / "rbac" / "clusterrole-node-checks.yaml")
    rules |= {
        (resource, verb)
        for rule in cluster_role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    return rules


def test_every_shipped_rule_has_an_operation() -> None:
    assert shipped_rules() == set(OUR_OPERATIONS)


async def test_rbac_allows_every_call_the_program_makes(listener: Listener) -> None:
    """The real watch-driven view syncs as the listener, every single call succeeds."""
    errors: list[tuple[str, KubeError]] = []
    view = View(
        listener.kube,
        placeholder_namespace=listener.namespace,
        runner_namespace=listener.namespace,
        runner_set_name=_runner_set_name(listener),
        scale_set_name=SCALE_SET,
        node_checks=True,
        on_watch_error=lambda stream, exc: errors.append((stream, exc)),
    )
    task = asyncio.create_task(view.run())
    try:
        async with asyncio.timeout(30):
            await view.synced_event.wait()
        assert not errors, errors
        assert view.runner_set is not None
        assert view.runner_set.uid == listener.runner_set["metadata"]["uid"]
        assert listener.runner in view.runners
        assert listener.runner in view.runner_pods
        assert f"{listener.runner}-workflow" in view.workflow_pods

        for key, operation in OUR_OPERATIONS.items():
            try:
                await operation(listener)
            except Forbidden:
                pytest.fail(f"{key} is forbidden with deploy/rbac applied")
        for operation in ARC_OPERATIONS.values():
            await operation(listener)  # ARC's own Role covers these

        # The placeholder created above reached the view through the listener's watch.
        async def placeholders_seen() -> bool:
            return bool(view.placeholders)

        async def placeholders_gone() -> bool:
            return not view.placeholders

        await eventually(placeholders_seen, "the placeholder in the listener's view")
        for name in list(view.placeholders):
            assert await listener.kube.delete_pod(listener.namespace, name)
        await eventually(placeholders_gone, "the placeholder gone from the view")
        assert not errors, errors
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def without(rule: tuple[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Our Role and ClusterRole with one verb removed (and a rule left empty dropped)."""
    role = our_role()
    cluster_role = yaml_docs(DEPLOY / "rbac" / "clusterrole-node-checks.yaml")[0]
    resource, verb = rule
    for doc in (role, cluster_role):
        kept = []
        for entry in doc["rules"]:
            if resource in entry["resources"] and verb in entry["verbs"]:
                entry["verbs"] = [v for v in entry["verbs"] if v != verb]
            if entry["verbs"]:
                kept.append(entry)
        doc["rules"] = kept
    return role, cluster_role


@pytest.mark.parametrize("rule", sorted(shipped_rules()), ids="/".join)
async def test_each_rule_is_needed(
    listener: Listener, rule: tuple[str, str], tmp_path: Path
) -> None:
    role, cluster_role = without(rule)
    cluster_role["metadata"]["name"] += f"-{listener.namespace}"
    async with dynamic(listener.admin, tmp_path) as dyn:
        await apply(dyn, role, listener.namespace, dry_run=False)
        await apply(dyn, cluster_role, None, dry_run=False)

    async def denied() -> bool:
        try:
            await OUR_OPERATIONS[rule](listener)
        except Forbidden:
            return True
        return False

    # RBAC changes reach the authorizer through a watch: give it a moment.
    await eventually(denied, f"{rule} to be forbidden once its verb is removed", within=15)
    for other, operation in OUR_OPERATIONS.items():
        if other != rule:
            try:
                await operation(listener)
            except Forbidden:
                pytest.fail(f"removing {rule} also forbade {other}")


async def test_service_accounts_of_other_namespaces_get_nothing(
    listener: Listener, local_cluster: LocalCluster
) -> None:
    """The binding is to the controller namespace's service accounts only."""
    user = f"system:serviceaccount:{listener.namespace}:default"
    async with impersonating(
        local_cluster, user, f"system:serviceaccounts:{listener.namespace}"
    ) as api:
        stranger = Listener(
            kube=Kube(api),
            api=api,
            admin=listener.admin,
            namespace=listener.namespace,
            controller_namespace=listener.namespace,
            service_account="default",
            runner_set=listener.runner_set,
            runner=listener.runner,
        )
        allowed = []
        for key, operation in [*OUR_OPERATIONS.items(), *ARC_OPERATIONS.items()]:
            try:
                await operation(stranger)
            except Forbidden:
                continue
            allowed.append(key)
        assert not allowed
