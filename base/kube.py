"""The one module that talks to Kubernetes (kubernetes-asyncio).

Everything else gets plain values from here: the caller passes a *projection* that turns a
raw object (a JSON dict) into the few fields it keeps, so neither kubernetes models nor whole
objects stay in memory. Requests go through ``ApiClient.call_api`` with
``_preload_content=False``: bodies are read as bytes and parsed once, watch streams line by
line.

Every call carries a deadline (``_request_timeout``; kubernetes-asyncio's own default is five
minutes, and none at all for a stream). A watch asks the server to end it after
``timeoutSeconds`` and the client gives up a little later.

Retries: single calls are not retried here (the reconciler's next pass is the retry; the
listener's patches are retried by ``listener.scaler``, which reads ``KubeError.retry_after``).
The list+watch loop is the one place that reconnects, because a watch is a long-lived
subscription: it re-watches from the last resourceVersion when a stream ends, relists on
410 Gone, and backs off while the apiserver is unreachable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import aiohttp

from base import deferred
from base.arc import ARC_GROUP, ARC_VERSION
from base.backoff import Backoff, half_jitter

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

log = logging.getLogger("base.kube")

# kubernetes-asyncio logs whole request and response bodies at DEBUG.
logging.getLogger("kubernetes_asyncio").setLevel(logging.INFO)

_MERGE_PATCH = "application/merge-patch+json"

T = TypeVar("T")
Json = dict[str, Any]
Projection = Callable[[Json], T | None]


# --- errors -------------------------------------------------------------------------------


class KubeErrorKind(StrEnum):
    """What kind of failure a KubeError is (also a metrics label)."""

    TRANSPORT = "transport"  # no HTTP answer: connection refused/reset, client deadline
    FORBIDDEN = "forbidden"  # 403: RBAC
    QUOTA = "quota"  # 403 "exceeded quota" (ResourceQuota admission)
    INVALID = "invalid"  # 422: the object was rejected (a bad manifest or setting)
    CONFLICT = "conflict"  # 409 other than AlreadyExists (e.g. a failed uid precondition)
    GONE = "gone"  # 410: resourceVersion too old
    THROTTLED = "throttled"  # 429
    SERVER = "server"  # 5xx
    OTHER = "other"


class KubeError(Exception):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0 for transport errors).

    The message is one line: the action, the status and the server's reason."""

    def __init__(
        self,
        action: str,
        status: int,
        reason: str,
        *,
        quota: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.action = action
        self.status = status
        self.reason = reason
        self.kind = _kind(status, quota)
        # Seconds the apiserver asked us to wait (Retry-After on a 429 or 5xx), if it did.
        self.retry_after = retry_after
        super().__init__(f"kubernetes {action} failed: {status} {reason}".strip())


def _kind(status: int, quota: bool) -> KubeErrorKind:
    if status == 0:
        return KubeErrorKind.TRANSPORT
    if quota:
        return KubeErrorKind.QUOTA
    return {
        403: KubeErrorKind.FORBIDDEN,
        409: KubeErrorKind.CONFLICT,
        410: KubeErrorKind.GONE,
        422: KubeErrorKind.INVALID,
        429: KubeErrorKind.THROTTLED,
    }.get(status, KubeErrorKind.SERVER if status >= 500 else KubeErrorKind.OTHER)


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def _retry_after(status: int, value: str | None) -> float | None:
    """``Retry-After`` in seconds, read as client-go does: only on 429 and 5xx, whole seconds."""
    if value is None or not (status == 429 or status >= 500):
        return None
    value = value.strip()
    return float(value) if value.isdigit() else None


def _status_error(
    action: str, status: int, body: bytes, rbac: str, retry_after: str | None = None
) -> KubeError:
    """A KubeError from an error response (a ``Status`` object, or anything else)."""
    reason, message = "", ""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            reason = str(doc.get("reason") or "")
            message = str(doc.get("message") or "")
    except ValueError:
        message = body[:200].decode("utf-8", "replace")
    quota = status == 403 and "exceeded quota" in message
    text = f"{reason}: {message}" if reason and message else reason or message
    if status == 403 and not quota:
        # Name the exact permission, so the fix is obvious from one log line.
        text = f"{text} (the listener's RBAC needs {rbac}; see deploy/)"
    return KubeError(
        action, status, _one_line(text), quota=quota, retry_after=_retry_after(status, retry_after)
    )


def _transport(action: str, exc: BaseException) -> KubeError:
    if isinstance(exc, TimeoutError):
        return KubeError(action, 0, "deadline exceeded")
    return KubeError(action, 0, _one_line(f"{type(exc).__name__}: {exc}"))


_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


# --- list+watch events --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resource:
    """A collection: ``path`` is its URL path, ``plural`` names it in messages and RBAC
    hints; ``namespace`` is empty for a cluster-scoped one."""

    path: str
    plural: str
    namespace: str

    @classmethod
    def pods(cls, namespace: str) -> Resource:
        return cls(f"/api/v1/namespaces/{namespace}/pods", "pods", namespace)

    @classmethod
    def configmaps(cls, namespace: str) -> Resource:
        return cls(f"/api/v1/namespaces/{namespace}/configmaps", "configmaps", namespace)

    @classmethod
    def arc(cls, plural: str, namespace: str) -> Resource:
        """An ARC custom resource (ephemeralrunners, ephemeralrunnersets)."""
        return cls(
            f"/apis/{ARC_GROUP}/{ARC_VERSION}/namespaces/{namespace}/{plural}", plural, namespace
        )

    @classmethod
    def cluster(cls, group: str, version: str, plural: str) -> Resource:
        """A cluster-scoped custom resource (e.g. Karpenter's nodepools)."""
        return cls(f"/apis/{group}/{version}/{plural}", f"{plural}.{group}", "")

    def rbac(self, verb: str) -> str:
        if not self.namespace:
            return f"'{verb}' on {self.plural} (a ClusterRole)"
        return f"'{verb}' on {self.plural} in namespace {self.namespace}"


@dataclass(frozen=True, slots=True)
class Reset(Generic[T]):
    """A complete (re)list: the cache is exactly ``items`` (name → projection) now."""

    items: dict[str, T]


@dataclass(frozen=True, slots=True)
class Upserted(Generic[T]):
    name: str
    item: T


@dataclass(frozen=True, slots=True)
class Removed:
    name: str


@dataclass(frozen=True, slots=True)
class Failed:
    """The list or watch failed; the loop retries after ``retry_in`` seconds by itself."""

    error: KubeError
    retry_in: float


WatchEvent = Reset[T] | Upserted[T] | Removed | Failed


class _Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


# --- the client ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeTaint:
    """One of a node's taints (``spec.taints[]``)."""

    key: str
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as node checks see it: cordoned or not, and its taints."""

    name: str
    unschedulable: bool
    taints: tuple[NodeTaint, ...] = ()


class Kube:
    """Thin, typed wrapper over the API calls this project makes.

    ``requests`` counts every request sent, by ``"<verb> <plural>"`` (for benchmarks and
    debugging; watches count once per stream opened)."""

    def __init__(
        self,
        api: ApiClient,
        *,
        request_timeout: float = 15.0,
        watch_timeout: tuple[int, int] = (240, 360),
        list_page: int = 100,
        watch_retry: tuple[float, float] = (0.5, 8.0),
    ) -> None:
        self.api = api
        self.timeout = request_timeout
        # The server ends each watch after a random time in this range (client-go does the
        # same) so many listeners do not all reconnect at once.
        self.watch_timeout = watch_timeout
        # Small pages: a parsed page is garbage right after projection, but the allocator
        # keeps its high-water mark (measured: 2,000 pods cost +28 MiB RSS with 500 per
        # page, +12 MiB with 100). A relist is rare; a few more requests are cheap.
        self.list_page = list_page
        # A failed stream's retry delay: exponential from the first to the cap, half-jittered.
        self.watch_retry = watch_retry
        self.requests: Counter[str] = Counter()
        # Streams waiting out a retry delay after the apiserver did not answer; woken when any
        # other request of this client succeeds (see _wait_to_retry). Replaced on every wake.
        self._answered = asyncio.Event()
        self._retrying = 0

    # --- raw requests ---------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        action: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        deadline: float | aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request; the caller reads (and releases) the response."""
        self.requests[action] += 1
        try:
            resp: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=deadline if deadline is not None else self.timeout,
            )
        except _TRANSPORT_ERRORS as exc:
            raise _transport(action, exc) from exc
        return resp

    async def _call(
        self,
        method: str,
        path: str,
        *,
        action: str,
        rbac: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        ok_statuses: frozenset[int] = frozenset(),
    ) -> tuple[int, bytes]:
        """One request with a deadline; ``(status, body)`` for 2xx and ``ok_statuses``,
        KubeError otherwise."""
        resp = await self._send(
            method, path, action=action, query=query, body=body, content_type=content_type
        )
        try:
            data = await resp.read()
        except _TRANSPORT_ERRORS as exc:
            raise _transport(action, exc) from exc
        finally:
            resp.release()
        if 200 <= resp.status < 300 or resp.status in ok_statuses:
            self._apiserver_answered()
            return resp.status, data
        raise _status_error(action, resp.status, data, rbac, resp.headers.get("Retry-After"))

    # --- single objects -------------------------------------------------------------------

    async def merge_patch(
        self,
        *,
        group: str,
        version: str,
        plural: str,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        subresource: str = "",
    ) -> bool:
        """JSON-merge-patch a namespaced custom object; ``False`` if it does not exist."""
        path = f"/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}"
        target = f"{plural}/{subresource}" if subresource else plural
        status, _ = await self._call(
            "PATCH",
            f"{path}/{subresource}" if subresource else path,
            action=f"patch {target}",
            rbac=f"'patch' on {target} in namespace {namespace}",
            body=dict(body),
            content_type=_MERGE_PATCH,
            ok_statuses=frozenset({404}),
        )
        return status != 404

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> bool:
        """Create a pod. ``True`` if created, ``False`` if one with that name already exists
        (the outcome wanted either way; the caller's watch shows which pod it is)."""
        name = str(manifest.get("metadata", {}).get("name", ""))
        res = Resource.pods(namespace)
        status, _ = await self._call(
            "POST",
            res.path,
            action="create pods",
            rbac=res.rbac("create"),
            body=dict(manifest),
            ok_statuses=frozenset({409}),
        )
        if status == 409:
            log.debug("pod already exists", extra={"pod": name})
            return False
        return True

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> bool:
        """Delete a pod at once (grace period 0). ``False`` if it was already gone, or (with
        ``uid``) if the pod of that name is now a different one, which is then left alone."""
        res = Resource.pods(namespace)
        options: Json = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        if uid:
            options["preconditions"] = {"uid": uid}
        status, _ = await self._call(
            "DELETE",
            f"{res.path}/{name}",
            action="delete pods",
            rbac=res.rbac("delete"),
            body=options,
            ok_statuses=frozenset({404, 409}) if uid else frozenset({404}),
        )
        return 200 <= status < 300

    async def get_role_uid(self, namespace: str, name: str) -> str | None:
        """The uid of Role ``name`` (ARC's listener Role), or None if it does not exist."""
        status, data = await self._call(
            "GET",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{name}",
            action="get roles",
            rbac=f"'get' on roles in namespace {namespace}",
            ok_statuses=frozenset({404}),
        )
        if status == 404:
            return None
        return str((json.loads(data).get("metadata") or {}).get("uid") or "") or None

    async def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's ``data``, or None if it does not exist."""
        status, data = await self._call(
            "GET",
            f"/api/v1/namespaces/{namespace}/configmaps/{name}",
            action="get configmaps",
            rbac=f"'get' on configmaps in namespace {namespace}",
            ok_statuses=frozenset({404}),
        )
        if status == 404:
            return None
        found = json.loads(data).get("data") or {}
        return {str(k): str(v) for k, v in found.items()}

    async def patch_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> bool:
        """Merge ``data`` into a ConfigMap's data; ``False`` if it does not exist."""
        status, _ = await self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/configmaps/{name}",
            action="patch configmaps",
            rbac=f"'patch' on configmaps in namespace {namespace}",
            body={"data": dict(data)},
            content_type=_MERGE_PATCH,
            ok_statuses=frozenset({404}),
        )
        return status != 404

    async def create_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], labels: Mapping[str, str]
    ) -> bool:
        """Create a ConfigMap; ``False`` if one of that name exists already."""
        manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "data": dict(data),
        }
        status, _ = await self._call(
            "POST",
            f"/api/v1/namespaces/{namespace}/configmaps",
            action="create configmaps",
            rbac=f"'create' on configmaps in namespace {namespace}",
            body=manifest,
            ok_statuses=frozenset({409}),
        )
        return status != 409

    async def get_node(self, name: str) -> NodeState | None:
        """A node's schedulability, or None if it does not exist."""
        status, data = await self._call(
            "GET",
            f"/api/v1/nodes/{name}",
            action="get nodes",
            rbac="'get' on nodes (a ClusterRole)",
            ok_statuses=frozenset({404}),
        )
        if status == 404:
            return None
        node = json.loads(data)
        spec = node.get("spec") or {}
        return NodeState(
            name=name,
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(
                NodeTaint(
                    key=str(t.get("key") or ""),
                    value=str(t.get("value") or ""),
                    effect=str(t.get("effect") or ""),
                )
                for t in spec.get("taints") or ()
                if isinstance(t, dict)
            ),
        )

    # --- list and watch -------------------------------------------------------------------

    async def list_objects(
        self,
        resource: Resource,
        project: Projection[T],
        *,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str = "",
    ) -> tuple[dict[str, T], str]:
        """Every matching object (projected; None projections are skipped) and the list's
        resourceVersion. Paginated, so a large collection never sits in memory as one body.

        Without ``resource_version`` the list is a consistent read (what etcd holds now).
        With it, the collection exactly as it was at that revision: lists of several
        collections at the revision of the first form one snapshot, which separate watches
        do not (each delivers its own events in order, but not in order with the others)."""
        items: dict[str, T] = {}
        query = _selectors(label_selector, field_selector)
        query["limit"] = str(self.list_page)
        if resource_version:
            query["resourceVersion"] = resource_version
            query["resourceVersionMatch"] = "Exact"
        cont = ""
        while True:
            page = dict(query)
            if cont:
                # The token carries the first page's revision; the API refuses both.
                page.pop("resourceVersion", None)
                page.pop("resourceVersionMatch", None)
                page["continue"] = cont
            _, data = await self._call(
                "GET",
                resource.path,
                action=f"list {resource.plural}",
                rbac=resource.rbac("list"),
                query=page,
            )
            doc = json.loads(data)
            del data
            for obj in doc.get("items") or ():
                kept = project(obj)
                if kept is not None:
                    items[str(obj["metadata"]["name"])] = kept
            meta = doc.get("metadata") or {}
            cont = str(meta.get("continue") or "")
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    async def informer(
        self,
        resource: Resource,
        project: Projection[T],
        *,
        label_selector: str = "",
        field_selector: str = "",
        since: str = "",
    ) -> AsyncIterator[WatchEvent[T]]:
        """List, then watch, forever: yields Reset after every (re)list, then Upserted and
        Removed for each change. A projection of None counts as "not ours" (Removed).
        Failures are yielded as Failed and retried here with backoff; cancel the consumer's
        task to stop. ``since`` starts with a watch from that resourceVersion instead of a
        list (for a caller that already holds a list)."""
        # Jittered so the watches of many listeners do not reconnect to a recovering
        # apiserver at the same instant; reset by every sign of a working stream.
        backoff = Backoff(base=self.watch_retry[0], cap=self.watch_retry[1], jitter=half_jitter)
        # At most one retry cut short per run of failures: an apiserver that answers some
        # requests and not others is overloaded, and the back-off is what spares it.
        cut_short = False
        version = since
        while True:
            try:
                if not version:
                    items, version = await self.list_objects(
                        resource,
                        project,
                        label_selector=label_selector,
                        field_selector=field_selector,
                    )
                    yield Reset(items)
                    backoff.reset()
                    cut_short = False
                async for event in self._watch(
                    resource, project, version, label_selector, field_selector
                ):
                    if isinstance(event, str):  # a newer resourceVersion (bookmark or event)
                        version = event
                        backoff.reset()
                        cut_short = False
                    else:
                        yield event
            except _Gone:
                log.info("watch expired, relisting", extra={"resource": resource.plural})
                version = ""
                # A relist right away is what 410 asks for; back off only if it repeats.
                if backoff.failures:
                    await asyncio.sleep(backoff.next())
                else:
                    backoff.failures += 1
            except KubeError as exc:
                if exc.kind == KubeErrorKind.GONE:  # a list's continue token expired
                    version = ""
                delay = backoff.next()
                yield Failed(exc, delay)
                early = _unanswered(exc) and not cut_short
                cut_short = await self._wait_to_retry(delay, early=early) or cut_short
            except Exception as exc:  # a body it cannot read: never end the subscription
                log.exception("watch stream unreadable", extra={"resource": resource.plural})
                version = ""  # start clean: relist
                delay = backoff.next()
                action = f"watch {resource.plural}"
                yield Failed(KubeError(action, 0, _one_line(f"{type(exc).__name__}: {exc}")), delay)
                await asyncio.sleep(delay)

    async def _wait_to_retry(self, delay: float, *, early: bool) -> bool:
        """Wait out a stream's retry delay; True if it was cut short. With ``early`` (the
        apiserver did not answer, or answered 5xx: down or starting), the wait ends
        as soon as another request of this client succeeds (a 2xx, or a watch opened): the
        apiserver is back, and a stream that slept on would keep a stale cache for up to the
        back-off's cap (the view would count pods that are gone). Refusals (RBAC, throttling,
        a bad request) wait their whole delay: others succeeding says nothing about them."""
        if not early:
            await asyncio.sleep(delay)
            return False
        answered = self._answered
        self._retrying += 1
        try:
            async with asyncio.timeout(delay):
                await answered.wait()
        except TimeoutError:
            return False
        finally:
            self._retrying -= 1
        return True

    def _apiserver_answered(self) -> None:
        if self._retrying:
            woken, self._answered = self._answered, asyncio.Event()
            woken.set()

    async def _watch(
        self,
        resource: Resource,
        project: Projection[T],
        version: str,
        label_selector: str,
        field_selector: str,
    ) -> AsyncIterator[WatchEvent[T] | str]:
        """One watch stream from ``version``. Yields events, and the resourceVersion (a str)
        after each one. Returns when the server ends the stream; raises _Gone on 410."""
        server_timeout = random.randint(*self.watch_timeout)
        query = _selectors(label_selector, field_selector)
        query.update(
            watch="true",
            resourceVersion=version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(server_timeout),
        )
        action = f"watch {resource.plural}"
        deadline = aiohttp.ClientTimeout(total=server_timeout + 30, sock_connect=10)
        resp = await self._send("GET", resource.path, action=action, query=query, deadline=deadline)
        try:
            if resp.status == 410:
                raise _Gone()
            if resp.status != 200:
                try:
                    body = await resp.read()
                except _TRANSPORT_ERRORS:
                    body = b""
                raise _status_error(
                    action,
                    resp.status,
                    body,
                    resource.rbac("watch"),
                    resp.headers.get("Retry-After"),
                )
            self._apiserver_answered()
            while True:
                try:
                    line = await resp.content.readline()
                except _TRANSPORT_ERRORS as exc:
                    raise _transport(action, exc) from exc
                if not line:
                    return  # the server ended the stream (timeoutSeconds) or went away
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise KubeError(action, 0, "unreadable watch event") from exc
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 0)
                    if code == 410:
                        raise _Gone()
                    raise _status_error(action, code, line, resource.rbac("watch"))
                meta = obj.get("metadata") or {}
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    name = str(meta.get("name") or "")
                    kept = project(obj) if kind != "DELETED" else None
                    yield Removed(name) if kept is None else Upserted(name, kept)
                rv = meta.get("resourceVersion")
                if rv:
                    yield str(rv)
        finally:
            resp.close()  # an unfinished stream must not go back to the pool


