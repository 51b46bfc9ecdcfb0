"""What the reconciler has sent but the watch has not shown yet.

After a create or delete is sent, the watch may take a moment to show it. Until
it does (or ``expectation_ttl`` passes), the pass plans on the view *plus* what it expects:
a pod it created counts as a Pending placeholder, a pod it deleted as terminating. So the next
pass neither repeats the create nor counts capacity that is going away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from capacity.model import Observed, Placeholder, PodPhase, Role


@dataclass
class Expectations:
    """Creates and deletes sent but not yet seen through the watch."""

    ttl: float = 60.0
    creates: dict[str, Placeholder] = field(default_factory=dict)
    deletes: dict[str, float] = field(default_factory=dict)

    def expect_create(self, name: str, slot: str, role: Role, now: float, expires: float) -> None:
        self.creates[name] = Placeholder(
            name=name,
            slot=slot,
            role=role,
            phase=PodPhase.PENDING,
            created_at=now,
            expires_at=expires,
        )

    def expect_delete(self, name: str, now: float) -> None:
        self.creates.pop(name, None)
        self.deletes[name] = now

    def forget(self, name: str) -> None:
        self.creates.pop(name, None)
        self.deletes.pop(name, None)

    def settle(self, seen: Mapping[str, Placeholder], now: float) -> None:
        """Drop what the watch now shows, and whatever has waited longer than the TTL (then
        the watch is trusted again)."""
        for name, expected in list(self.creates.items()):
            if name in seen or now - expected.created_at > self.ttl:
                del self.creates[name]
        for name, sent in list(self.deletes.items()):
            pod = seen.get(name)
            if pod is None or pod.terminating or now - sent > self.ttl:
                del self.deletes[name]

    def overlay(self, observed: Observed) -> Observed:
        """The snapshot as it will be once the watch catches up."""
        if not self.creates and not self.deletes:
            return observed
        names = {p.name for p in observed.placeholders}
        placeholders = [
            replace(p, terminating=True) if p.name in self.deletes and not p.terminating else p
            for p in observed.placeholders
        ]
        placeholders.extend(p for n, p in self.creates.items() if n not in names)
        return replace(observed, placeholders=tuple(placeholders))

    def names(self) -> set[str]:
        return set(self.creates) | set(self.deletes)
