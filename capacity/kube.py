"""The one module that talks to Kubernetes (kubernetes-asyncio).

Everything else gets plain dicts and small dataclasses from here. Every call carries a
deadline (``_request_timeout``); kubernetes-asyncio's own default is five minutes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

__all__ = ["Kube", "KubeError", "connect"]

# kubernetes-asyncio logs whole request and response bodies at DEBUG.
logging.getLogger("kubernetes_asyncio").setLevel(logging.INFO)

_MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0 for transport errors)."""

    def __init__(self, action: str, status: int, reason: str) -> None:
        self.action = action
        self.status = status
        self.reason = reason
        super().__init__(f"kubernetes {action} failed: {status} {reason}".strip())


def _error(action: str, exc: ApiException) -> KubeError:
    reason = str(exc.reason or "")
    if exc.status == 403:
        reason = f"forbidden (check the listener's RBAC in deploy/): {reason}"
    return KubeError(action, int(exc.status or 0), reason[:300])


class Kube:
    """Thin, typed wrapper over the API calls this project makes."""

    def __init__(self, api: client.ApiClient, *, request_timeout: float = 15.0) -> None:
        self.api = api
        self.timeout = request_timeout
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

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
        action = f"patch {plural}/{name}{'/' + subresource if subresource else ''}"
        call = (
            self.custom.patch_namespaced_custom_object_status
            if subresource == "status"
            else self.custom.patch_namespaced_custom_object
        )
        try:
            await call(
                group,
                version,
                namespace,
                plural,
                name,
                dict(body),
                _content_type=_MERGE_PATCH,
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _error(action, exc) from exc
        return True


@asynccontextmanager
async def connect(env: Mapping[str, str] | None = None) -> AsyncIterator[Kube]:
    """Connect with ``KUBECONFIG`` if set, else the pod's in-cluster service account."""
    env = os.environ if env is None else env
    configuration = client.Configuration()
    kubeconfig = env.get("KUBECONFIG", "")
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield Kube(api)
