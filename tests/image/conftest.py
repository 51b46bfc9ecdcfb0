"""Fixtures for the image tier: the repository's Dockerfile built with buildah on a Debian
stand-in for its base (tools/image.py), then run as the image's user.

Building needs root, ``buildah`` and ``mmdebstrap`` (.ci/run installs them). Without them the
tier is skipped on a developer machine and fails in CI (``CI`` set), like the promtool test.
The live test also uses the e2e tier's local control plane and fakes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import local_cluster, stage
from tests.support.image_listener import ImageListenerProcess
from tests.support.marks import mark_tier
from tools.image import Built, Container, ImageError, build_image, missing_tools

__all__ = ["local_cluster", "stage"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, __file__, pytest.mark.image)


def unavailable() -> str | None:
    missing = missing_tools()
    if missing:
        return f"image tier needs {', '.join(missing)} (apt-get install {' '.join(missing)})"
    if os.geteuid() != 0:
        return "image tier needs root (buildah --isolation chroot, mmdebstrap, remounts)"
    return None


@pytest.fixture(scope="session")
def built() -> Built:
    reason = unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        return build_image()
    except ImageError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def container(built: Built) -> Iterator[Container]:
    """A fresh working container of the image, root file system writable."""
    with Container(built.name) as working:
        yield working


@pytest.fixture
def read_only_container(built: Built) -> Iterator[Container]:
    """A fresh working container of the image with a read-only root file system."""
    with Container(
        built.name, read_only=True, mount_points=ImageListenerProcess.MOUNT_POINTS
    ) as working:
        yield working
