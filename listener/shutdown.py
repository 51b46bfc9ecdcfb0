"""How the shutdown work shares the time the pod has between SIGTERM and SIGKILL (PURE).

The kubelet kills the container ``terminationGracePeriodSeconds`` after SIGTERM; ARC's pod
merge leaves that at Kubernetes' default (30 s) unless the listener template sets it. The
listener cannot read its own pod spec without more RBAC, so the grace is a setting
(``LISTENER_SHUTDOWN_GRACE``, to match the pod's value; the Helm overlays set both).

From the moment ``stop`` is set, the work runs in this order and each step gets what is left:

1. the placeholder clean-up (capacity monitor), at most half of the grace and at most
   ``PLACEHOLDER_CAP`` seconds, in parallel with the loop finishing its message and the HTTP
   servers closing (5 s);
2. the session DELETE: the rest, less a safety margin for the process to exit. Without it the
   next pod meets a session conflict (409) until the service expires the session.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_GRACE = 30.0  # Kubernetes' default terminationGracePeriodSeconds
PLACEHOLDER_CAP = 10.0
SESSION_DELETE_CAP = 30.0  # longer than the retry schedule (1+2+4+8 s) plus a token refresh
MARGIN = 2.0  # left for the process to log and exit after the last step


@dataclass
class ShutdownBudget:
    """Seconds left for each shutdown step, counted from :meth:`begin`."""

    grace: float = DEFAULT_GRACE
    started: float | None = None

    @property
    def usable(self) -> float:
        return max(0.0, self.grace - MARGIN)

    def begin(self, now: float) -> None:
        """The stop began at ``now`` (the first call counts)."""
        if self.started is None:
            self.started = now

    def remaining(self, now: float) -> float:
        if self.started is None:
            return self.usable
        return max(0.0, self.started + self.usable - now)

    def placeholders(self, now: float) -> float:
        """Budget for deleting placeholders: at most half the grace, at most the cap."""
        return min(PLACEHOLDER_CAP, self.usable / 2, self.remaining(now))

    def session_delete(self, now: float) -> float:
        """Budget for the session DELETE: whatever is left, at most its cap."""
        return min(SESSION_DELETE_CAP, self.remaining(now))
