"""``ghalistener whatif``: what warm capacity costs and buys, on a job trace.

    whatif import     write a JSONL trace: from GitHub's REST API with the listener's own
                      credentials (its config.json), or from a file (validated, normalised)
    whatif optimum    OPT₀ per label set: the least spare node-seconds for zero queue time
    whatif simulate   the monitor's own policy replayed on the trace, per warm-pool setting
                      (``--predictive``: a stage model's pool, capacity.stage_pool)
    whatif recommend  per label set, the cheapest setting that meets a p90 queue target

Results are JSON on stdout (``--table``: a text table); errors are one line on stderr
(``Error: …``, exit status 1). The policy's knobs are the listener's capacity settings
(``CAPACITY_*``, ``CAPACITY_CONFIG_FILE``), so a simulation uses the settings in force.

The work itself is in the other modules of this package, an extra the image leaves out
(``pip install 'capacity-listener[whatif]'``). Seeded synthetic traces come from a
checkout's tools (``python -m tools.whatif_synth``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from base.http.errors import HTTPError
from capacity.github_demand import label_match
from capacity.model import Role
from capacity.settings import (
    HUD_READ_INTERVAL,
    CapacitySettings,
    load_capacity_settings,
    to_params,
    to_warm_pool,
)
from capacity.settings_problems import CapacitySettingsError
from capacity.stages import StageModel
from capacity.warm_pool import WarmPool
from listener.config import ConfigError
from whatif.delays import provisioning_delays
from whatif.history import HistoryError
from whatif.optimum import Optimum, by_label_set, intervals, optimum
from whatif.predict import learn, predictive_setting
from whatif.recommend import Point, Setting, cheapest, fixed_pools, sweep
from whatif.simulate import SimConfig
from whatif.trace import TraceError, TraceJob, from_github, read_lines, write_lines

_DELAY_SAMPLES = 10_000


class UsageError(ValueError):
    """A bad option value; one line."""


# --- traces -------------------------------------------------------------------------------


def _read_trace(path: str) -> list[TraceJob]:
    if path == "-":
        return read_lines(sys.stdin, "stdin")
    try:
        with open(path, encoding="utf-8") as handle:
            return read_lines(handle, path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None


def _write_trace(jobs: Sequence[TraceJob], out: str) -> None:
    if out == "-":
        sys.stdout.writelines(write_lines(jobs))
        return
    Path(out).write_text("".join(write_lines(jobs)), encoding="utf-8")


def _print(result: Mapping[str, Any], out: TextIO | None = None) -> None:
    print(json.dumps(result, indent=2), file=out or sys.stdout)


# --- import -------------------------------------------------------------------------------


async def _import_command(args: argparse.Namespace) -> int:
    labels = [x for x in (args.labels or "").split(",") if x]
    skipped: Counter[str] = Counter()
    if args.source == "hud":
        raise UsageError(
            "--from hud: HUD has no job-history endpoint this tool can rely on "
            "(only queued-job aggregates); import from github or a file"
        )
    if args.source == "file":
        if not args.file:
            raise UsageError("--from file needs --file PATH")
        jobs = _read_trace(args.file)
        summary: dict[str, Any] = {"source": "file", "read": len(jobs)}
    else:
        jobs, summary = await _import_github(args, skipped)
    kept: list[TraceJob] = []
    for job in jobs:
        if labels and not label_match(job.labels, labels):
            skipped[f"labels not served ({job.label_set})"] += 1
            continue
        kept.append(job)
    kept.sort(key=lambda j: j.queued_at)
    _write_trace(kept, args.out)
    summary.update(
        {
            "written": len(kept),
            "out": args.out,
            "label_sets": dict(Counter(j.label_set for j in kept)),
            "skipped": dict(skipped),
            "skipped_total": sum(skipped.values()),
        }
    )
    _print(summary, sys.stderr if args.out == "-" else None)
    return 0


async def _import_github(
    args: argparse.Namespace, skipped: Counter[str]
) -> tuple[list[TraceJob], dict[str, Any]]:
    from base.http.client import make_client, product_user_agent
    from listener import github_auth, startup
    from listener.logs import register_secret
    from whatif.history import GitHubHistory

    env = dict(os.environ)
    if args.config:
        env["LISTENER_CONFIG_PATH"] = args.config
    cfg = await asyncio.to_thread(startup.load_config, env)
    # GitHub's `created` filter counts whole seconds: end the window after the current
    # second, or a run created earlier in this second would fall between two windows.
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    since = until - timedelta(days=args.days)

    def progress(line: str) -> None:
        print(line, file=sys.stderr)

    async with make_client(
        root_ca_pem=cfg.server_root_ca, user_agent=product_user_agent()
    ) as client:
        auth = github_auth.GitHubAuth(
            client, target=cfg.target, credentials=cfg.credentials, on_secret=register_secret
        )
        history = GitHubHistory(
            client, auth.api_token, auth.api_url, reserve=args.reserve, progress=progress
        )
        repositories = list(args.repo or ())
        if not repositories and cfg.target.repository:
            repositories = [f"{cfg.target.organization}/{cfg.target.repository}"]
        if not repositories:
            if not cfg.target.organization:
                raise UsageError("an enterprise scale set: name repositories with --repo")
            repositories = await history.organization_repositories(cfg.target.organization)
        jobs: list[TraceJob] = []
        seen: set[str] = set()
        async for run, job in history.jobs(repositories, since, until):
            traced = from_github(run, job)
            if isinstance(traced, str):
                skipped[traced] += 1
            elif traced.job in seen:
                skipped["listed twice (runs re-listed while paging)"] += 1
            else:
                seen.add(traced.job)
                jobs.append(traced)
    summary = {
        "source": "github",
        "repositories": len(repositories),
        "window": {"since": since.isoformat(), "until": until.isoformat()},
        "runs": history.stats.runs,
        "calls": history.pacing.calls,
        "rate_limit_waited_seconds": round(history.pacing.waited, 1),
        "truncated_days": history.stats.truncated_days,
    }
    return jobs, summary


# --- optimum, simulate, recommend ---------------------------------------------------------


def _groups(args: argparse.Namespace) -> dict[str, list[TraceJob]]:
    groups = by_label_set(_read_trace(args.trace))
    if args.label_set:
        if args.label_set not in groups:
            raise UsageError(
                f"--label-set {args.label_set}: not in the trace ({', '.join(groups)})"
            )
        groups = {args.label_set: groups[args.label_set]}
    return groups


def _optima(groups: Mapping[str, list[TraceJob]], args: argparse.Namespace) -> dict[str, Optimum]:
    return {
        key: optimum(intervals(jobs), args.lead, args.launch_cost) for key, jobs in groups.items()
    }


def _optimum_command(args: argparse.Namespace) -> int:
    optima = _optima(_groups(args), args)
    result = {
        "lead_seconds": args.lead,
        "launch_cost_seconds": args.launch_cost,
        "label_sets": {key: o.describe() for key, o in optima.items()},
    }
    if args.table:
        print(f"{'label set':<24}{'jobs':>8}{'busy node-s':>14}{'OPT0 spare':>12}{'% busy':>8}")
        for key, o in optima.items():
            print(f"{key:<24}{o.jobs:>8}{o.busy:>14.0f}{o.spare:>12.0f}{100 * o.spare_share:>8.1f}")
    else:
        _print(result)
    return 0


def _sizes(text: str) -> list[int]:
    """ "0,5,10" or "0-40:5" (from-to:step) → pool sizes."""
    sizes: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                span, _, step = part.partition(":")
                low, high = (int(x) for x in span.split("-", 1))
                sizes.extend(range(low, high + 1, int(step or 1)))
            elif part:
                sizes.append(int(part))
    except ValueError:
        raise UsageError(f"--pools {text!r}: use sizes like 0,5,10 or 0-40:5") from None
    if not sizes or min(sizes) < 0:
        raise UsageError(f"--pools {text!r}: at least one size, none negative")
    return sorted(set(sizes))


def _pool_factory(spec: str) -> Callable[[], WarmPool]:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise UsageError(f"--pool-factory {spec!r}: use module:callable")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        raise UsageError(f"--pool-factory {spec!r}: not found") from None
    if not callable(factory):
        raise UsageError(f"--pool-factory {spec!r}: not callable")
    return factory  # type: ignore[no-any-return]


def settings_pools(capacity: CapacitySettings) -> list[Setting]:
    """The warm pool the capacity settings build, through the factory the monitor uses
    (``to_warm_pool``), when it is scheduled (a fixed one is among the fixed pools)."""
    mode = capacity.warm_pool.mode
    if mode == "fixed":
        return []
    return [Setting(name=f"settings ({mode})", pool=functools.partial(to_warm_pool, capacity))]


def _settings(args: argparse.Namespace) -> list[Setting]:
    settings = fixed_pools(_sizes(args.pools))
    if args.lookahead:
        settings += fixed_pools(_sizes(args.pools), lookahead=args.lookahead)
    settings += settings_pools(load_capacity_settings(os.environ))
    for spec in args.pool_factory or ():
        settings.append(Setting(name=spec, pool=_pool_factory(spec)))
    return settings


def _outages(args: argparse.Namespace) -> tuple[tuple[float, float], ...]:
    """``--outage FROM,TO``: seconds after the trace's first arrival."""
    found = []
    for text in args.outage:
        try:
            low, high = (float(part) for part in text.split(","))
        except ValueError:
            raise UsageError(f"--outage {text}: not FROM,TO (seconds)") from None
        if not low < high:
            raise UsageError(f"--outage {text}: FROM must be before TO")
        found.append((low, high))
    return tuple(found)


