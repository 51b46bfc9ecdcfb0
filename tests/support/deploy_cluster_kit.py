"""deploy/ on a real API server (test infrastructure): apply, impersonate, ask.

- ``dynamic`` and ``apply``: server-side apply of any manifest, as
  ``kubectl apply --server-side`` does (dry run or for real);
- ``impersonating``: an ApiClient acting as a ServiceAccount, for RBAC checks; ``status_of``
  and ``watch_status``: the HTTP status of one raw request or watch, 403 included;
- ``our_role`` and ``bind_to``: the shipped Role, and a shipped binding pointed at the test's
  controller namespace (as deploy/README.md tells users to do); ``with_verbs``: a shipped
  role cut down to some verbs;
- ``as_listener``: acting as ARC's listener ServiceAccount; ``assert_each_verb_needed``:
  the RBAC check of the optional readers (NodePools, cluster-autoscaler's status);
- ``listener_with_shipped_rbac``: deploy/rbac applied for a listener whose ServiceAccount
  lives in a separate controller namespace, with ARC's own listener Role and one scale set's
  objects, yielding a ``Listener`` (the identity's clients and those objects).

Used by the deploy tests (tests/integration/test_deploy_apply.py, test_shipped_rbac.py,
test_generated_rbac.py) and the NodePool RBAC tests.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.dynamic import DynamicClient

from base.arc import ARC_GROUP
from base.kube import Kube
from tests.support.deploy_files import DEPLOY, yaml_docs
from tools.capacity_kit import (
    apply_ladder,
    create_ephemeral_runner,
    create_runner_set,
    runner_pod,
    runner_pod_spec,
    workflow_pod,
)
from tools.localcluster import LocalCluster
from tools.waits import eventually

FIELD_MANAGER = "capacity-listener-tests"
SHIPPED_CONTROLLER_NAMESPACE = "arc-systems"
SCALE_SET = "arc-cpu"


@contextlib.asynccontextmanager
async def dynamic(api: client.ApiClient, tmp_path: Path) -> AsyncIterator[DynamicClient]:
    # A discovery cache per test: CRDs installed by the harness must be visible.
    yield await DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))


async def apply(
    dyn: DynamicClient, body: dict[str, Any], namespace: str | None, *, dry_run: bool
) -> Any:
    """Server-side apply, as `kubectl apply --server-side` does."""
    resource = await dyn.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    return await dyn.server_side_apply(
        resource,
        body=body,
        namespace=namespace if resource.namespaced else None,
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
        dry_run="All" if dry_run else None,
    )


def as_pod(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec}


def our_role() -> dict[str, Any]:
    (role,) = yaml_docs(DEPLOY / "rbac" / "role.yaml")
    return role


def bind_to(binding: dict[str, Any], controller_namespace: str) -> dict[str, Any]:
    """The shipped binding with `arc-systems` replaced, as deploy/README.md tells users."""
    binding = copy.deepcopy(binding)
    (subject,) = binding["subjects"]
    assert subject["name"] == f"system:serviceaccounts:{SHIPPED_CONTROLLER_NAMESPACE}"
    subject["name"] = f"system:serviceaccounts:{controller_namespace}"
    return binding


@contextlib.asynccontextmanager
async def impersonating(
    cluster: LocalCluster, user: str, group: str
) -> AsyncIterator[client.ApiClient]:
    """An ApiClient that acts as `user` in `group` (the admin may impersonate)."""
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(cluster.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(
        configuration, header_name="Impersonate-User", header_value=user
    ) as api:
        api.set_default_header("Impersonate-Group", group)
        yield api


@contextlib.asynccontextmanager
async def as_listener(cluster: LocalCluster, controller_ns: str) -> AsyncIterator[client.ApiClient]:
    """An ApiClient acting as ARC's listener ServiceAccount of scale set arc-cpu, in the
    controller namespace ``controller_ns``."""
    user = f"system:serviceaccount:{controller_ns}:{SCALE_SET}-754b578d-listener"
    async with impersonating(cluster, user, f"system:serviceaccounts:{controller_ns}") as api:
        yield api


@contextlib.asynccontextmanager
async def granted_listener(
    cluster: LocalCluster, controller_ns: str, grant: Callable[[], Awaitable[None]], probe: str
) -> AsyncIterator[client.ApiClient]:
    """The listener's identity (``as_listener``) once ``grant()`` has applied its RBAC and
    the API server enforces it (GET ``probe`` allowed)."""
    await grant()
    async with as_listener(cluster, controller_ns) as api:

        async def allowed() -> bool:
            return await status_of(api, "GET", probe) == 200

        await eventually(allowed, f"GET {probe} allowed", within=15)
        yield api


def with_verbs(role: dict[str, Any], verbs: tuple[str, ...]) -> dict[str, Any]:
    """A copy of the shipped ``role`` whose rules keep only ``verbs``."""
    role = copy.deepcopy(role)
    for rule in role["rules"]:
        rule["verbs"] = [v for v in rule["verbs"] if v in verbs]
    return role


async def assert_each_verb_needed(
    cluster: LocalCluster,
    controller_ns: str,
    checks: Mapping[str, Callable[[client.ApiClient], Awaitable[int]]],
    missing: str,
) -> None:
    """With the role granted without ``missing`` (the caller did that), the listener may do
    the other checks and not ``missing`` (each check answers its HTTP status)."""
    async with as_listener(cluster, controller_ns) as api:

        async def settled() -> bool:
            others = [await check(api) for verb, check in checks.items() if verb != missing]
            return others == [200] * len(others)

        await eventually(settled, "the other verbs allowed", within=15)
        assert await checks[missing](api) == 403


async def status_of(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: dict[str, str] | None = None,
    body: Any = None,
) -> int:
    """The HTTP status of one raw request (a body is sent as a merge patch)."""
    resp = await api.call_api(
        path,
        method,
        query_params=list((query or {}).items()),
        header_params={
            "Accept": "application/json",
            "Content-Type": "application/merge-patch+json",
        },
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=15,
    )
    try:
        await resp.read()
        return int(resp.status)
    finally:
        resp.release()


async def watch_status(api: client.ApiClient, path: str, query: dict[str, str]) -> int:
    """Open a watch (ended by the server after 1 s) and return its HTTP status."""
    return await status_of(
        api, "GET", path, query={**query, "watch": "true", "timeoutSeconds": "1"}
    )


# --- a listener's identity with deploy/rbac applied ---------------------------------------


@dataclass
class Listener:
    """A listener's identity and the objects of its scale set."""

    kube: Kube  # as the listener's ServiceAccount
    api: client.ApiClient  # same identity, for raw watch requests
    admin: client.ApiClient
    namespace: str  # runner (and placeholder) namespace
    controller_namespace: str
    service_account: str
    runner_set: dict[str, Any]
    runner: str  # an EphemeralRunner
    serial: int = 0

    def unique(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial}"


