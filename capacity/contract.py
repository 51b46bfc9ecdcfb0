"""The placeholder contract: every label and annotation a placeholder pod carries, the
expiry annotation's format, and the one hash behind hashed names, label values and spec
hashes (docs/capacity-model.md §7).

PURE: no I/O, no clock. Times are epoch seconds passed in.

Why a module of its own rather than the writer (``capacity.specs``) or the reader
(``capacity.pods``, the view's selectors): the contract is between them *and between
versions*. A listener adopts the placeholders an earlier listener left behind only when it
finds them with these selectors, reads these annotations and computes the same spec hash, so
nothing here may change its value from one release to the next (the values are pinned by
tests/unit/capacity/test_contract.py). Kept apart, a change to the contract is a change to
this file, visible as such in review, and neither side reaches into the other for it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

# --- labels and annotations ---------------------------------------------------------------

LABEL_PREFIX = "capacity-listener.dev/"
LABEL_SCALE_SET = LABEL_PREFIX + "scale-set"  # label_value(scale set name)
LABEL_SLOT = LABEL_PREFIX + "slot"  # the pair's slot id, shared by its two halves
LABEL_ROLE = LABEL_PREFIX + "role"  # a capacity.model.Role value
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "capacity-listener"
# Label values are capped at 63 characters, so the untruncated scale-set name is also kept in
# an annotation for people reading the pod.
ANNOTATION_SCALE_SET = LABEL_PREFIX + "scale-set"
ANNOTATION_EXPIRES_AT = LABEL_PREFIX + "expires-at"  # format_expiry
# The EphemeralRunnerSet uid the placeholder was made for: ownership without an
# ownerReference (in another namespace, or when the listener's Role is the reference).
ANNOTATION_OWNER_UID = LABEL_PREFIX + "owner-uid"
# fingerprint(pod spec): a placeholder made from other settings or another runner pod
# template is not adopted.
ANNOTATION_SPEC_HASH = LABEL_PREFIX + "spec-hash"
# cluster-autoscaler refuses to drain a node holding a pod whose ownerReference lacks
# `controller: true` ("not replicated"), and placeholders are owned that way (the runner set
# owns them, no controller recreates them). Without this annotation every node that ever held
# a placeholder would stay forever on cluster-autoscaler. With it, CA may evict a placeholder
# to remove an under-used node; the monitor sees the broken pair and makes it again wherever
# the scheduler confirms room. Only placeholders carry it: a runner or workflow pod holds a
# job, and evicting it kills the job (docs/capacity-model.md, "On cluster-autoscaler").
ANNOTATION_SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SAFE_TO_EVICT_VALUE = "true"

MAX_LABEL_VALUE = 63

# --- the one hash -------------------------------------------------------------------------

# Each use keeps its own length: changing one renames pods, relabels them or changes every
# spec hash, and the placeholders already running are then neither found nor adopted.
LABEL_HASH_LEN = 10  # label_value of a long name
NAME_HASH_LEN = 8  # capacity.specs.pod_name of a long or unusual name
SPEC_HASH_LEN = 16  # fingerprint


def short_hash(text: str, length: int) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fingerprint(value: Mapping[str, Any]) -> str:
    """A short, stable hash of a pod spec (or any JSON-like mapping; key order does not
    matter). The spec-hash annotation's value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return short_hash(text, SPEC_HASH_LEN)


def label_value(text: str) -> str:
    """``text`` as a valid Kubernetes label value: unchanged when it fits in 63 characters,
    otherwise a prefix plus a short hash of the whole text, so two long names that share a
    prefix still get different values. The result is deterministic."""
    if len(text) <= MAX_LABEL_VALUE:
        return text
    head = text[: MAX_LABEL_VALUE - LABEL_HASH_LEN - 1].rstrip("-_.")
    return f"{head}-{short_hash(text, LABEL_HASH_LEN)}"


def placeholder_selector(scale_set: str) -> str:
    """The label selector that matches every placeholder of one scale set."""
    return f"{LABEL_SCALE_SET}={label_value(scale_set)},{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"


# --- the expiry annotation ----------------------------------------------------------------


def format_expiry(epoch: float) -> str:
    """The expiry annotation's value: RFC 3339 in UTC, whole seconds (rounded up)."""
    return datetime.fromtimestamp(math.ceil(epoch), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_expiry(value: object) -> float:
    """An expiry annotation (RFC 3339, or epoch seconds) as epoch seconds; 0.0 when absent or
    unreadable, so the policy deletes the pod as expired rather than keep it. Kubernetes'
    own metadata timestamps have the same form and are read with it too."""
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return 0.0
