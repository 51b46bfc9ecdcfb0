"""deploy/ on a real API server.

1. Every manifest and the PriorityClasses apply server-side (dry run), and what the Helm
   overlays, workflow pod templates and capacity examples would create passes the API
   server's own validation and admission (PriorityClass names resolve, probes name real ports,
   extended resources have matching limits, the AutoscalingRunnerSet schema accepts the
   listener and runner templates).
2. The RBAC in deploy/rbac is sufficient: impersonating a listener's ServiceAccount (as ARC
   creates them, in the controller namespace), the program's own code (capacity.view's watches,
   base.kube's create/delete/get and the scaler's merge-patches) performs every call.
3. And each rule is needed: with one verb removed, exactly the calls that need it get 403.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.dynamic import DynamicClient

from base.arc import ARC_GROUP, ARC_VERSION
from base.kube import Kube, KubeError, Resource
from capacity.model import Role
from capacity.settings import load_capacity_settings
from capacity.specs import OwnerRef, build_template, placeholder_pod
from capacity.view import View
from tests.support.capacity_kit import (
    apply_ladder,
    create_ephemeral_runner,
    create_runner_set,
    runner_pod,
    runner_pod_spec,
    workflow_pod,
)
from tests.support.localcluster import LocalCluster
from tests.support.localcluster.testkit import PAUSE_IMAGE, eventually

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FIELD_MANAGER = "capacity-listener-tests"
SHIPPED_CONTROLLER_NAMESPACE = "arc-systems"
SCALE_SET = "arc-cpu"
ARC_SCALE_SET_LABEL = "actions.github.com/scale-set-name"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


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


async def dry_run_create_pod(api: client.ApiClient, namespace: str, pod: dict[str, Any]) -> None:
    await client.CoreV1Api(api).create_namespaced_pod(namespace, pod, dry_run="All")


# --- 1. manifests apply; what they describe is valid -----------------------------------------


def values(flavour: str) -> dict[str, Any]:
    (doc,) = docs(DEPLOY / "helm" / f"values-capacity-{flavour}.yaml")
    return doc


def hook_template(flavour: str) -> dict[str, Any]:
    (configmap,) = docs(DEPLOY / "helm" / f"workflow-pod-template-{flavour}.yaml")
    template: dict[str, Any] = yaml.safe_load(configmap["data"]["workflow.yaml"])
    return template


def as_pod(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec}


async def test_manifests_apply_server_side(
    kube_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    await apply_ladder(kube_api)  # for real: the pods below name these classes
    applied = []
    async with dynamic(kube_api, tmp_path) as dyn:
        paths = [
            *sorted((ROOT / "priorityclasses").glob("*.yaml")),
            *sorted((DEPLOY / "rbac").glob("*.yaml")),
            DEPLOY / "pdb-runners.yaml",
            *sorted((DEPLOY / "helm").glob("workflow-pod-template-*.yaml")),
        ]
        for path in paths:
            for body in docs(path):
                if body["kind"] == "Kustomization":  # client-side only (kubectl apply -k)
                    continue
                result = await apply(dyn, body, namespace, dry_run=True)
                assert result.metadata.name == body["metadata"]["name"]
                applied.append((path.name, body["kind"]))
        kinds = {kind for _, kind in applied}
        assert kinds >= {
            "PriorityClass",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "PodDisruptionBudget",
            "ConfigMap",
        }

        # The AutoscalingRunnerSet the chart renders from each overlay: ARC's CRD schema must
        # accept our listenerTemplate and runner template.
        for flavour in ("cpu", "gpu"):
            overlay = values(flavour)
            ars = {
                "apiVersion": f"{ARC_GROUP}/{ARC_VERSION}",
                "kind": "AutoscalingRunnerSet",
                "metadata": {"name": f"arc-{flavour}"},
                "spec": {
                    "githubConfigUrl": "https://github.com/acme",
                    "githubConfigSecret": "github-config",
                    "maxRunners": overlay["maxRunners"],
                    "minRunners": overlay["minRunners"],
                    "listenerTemplate": overlay["listenerTemplate"],
                    "template": overlay["template"],
                },
            }
            result = await apply(dyn, ars, namespace, dry_run=True)
            listener = result.spec.listenerTemplate.spec.containers[0]
            assert listener.name == "listener"


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
async def test_overlay_pods_pass_api_validation_and_admission(
    kube_api: client.ApiClient, namespace: str, flavour: str
) -> None:
    """Dry-run creates of the pods the overlay, the hook template and the capacity example
    lead to; the API server validates each fully and resolves its PriorityClass."""
    await apply_ladder(kube_api)
    overlay = values(flavour)

    # The listener pod as ARC builds it: one container named `listener` with ours merged in
    # (ARC's own config volume and env are left out: they do not change validity).
    listener_spec = copy.deepcopy(overlay["listenerTemplate"]["spec"])
    listener_spec["restartPolicy"] = "Never"
    await dry_run_create_pod(kube_api, namespace, as_pod("listener", listener_spec))

    runner_spec = copy.deepcopy(overlay["template"]["spec"])
    await dry_run_create_pod(kube_api, namespace, as_pod("runner", runner_spec))

    workflow_spec = copy.deepcopy(hook_template(flavour)["spec"])
    for container in workflow_spec["containers"]:
        if container["name"] == "$job":  # the hooks put the job's own container here
            container.update(name="job", image=PAUSE_IMAGE)
    await dry_run_create_pod(kube_api, namespace, as_pod("runner-workflow", workflow_spec))

    # Both placeholder halves built by capacity.specs from the example settings.
    settings = load_capacity_settings(
        {"CAPACITY_CONFIG_FILE": str(DEPLOY / "config" / f"capacity-{flavour}.yaml")}
    )
    template = build_template(
        settings,
        scale_set=f"arc-{flavour}",
        runner_namespace=namespace,
        runner_pod_template=overlay["template"],
        owner_uid="00000000-0000-0000-0000-000000000000",  # a dry run: no runner set exists
        owner=None,
    )
    for role in Role:
        pod = placeholder_pod(role, "1", template=template, now=time.time())
        await dry_run_create_pod(kube_api, namespace, pod)


async def test_a_missing_priority_class_is_rejected(
    kube_api: client.ApiClient, namespace: str
) -> None:
    """The admission check above can fail: an unknown class name is refused."""
    await apply_ladder(kube_api)
    spec = copy.deepcopy(values("cpu")["template"]["spec"])
    spec["priorityClassName"] = "arc-runner-typo"
    with pytest.raises(ApiException) as caught:
        await dry_run_create_pod(kube_api, namespace, as_pod("runner", spec))
    assert caught.value.status == 403
    assert "arc-runner-typo" in str(caught.value.body)


# --- 2./3. RBAC, impersonating the listener's ServiceAccount ---------------------------------


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


def our_role() -> dict[str, Any]:
    (role,) = docs(DEPLOY / "rbac" / "role.yaml")
    return role


def bind_to(binding: dict[str, Any], controller_namespace: str) -> dict[str, Any]:
    """The shipped binding with `arc-systems` replaced, as deploy/README.md tells users."""
    binding = copy.deepcopy(binding)
    (subject,) = binding["subjects"]
    assert subject["name"] == f"system:serviceaccounts:{SHIPPED_CONTROLLER_NAMESPACE}"
    subject["name"] = f"system:serviceaccounts:{controller_namespace}"
    return binding


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


def node_checks_rbac(controller_ns: str, suffix: str) -> list[dict[str, Any]]:
    """The node ClusterRole and binding, renamed per test (they are cluster-wide)."""
    role, binding = copy.deepcopy(docs(DEPLOY / "rbac" / "clusterrole-node-checks.yaml"))
    role["metadata"]["name"] += f"-{suffix}"
    binding = bind_to(binding, controller_ns)
    binding["metadata"]["name"] += f"-{suffix}"
    binding["roleRef"]["name"] = role["metadata"]["name"]
    return [role, binding]


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


@pytest.fixture
def controller_namespace(local_cluster: LocalCluster) -> Iterator[str]:
    name = local_cluster.create_namespace("ctl")
    yield name
    local_cluster.delete_namespace(name)


@pytest.fixture
async def listener(
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
        bind_to(docs(DEPLOY / "rbac" / "rolebinding.yaml")[0], controller_namespace),
        *arc_listener_role(set_name, service_account, controller_namespace),
    ]
    node_docs = node_checks_rbac(controller_namespace, suffix)
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
    (cluster_role, _) = docs(DEPLOY / "rbac" / "clusterrole-node-checks.yaml")
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
    cluster_role = docs(DEPLOY / "rbac" / "clusterrole-node-checks.yaml")[0]
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


# --- 4. the live metrics page of the running program -----------------------------------------


async def test_live_metrics_page_exports_the_listed_series_and_every_queried_one(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The listener process, capacity and HUD on, one job run through a warm pair: its page
    has exactly the families of deploy/metrics.txt with their labels, and every series a
    dashboard panel or an alert rule queries."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.deploy_files import (
        DASHBOARD,
        alert_rules,
        analyse,
        dashboard_queries,
        read_metric_list,
    )
    from tests.support.e2e_site import SiteSpec, Stage
    from tests.support.fake_actions import JobState
    from tests.unit.capacity.test_reconciler_metrics import FIRST_WRITTEN_WHEN_USED

    listed = read_metric_list()
    async with Stage(local_cluster, tmp_path / "stage", prefix="metrics") as stage:
        site = await stage.add_site(SiteSpec(name="live", scale_set_id=71))
        listener = site.start_listener(
            capacity=site.capacity_settings(proactive=1, hud=True), max_runners=4
        )
        await site.wait_session()
        await site.wait_for(lambda: site.advertised() == 1, "one warm pair advertised", 60)
        jobs = stage.fake.add_jobs(1, labels=["linux"])
        await site.wait_for(
            lambda: all(j.state is JobState.COMPLETED for j in jobs), "the job to finish", 90
        )

        async def page_with_job_series() -> str | None:
            text = await listener.metrics_text()
            return text if "gha_job_execution_duration_seconds_bucket" in text else None

        text = await eventually(page_with_job_series, "the job's series on the page", 30)

    families = {f.name: f for f in text_string_to_metric_families(text)}
    exported: dict[str, tuple[str, set[str]]] = {}
    samples: set[str] = set()
    for family in families.values():
        if not family.name.startswith("gha_"):
            continue
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        exported[name] = (family.type, labels)
        samples |= {s.name for s in family.samples}

    # Exactly the listed families, each with its type and (where it has samples) labels. As
    # in Go, a vector with extra labels is written once it has a child: those this run does
    # not use (no GitHub demand, no Kubernetes error) may be missing, no other.
    missing = set(listed) - set(exported)
    assert set(exported) <= set(listed), sorted(set(exported) - set(listed))
    assert missing <= FIRST_WRITTEN_WHEN_USED, sorted(missing - FIRST_WRITTEN_WHEN_USED)
    for name, (kind, labels) in exported.items():
        assert kind == listed[name].type, name
        assert not labels or labels == set(listed[name].labels), (name, labels)
    assert not any(name.endswith("_created") for name in samples)

    # Every series the dashboard and the alerts read is a series on this page.
    queried: set[str] = set()
    for _, expr in dashboard_queries(json.loads(DASHBOARD.read_text(encoding="utf-8"))):
        queried |= analyse(expr, listed)[0].series
    for rule in alert_rules():
        queried |= analyse(rule["expr"], listed)[0].series
    page_series = samples | {
        name for name, (kind, _) in exported.items() if kind in ("gauge", "counter")
    }
    # (Those written once used are on the page whenever they have a value to query.)
    unseen = queried - page_series
    assert unseen <= FIRST_WRITTEN_WHEN_USED, sorted(unseen - FIRST_WRITTEN_WHEN_USED)


# --- 5. the least-privilege RBAC printed by `ghalistener rbac` ------------------------------


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
    # ARC names the runner set like the AutoscalingRunnerSet; another scale set's sits next to it.
    ours = await create_runner_set(
        kube_api, namespace, SCALE_SET, runner_pod_spec(namespace, cpu="100m")
    )
    await create_runner_set(kube_api, namespace, "arc-gpu", runner_pod_spec(namespace))
    rbac_api = client.RbacAuthorizationV1Api(kube_api)
    arc_role = await rbac_api.create_namespaced_role(
        namespace, {"metadata": {"name": account}, "rules": []}
    )
    await rbac_api.create_namespaced_role(namespace, {"metadata": {"name": "unrelated"}})
    docs = manifests(
        scale_set=SCALE_SET,
        namespace=namespace,
        runner_group="",
        github_config_url=url,
        controller_namespace=controller_namespace,
    )
    async with dynamic(kube_api, tmp_path) as dyn:
        for body in docs:
            await apply(dyn, body, namespace, dry_run=False)

    pods = Resource.pods(namespace)
    sets = Resource.arc("ephemeralrunnersets", namespace)
    runners = Resource.arc("ephemeralrunners", namespace)
    by_name = {"fieldSelector": f"metadata.name={SCALE_SET}"}
    placeholder = as_pod("ph-1", {"containers": [{"name": "c", "image": PAUSE_IMAGE}]})

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
            "get ARC's listener role": await _status_of(kube.get_role_uid(namespace, account)),
            "list every set": await _status_of(kube.list_objects(sets, lambda o: o)),
            "list another set": await _status_of(
                kube.list_objects(sets, lambda o: o, field_selector="metadata.name=arc-gpu")
            ),
            "get another role": await _status_of(kube.get_role_uid(namespace, "unrelated")),
        }

    allowed = {
        "list pods", "watch pods", "create pod", "delete pod", "list runners", "watch runners",
        "list our set", "watch our set", "get ARC's listener role",
    }  # fmt: skip

    async def as_account(name: str) -> dict[str, int]:
        # The user alone, without the controller namespace's group: only a binding to this
        # exact account can authorise it.
        user = f"system:serviceaccount:{controller_namespace}:{name}"
        async with impersonating(local_cluster, user, "system:authenticated") as api:
            return await calls(Kube(api, request_timeout=15.0), api)

    async def listener_sees_all() -> dict[str, int] | None:
        seen = await as_account(account)
        return seen if all(seen[k] == 200 for k in allowed) else None

    # RBAC changes reach the authorizer through a watch: give it a moment.
    seen = await eventually(listener_sees_all, "the generated RBAC in effect", within=15)
    assert {k for k, status in seen.items() if status == 200} == allowed, seen
    assert {seen[k] for k in set(seen) - allowed} == {403}
    listed, _ = await Kube(kube_api).list_objects(
        sets, lambda o: o["metadata"]["uid"], field_selector=by_name["fieldSelector"]
    )
    assert listed == {SCALE_SET: ours["metadata"]["uid"]}
    assert arc_role.metadata.uid == await Kube(kube_api).get_role_uid(namespace, account)

    stranger = await as_account(f"{SCALE_SET}-00000000-listener")
    assert set(stranger.values()) == {403}, stranger
