"""ARC's config.json for the listener, as tests write it."""

from __future__ import annotations

from typing import Any


def scale_set_config(**fields: Any) -> dict[str, Any]:
    """The keys one scale set needs, without credentials (the caller adds ``github_token``
    or a vault), with ``fields`` laid over them."""
    return {
        "configure_url": "https://github.com/acme",
        "ephemeral_runner_set_namespace": "arc-runners",
        "ephemeral_runner_set_name": "linux-abcde",
        "max_runners": 5,
        "min_runners": 0,
        "runner_scale_set_id": 7,
        "log_level": "info",
        "log_format": "text",
        **fields,
    }