_OUTAGE_POOLS = {
    "workflow": frozenset({Role.WORKFLOW}),
    "runner": frozenset({Role.RUNNER}),
    "both": frozenset(Role),
}


def _config(args: argparse.Namespace, start: float = 0.0) -> SimConfig:
    """The simulated cluster; ``start``: the trace's first arrival (the outages' origin)."""
    capacity = load_capacity_settings(os.environ)
    low, high = args.lead * (1 - args.lead_jitter), args.lead * (1 + args.lead_jitter)
    if not 0 <= args.lead_jitter <= 1:
        raise UsageError(f"--lead-jitter {args.lead_jitter}: must be in [0, 1]")
    delays = provisioning_delays(random.Random(args.seed), _DELAY_SAMPLES, low, high)
    interval = capacity.recalculate_interval
    return SimConfig(
        params=to_params(capacity, args.max_runners),
        delays=tuple(delays),
        # The product's default read interval for a source that lags (HUD's).
        demand_interval=args.demand_interval
        or capacity.demand.interval
        or min(HUD_READ_INTERVAL, interval),
        demand_lag=args.demand_lag,
        recalculate_interval=interval,
        node_idle=args.node_idle,
        outages=tuple((start + low, start + high) for low, high in _outages(args)),
        outage_roles=_OUTAGE_POOLS[args.outage_pool],
        # The pools say they cannot launch when the listener reads them (NodePools' Events,
        # cluster-autoscaler's status): the stall is then decided after one launch.
        word=capacity.nodepools.enabled or capacity.cluster_autoscaler.enabled,
    )