def arc_listener_role(runner_set: str, service_account: str, controller_ns: str) -> list[Any]:
    """The Role and RoleBinding ARC's controller creates for every listener
    (resourcebuilder.go rulesForListenerRole): patch only."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "arc-listener"},
            "rules": [
                {
                    "apiGroups": [ARC_GROUP],
                    "resources": ["ephemeralrunnersets"],
                    "resourceNames": [runner_set],
                    "verbs": ["patch"],
                },
                {
                    "apiGroups": [ARC_GROUP],
                    "resources": ["ephemeralrunners", "ephemeralrunners/status"],
                    "verbs": ["patch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "arc-listener"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "arc-listener",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": service_account, "namespace": controller_ns}
            ],
        },
    ]


def cluster_rbac_per_test(
    file: str, controller_ns: str, suffix: str, verbs: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    """A shipped ClusterRole and its binding (deploy/rbac/``file``), renamed per test (they
    are cluster-wide), bound to the controller namespace; with only ``verbs`` if given."""
    role, binding = yaml_docs(DEPLOY / "rbac" / file)
    if verbs is not None:
        role = with_verbs(role, verbs)
    role["metadata"]["name"] += f"-{suffix}"
    binding = bind_to(binding, controller_ns)
    binding["metadata"]["name"] += f"-{suffix}"
    binding["roleRef"]["name"] = role["metadata"]["name"]
    return [role, binding]


@contextlib.asynccontextmanager
async def listener_with_shipped_rbac(
    local_cluster: LocalCluster,
    kube_api: client.ApiClient,
    namespace: str,
    controller_namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Listener]:
    """deploy/rbac applied for a listener whose ServiceAccount lives in a separate controller
    namespace, ARC's own listener Role, and a scale set's objects (created as admin)."""
    await apply_ladder(kube_api)
    runner_set = await create_runner_set(
        kube_api, namespace, f"{SCALE_SET}-x2v9k", runner_pod_spec(namespace, cpu="100m")
    )
    set_name = runner_set["metadata"]["name"]
    await create_ephemeral_runner(kube_api, namespace, f"{set_name}-runner-a", SCALE_SET)
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(
        namespace,
        runner_pod(f"{set_name}-runner-a", owner=namespace, scale_set=SCALE_SET, cpu="100m",
                   memory="64Mi"),
    )  # fmt: skip
    await core.create_namespaced_pod(
        namespace, workflow_pod(f"{set_name}-runner-a", owner=namespace, cpu="100m", memory="64Mi")
    )

    service_account = f"{SCALE_SET}-754b578d-listener"  # ARC's naming: <ARS>-<hash>-listener
    suffix = namespace
    rbac_docs = [
        our_role(),
        bind_to(yaml_docs(DEPLOY / "rbac" / "rolebinding.yaml")[0], controller_namespace),
        *arc_listener_role(set_name, service_account, controller_namespace),
    ]
    node_docs = cluster_rbac_per_test("clusterrole-node-checks.yaml", controller_namespace, suffix)
    async with dynamic(kube_api, tmp_path) as dyn:
        for body in [*rbac_docs, *node_docs]:
            await apply(dyn, body, namespace, dry_run=False)
    user = f"system:serviceaccount:{controller_namespace}:{service_account}"
    group = f"system:serviceaccounts:{controller_namespace}"
    try:
        async with impersonating(local_cluster, user, group) as api:
            yield Listener(
                kube=Kube(api, request_timeout=15.0),
                api=api,
                admin=kube_api,
                namespace=namespace,
                controller_namespace=controller_namespace,
                service_account=service_account,
                runner_set=runner_set,
                runner=f"{set_name}-runner-a",
            )
    finally:
        rbac_api = client.RbacAuthorizationV1Api(kube_api)
        role, binding = node_docs
        with contextlib.suppress(ApiException):
            await rbac_api.delete_cluster_role_binding(binding["metadata"]["name"])
        with contextlib.suppress(ApiException):
            await rbac_api.delete_cluster_role(role["metadata"]["name"])
