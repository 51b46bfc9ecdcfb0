"""Run the fake Actions service and the fake HUD standalone: `python -m tools.fakes_cli`.

Prints ONE JSON line on stdout once both servers listen (URLs, tokens, scale sets), so a parent
process can read it, then serves until SIGINT/SIGTERM. Jobs, claims, completions and faults are
driven over the fake's control API (`POST <actions>/_fake/jobs`, `/_fake/claim`,
`/_fake/complete`, `/_fake/workflow-started`, `/_fake/faults`; `GET /_fake/state`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.fake_actions import FakeActions
from tools.fake_hud import FakeHUD


def parse_scale_set(text: str) -> tuple[int, str, list[str]]:
    """`ID:NAME[:label,label]`, e.g. `7:linux` or `8:gpu:gpu,linux.gpu`."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].isdigit() or not parts[1]:
        raise argparse.ArgumentTypeError(f"--scale-set {text!r}: expected ID:NAME[:labels]")
    labels = [x for x in parts[2].split(",") if x] if len(parts) == 3 else []
    return int(parts[0]), parts[1], labels


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.fakes_cli", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="fake GitHub/Actions port (0: any)")
    p.add_argument("--hud-port", type=int, default=0, help="fake HUD port (0: any)")
    p.add_argument("--no-hud", action="store_true", help="do not start the fake HUD")
    p.add_argument(
        "--scale-set", action="append", type=parse_scale_set, default=[], metavar="ID:NAME[:L,L]"
    )
    p.add_argument("--org", default="acme", help="scope used for the printed configure_url")
    p.add_argument("--pat", default="ghp_fake_pat")
    p.add_argument("--app-id", default=None)
    p.add_argument("--app-public-key-file", type=Path, default=None)
    p.add_argument("--poll-hold", type=float, default=50.0)
    p.add_argument("--session-expiry", type=float, default=120.0)
    p.add_argument("--admin-token-ttl", type=float, default=3600.0)
    service = p.add_mutually_exclusive_group()
    service.add_argument("--ghes", action="store_true", help="JobAvailable + acquirejobs flow")
    service.add_argument(
        "--broker",
        action="store_true",
        help="GitHub.com's current service: /rest URLs, direct assignment, no acquirejobs",
    )
    p.add_argument("--requeue-after", type=float, default=None)
    p.add_argument("--strand-grace", type=float, default=30.0)
    p.add_argument("--hud-token", default="hud-fake-token")
    p.add_argument("--hud-lag", type=float, default=0.0)
    return p


async def serve(args: argparse.Namespace) -> None:
    public_key = args.app_public_key_file.read_text() if args.app_public_key_file else None
    actions = FakeActions(
        pats=[args.pat],
        app_id=args.app_id,
        app_public_key=public_key,
        poll_hold=args.poll_hold,
        session_expiry=args.session_expiry,
        admin_token_ttl=args.admin_token_ttl,
        ghes_mode=args.ghes,
        broker=args.broker,
        requeue_after=args.requeue_after,
        strand_grace=args.strand_grace,
        host=args.host,
        port=args.port,
    )
    for scale_set_id, name, labels in args.scale_set:
        actions.add_scale_set(scale_set_id, name, labels or None)
    hud = None if args.no_hud else FakeHUD(args.hud_token, host=args.host, port=args.hud_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await actions.start()
    try:
        if hud is not None:
            await hud.start()
            hud.link(actions, lag=args.hud_lag)
        info = {
            "actions_url": actions.url,
            "configure_url": actions.configure_url(args.org),
            "control_url": f"{actions.url}/_fake",
            "github_token": args.pat,
            "scale_sets": [
                {"id": s.id, "name": s.name, "labels": list(s.labels)}
                for s in actions.scale_sets.values()
            ],
            "hud_endpoint": hud.endpoint if hud else None,
            "hud_token": args.hud_token if hud else None,
        }
        print(json.dumps(info), flush=True)
        await stop.wait()
    finally:
        if hud is not None:
            await hud.stop()
        await actions.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(serve(args))
    except OSError as exc:
        print(f"fakes: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