def _model(config: SimConfig, args: argparse.Namespace) -> dict[str, Any]:
    p = config.params
    return {
        "lead_seconds": args.lead,
        "provisioning_delay_seconds": [
            round(args.lead * (1 - args.lead_jitter), 1),
            round(args.lead * (1 + args.lead_jitter), 1),
        ],
        "launch_cost_seconds": args.launch_cost,
        "demand_interval_seconds": config.demand_interval,
        "demand_lag_seconds": config.demand_lag,
        "recalculate_interval_seconds": config.recalculate_interval,
        "node_idle_seconds": config.node_idle,
        "nodes": "a runner pool and a workflow pool, one half (one job's pod) per node",
        "outages_after_first_arrival": [list(span) for span in _outages(args)],
        "outage_pool": args.outage_pool,
        "pools_say_so": config.word,
        "policy": {
            "max_runners": p.max_runners,
            "max_pending_pairs": p.max_pending_pairs,
            "downscale_delay": p.downscale_delay,
            "placeholder_ready_timeout": p.ready_timeout,
            "placeholder_ttl": p.ttl,
            "renew_before": p.renew_before,
        },
    }


def _predictive(args: argparse.Namespace, key: str) -> list[Setting]:
    """The predictive pool for label set ``key``, when asked for: a stage model learned from
    ``--predictive-train`` (else empty), learning on from the trace as its jobs end; parents
    from every label set of the trace."""
    if not args.predictive:
        return []
    count = args.predictive_count_quantile
    if count is not None and not 0 < count <= 1:
        raise UsageError(f"--predictive-count-quantile {count}: must be in (0, 1]")
    # Pairs Running by the children's arrival: at least the longest launch ahead of it.
    lead = args.lead * (1 + args.lead_jitter)
    horizon = args.predictive_horizon if args.predictive_horizon is not None else 1.25 * lead
    if horizon < 0:
        raise UsageError(f"--predictive-horizon {horizon:g}: must be >= 0")
    hold = args.predictive_hold if args.predictive_hold is not None else lead
    if hold < 0:
        raise UsageError(f"--predictive-hold {hold:g}: must be >= 0")
    trained = learn(_read_trace(args.predictive_train)) if args.predictive_train else StageModel()
    setting = predictive_setting(
        trained, _read_trace(args.trace), key, horizon=horizon, hold=hold, count_quantile=count
    )
    return [setting]