def _unanswered(exc: KubeError) -> bool:
    """A failure that says the apiserver was not there or not ready, not that it refused. A
    starting apiserver answers 503 with Retry-After ("before all known HTTP paths have been
    installed") until it is ready; another request succeeding says it is."""
    return exc.kind in (KubeErrorKind.TRANSPORT, KubeErrorKind.SERVER)


def _selectors(label_selector: str, field_selector: str) -> dict[str, str]:
    query: dict[str, str] = {}
    if label_selector:
        query["labelSelector"] = label_selector
    if field_selector:
        query["fieldSelector"] = field_selector
    return query


@asynccontextmanager
async def connect(env: Mapping[str, str] | None = None) -> AsyncIterator[Kube]:
    """Connect with ``KUBECONFIG`` if set, else the pod's in-cluster service account."""
    env = os.environ if env is None else env
    api_client, configuration_class = _client_classes()
    configuration = configuration_class()
    kubeconfig = env.get("KUBECONFIG", "")
    if kubeconfig:
        await _config_loader(kubeconfig=True)(
            config_file=kubeconfig, client_configuration=configuration
        )
    else:
        _config_loader(kubeconfig=False)(client_configuration=configuration)
    async with api_client(configuration) as api:
        yield Kube(api)


def _client_classes() -> tuple[type[ApiClient], Any]:
    """``ApiClient`` and ``Configuration`` without the package roots' ``__init__`` (every
    generated API and model class, ~31 MiB of RSS; this module sends raw requests and parses
    JSON itself, so it needs none of them)."""
    package = deferred.defer_init("kubernetes_asyncio", "kubernetes_asyncio.client")
    deferred.defer_init("kubernetes_asyncio.client.models")  # api_client imports it
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

    # The config loaders import these two names from the package; a deferred package would
    # run its __init__ to find them.
    vars(package).setdefault("ApiClient", ApiClient)
    vars(package).setdefault("Configuration", Configuration)
    return ApiClient, Configuration


def _config_loader(*, kubeconfig: bool) -> Any:
    """The one config loader in use: in a pod, the in-cluster one, without the kubeconfig
    loader's yaml and exec/OIDC helpers (~1 MiB), which the package's ``__init__`` imports."""
    _client_classes()
    deferred.defer_init("kubernetes_asyncio.config")
    if kubeconfig:
        from kubernetes_asyncio.config.kube_config import load_kube_config

        return load_kube_config
    from kubernetes_asyncio.config.incluster_config import load_incluster_config

    return load_incluster_config
