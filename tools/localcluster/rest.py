"""A small synchronous Kubernetes REST client for the harness itself.

The harness runs before any event loop exists (session fixtures, the CLI), so it speaks plain
HTTP with httpx. Tests use kubernetes_asyncio; this is only for bring-up and fixtures.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from tools.waits import eventually_sync

T = TypeVar("T")


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class KubeconfigError(ValueError):
    pass


# What a periodic sampler may treat as one missed sample: an error answer, or a connection the
# API server dropped or refused (it does under load; httpx's errors are not OSErrors).
TRANSIENT: tuple[type[Exception], ...] = (KubeError, OSError, httpx.TransportError)


def wait_for(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """``eventually_sync`` for the harness: this client's errors count as "not yet" (an API
    server coming up refuses, then answers 500s); raises ``WaitFailed`` naming ``what``."""
    return eventually_sync(check, what, timeout, ignore=(httpx.HTTPError, KubeError))


def _current(cfg: Mapping[str, Any], kind: str, name: str) -> Mapping[str, Any]:
    for item in cfg.get(f"{kind}s") or []:
        if item.get("name") == name:
            return item.get(kind) or {}
    raise KubeconfigError(f"kubeconfig: no {kind} named {name!r}")


class KubeREST:
    """Authenticated access to one API server, from the current context of a kubeconfig."""

    def __init__(self, kubeconfig: Path, timeout: float = 10.0) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text()) or {}
        ctx_name = cfg.get("current-context")
        if not ctx_name:
            raise KubeconfigError(f"kubeconfig {kubeconfig}: no current-context")
        ctx = _current(cfg, "context", ctx_name)
        cluster = _current(cfg, "cluster", ctx.get("cluster", ""))
        user = _current(cfg, "user", ctx.get("user", ""))
        self.server = str(cluster.get("server", "")).rstrip("/")
        if not self.server:
            raise KubeconfigError(f"kubeconfig {kubeconfig}: cluster has no server")
        self._tmp = tempfile.TemporaryDirectory(prefix="localcluster-rest-")
        verify: bool | str = True
        if cluster.get("insecure-skip-tls-verify"):
            verify = False
        else:
            verify = self._file(cluster, "certificate-authority", kubeconfig.parent) or True
        headers = {}
        if user.get("token"):
            headers["Authorization"] = f"Bearer {user['token']}"
        cert = None
        cert_file = self._file(user, "client-certificate", kubeconfig.parent)
        key_file = self._file(user, "client-key", kubeconfig.parent)
        if cert_file and key_file:
            cert = (cert_file, key_file)
        if not headers and cert is None:
            raise KubeconfigError(
                f"kubeconfig {kubeconfig}: user needs a token or a client certificate"
            )
        self._client = httpx.Client(
            base_url=self.server, headers=headers, verify=verify, cert=cert, timeout=timeout
        )

    def _file(self, section: Mapping[str, Any], key: str, base: Path) -> str | None:
        if section.get(f"{key}-data"):
            path = Path(self._tmp.name) / key
            path.write_bytes(base64.b64decode(section[f"{key}-data"]))
            return str(path)
        if section.get(key):
            return str(base / section[key])
        return None

    def close(self) -> None:
        self._client.close()
        self._tmp.cleanup()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        headers = {"Content-Type": content_type} if body is not None else {}
        resp = self._client.request(method, path, json=body, headers=headers, params=params)
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            raise KubeError(resp.status_code, f"{method} {path}: {message}")
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True