def _curves(
    args: argparse.Namespace,
) -> Iterator[tuple[str, Optimum, list[Point], float]]:
    groups = _groups(args)
    optima = _optima(groups, args)
    first = min((job.queued_at for jobs in groups.values() for job in jobs), default=0.0)
    config = _config(args, first)
    settings = _settings(args)
    for key, jobs in groups.items():
        started = time.process_time()
        points = sweep(jobs, config, settings + _predictive(args, key))
        yield key, optima[key], points, time.process_time() - started


def _simulate_command(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {"model": _model(_config(args), args), "label_sets": {}}
    rows: list[tuple[str, Optimum, list[Point]]] = []
    for key, opt, points, cpu in _curves(args):
        rows.append((key, opt, points))
        result["label_sets"][key] = {
            "opt0": opt.describe(),
            "cpu_seconds": round(cpu, 2),
            "cpu_seconds_per_setting": round(cpu / max(1, len(points)), 2),
            "curve": [p.describe(opt.spare) for p in points],
        }
    if args.table:
        _table(rows)
    else:
        _print(result)
    return 0


def _table(rows: Sequence[tuple[str, Optimum, Sequence[Point]]]) -> None:
    head = f"{'policy':<28}{'spare % busy':>13}{'× OPT0':>8}{'p50 s':>8}{'p90 s':>8}"
    head += f"{'p99 s':>8}{'max s':>8}{'ready':>7}{'launches':>10}"
    for key, opt, points in rows:
        print(f"{key}: {opt.jobs} jobs, OPT0 spare {100 * opt.spare_share:.1f} % of busy")
        print(head)
        for p in points:
            o = p.outcome
            ratio = o.spare / opt.spare if opt.spare else float("nan")
            print(
                f"{p.setting.name:<28}{100 * o.spare / o.busy:>13.1f}{ratio:>8.2f}"
                f"{o.percentile(50):>8.1f}{o.percentile(90):>8.1f}{o.percentile(99):>8.1f}"
                f"{(o.waits[-1] if o.waits else 0):>8.1f}{o.ready_share:>7.2f}{o.launches:>10}"
            )
        print()


def _recommend_command(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {
        "p90_target_seconds": args.p90,
        "model": _model(_config(args), args),
        "label_sets": {},
    }
    for key, opt, points, _ in _curves(args):
        best = cheapest(points, args.p90)
        entry: dict[str, Any] = {
            "recommended": None if best is None else best.describe(opt.spare),
            "opt0": opt.describe(),
            "curve": [p.describe(opt.spare) for p in points],
        }
        if best is None:
            fastest = min(points, key=lambda p: p.p90)
            entry["reason"] = (
                f"no setting swept meets p90 <= {args.p90:g}s; the fastest is "
                f"{fastest.setting.name} at p90 {fastest.p90:.1f}s: sweep larger pools"
            )
        result["label_sets"][key] = entry
        if args.table:
            pick = "none" if best is None else best.setting.name
            spare = "-" if best is None else f"{100 * best.outcome.spare / best.outcome.busy:.1f}"
            p90 = "-" if best is None else f"{best.p90:.1f}"
            print(
                f"{key}: {pick} (spare {spare} % of busy, p90 {p90} s; "
                f"OPT0 {100 * opt.spare_share:.1f} %)"
            )
    if not args.table:
        _print(result)
    return 0


# --- arguments ----------------------------------------------------------------------------


def _trace_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="the JSONL trace ('-': standard input)")
    parser.add_argument("--label-set", default="", help="only this label set (comma-joined)")
    parser.add_argument("--lead", type=float, default=60.0, help="lead time D, seconds (60)")
    parser.add_argument(
        "--launch-cost", type=float, default=0.0, help="launch cost c0, node-seconds (0)"
    )
    parser.add_argument("--table", action="store_true", help="a text table instead of JSON")


def _simulation_options(parser: argparse.ArgumentParser) -> None:
    _trace_options(parser)
    parser.add_argument(
        "--lead-jitter",
        type=float,
        default=0.25,
        help="provisioning delays are uniform in D×(1±jitter) (0.25)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the provisioning delays")
    parser.add_argument("--pools", default="0-40:5", help="fixed pools: 0,5,10 or 0-40:5")
    parser.add_argument(
        "--lookahead",
        type=float,
        default=0.0,
        help="also each pool with demand counting later stages of runs under way due "
        "within this many seconds",
    )
    parser.add_argument(
        "--pool-factory",
        action="append",
        help="module:callable returning a warm pool (observe/target); repeatable",
    )
    parser.add_argument(
        "--predictive",
        action="store_true",
        help="also a predictive pool: pairs for the children a stage model expects from the "
        "jobs running (needs workflow and job_name in the trace)",
    )
    parser.add_argument(
        "--predictive-train", default="", help="a trace to learn the stage model from first"
    )
    parser.add_argument(
        "--predictive-horizon",
        type=float,
        default=None,
        help="pairs for the children expected within this many seconds "
        "(default: 1.25 x the longest launch)",
    )
    parser.add_argument(
        "--predictive-count-quantile",
        type=float,
        default=None,
        help="cover this quantile of a fan-out's size (default: its mean)",
    )
    parser.add_argument(
        "--predictive-hold",
        type=float,
        default=None,
        help="a parent this long past the 0.9 quantile of its fanned runs counts no more "
        "(default: the longest launch)",
    )
    parser.add_argument("--max-runners", type=int, default=1000, help="maxRunners (1000)")
    parser.add_argument(
        "--demand-interval",
        type=float,
        default=0.0,
        help="seconds between demand reads (default: demand.interval, else 10 s, HUD's)",
    )
    parser.add_argument("--demand-lag", type=float, default=2.0, help="read duration (2)")
    parser.add_argument(
        "--node-idle", type=float, default=30.0, help="empty node removed after (30)"
    )
    parser.add_argument(
        "--outage",
        action="append",
        default=[],
        metavar="FROM,TO",
        help="the cloud cannot launch nodes from FROM to TO seconds after the trace's first "
        "arrival (repeatable); launches asked for then come up one delay after TO",
    )
    parser.add_argument(
        "--outage-pool",
        choices=tuple(_OUTAGE_POOLS),
        default="both",
        help="the pool the outages refuse (both): workflow alone leaves runner halves "
        "Running beside Pending workflow halves, as a GPU type out of stock does",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="ghalistener whatif", description="What warm capacity costs and buys, on a trace."
    )
    sub = top.add_subparsers(dest="command", required=True)

    imp = sub.add_parser("import", help="write a JSONL trace of past jobs")
    imp.add_argument("--from", dest="source", choices=("github", "hud", "file"), default="github")
    imp.add_argument("--file", help="with --from file: the trace to validate and normalise")
    imp.add_argument("--config", help="the listener's config.json (default LISTENER_CONFIG_PATH)")
    imp.add_argument("--repo", action="append", help="owner/name (repeatable); default: scope")
    imp.add_argument("--days", type=float, default=7.0, help="the last N days (7)")
    imp.add_argument("--labels", help="keep only jobs these labels serve (comma-separated)")
    imp.add_argument("--reserve", type=int, default=100, help="rate-limit calls to leave (100)")
    imp.add_argument("--out", default="-", help="the JSONL file ('-': standard output)")
    imp.set_defaults(run=_import_command)

    opt = sub.add_parser("optimum", help="OPT₀ per label set")
    _trace_options(opt)
    opt.set_defaults(run=_optimum_command)

    sim = sub.add_parser("simulate", help="the policy replayed per warm-pool setting")
    _simulation_options(sim)
    sim.set_defaults(run=_simulate_command)

    rec = sub.add_parser("recommend", help="the cheapest setting meeting a p90 target")
    _simulation_options(rec)
    rec.add_argument("--p90", type=float, required=True, help="p90 queue-time target, seconds")
    rec.set_defaults(run=_recommend_command)
    return top


_EXPECTED = (
    UsageError,
    TraceError,
    HistoryError,
    ConfigError,
    CapacitySettingsError,
    HTTPError,
    ValueError,
)


def main(argv: Sequence[str]) -> int:
    """The command line's entry: exit status 0, or 1 after a one-line error."""
    return asyncio.run(amain(argv))


async def amain(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    try:
        done = args.run(args)
        return int(await done if asyncio.iscoroutine(done) else done)
    except _EXPECTED as exc:
        from listener.logs import redact

        print(f"Error: {redact(' '.join(str(exc).splitlines()))}", file=sys.stderr)
        return 1
