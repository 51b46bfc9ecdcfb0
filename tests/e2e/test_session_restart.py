"""A listener killed without deleting its session (SIGKILL, node loss) and started again: the
new one meets 409s until the service expires the old session, then gets its own — on a
schedule that follows the old session's lease (docs/wire-protocol.md §3).

Prints, as JSON, how long after the old session's expiry the new session was created
(``late_s``; the fake expires a session ``session_expiry`` seconds after it last heard from
it) and how many session creates were answered 409. The figures are printed, not asserted:
the test checks what must hold whatever the timing.
"""

from __future__ import annotations

import json
import time

from tools.e2e_site import SiteSpec, Stage

LEASE = 30.0


async def test_a_restarted_listener_gets_its_session_after_the_old_one_expires(
    stage: Stage,
) -> None:
    fake = stage.fake
    fake.session_expiry = LEASE
    site = await stage.add_site(SiteSpec(name="restart", scale_set_id=41))
    env = {"LISTENER_SESSION_LEASE": f"{LEASE:g}"}
    first = site.start_listener(capacity=None, max_runners=3, env=env)
    await site.wait_session()
    old = fake.session(site.scale_set_id)
    assert old is not None

    first.kill()  # SIGKILL: no session DELETE
    killed_at = time.monotonic()
    second = site.start_listener(capacity=None, max_runners=3, env=env)

    def replaced() -> bool:
        live = fake.session(site.scale_set_id)
        return live is not None and live.session_id != old.session_id

    await site.wait_for(replaced, "a new session after the old one expired", LEASE + 60)
    await site.wait_session()
    new = fake.session(site.scale_set_id)
    assert new is not None
    assert old in fake.expired_sessions  # it ran out; nobody deleted it
    conflicts = [r for r in fake.requests_for("session_create") if r.status == 409]
    assert conflicts  # the second listener really met the old session
    assert second.returncode is None  # it waited; no exit, no crash loop
    expired_at = old.last_seen + LEASE
    print(
        json.dumps(
            {
                "lease_s": LEASE,
                "restart_to_expiry_s": round(expired_at - killed_at, 2),
                "restart_to_session_s": round(new.created - killed_at, 2),
                "late_s": round(new.created - expired_at, 2),
                "conflicts": len(conflicts),
            }
        )
    )
    assert await second.stop() == 0
