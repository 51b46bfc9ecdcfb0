"""No Python module over ``LIMIT`` lines unless ``EXEMPT`` names it, with its reason.

A long module is split by role (CONTRIBUTING.md). The few that stay one file are listed here
by path, each with a one-line reason, so every exemption is read and reviewed in one place.
An exemption of a module that is back under the limit, or of a path that is gone, fails too:
the list only shrinks to what is still true.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("listener", "capacity", "base", "whatif", "deploy", "tools", "tests")
# "About 400 lines": a few lines over are not worth an exemption.
LIMIT = 420

EXEMPT = {
    # The product.
    "capacity/policy.py": "the pure decision core; to be replaced whole by a new one",
    "base/kube.py": "the one owner of kubernetes-asyncio; the list+watch informer is most of it",
    "capacity/github_demand.py": "one demand source whose budget, ETag cache and pacing agree",
    "listener/actions.py": "one client of one service sharing session and token refresh",
    # The whatif extra.
    "whatif/simulate.py": "the what-if simulator; to be replaced with the decision core",
    "whatif/cli.py": "the what-if command line: one parser, its options shared by four commands",
    # Deploy generators.
    "deploy/grafana/gen_dashboard.py": "one dashboard, its panels in the order it shows them",
    # Tools: fakes, benchmark drivers and harnesses, each one object over shared state.
    "tools/bench.py": "the `make bench` catalogue on one shared Bench",
    "tools/bench_agreement.py": "config read back, mapped onto the simulator and compared: a chain",
    "tools/bench_capacity.py": "one benchmark program measuring one child process",
    "tools/bench_outcomes.py": "one benchmark driver: trace, variants, measurements, figures",
    "tools/bench_staged.py": "one benchmark driver of the staged family",
    "tools/e2e_site.py": "Stage and Site are one object graph",
    "tools/fake_actions.py": "one stateful fake of one service",
    "tools/fake_github_rest.py": "one stateful fake of one API",
    "tools/localcluster/build.py": "one build recipe sharing the toolchain check and cache layout",
    "tools/localcluster/harness.py": "LocalCluster is one object over its processes and state",
    "tools/runner_standin.py": "ARC's controllers and the runner over one watch cache",
    "tools/soak.py": "one soak harness over the same sites, fakes and supervisors",
    # Tests: the tests of one module, a test per behaviour on one harness.
    "tests/integration/test_capacity_monitor.py": "the monitor's behaviours on one scene",
    "tests/integration/test_karpenter.py": "ten scenarios on one Karpenter scene fixture",
    "tests/unit/capacity/test_github_demand.py": "the tests of capacity/github_demand.py",
    "tests/unit/capacity/test_monitor_logic.py": "the monitor's logic through one scene",
    "tests/unit/capacity/test_policy.py": "the policy's example tables, read side by side",
    "tests/unit/test_actions.py": "the tests of listener/actions.py on the same respx routes",
    "tests/unit/test_config.py": "the tests of config.json's parsing, mostly one validation table",
    "tests/unit/test_fake_actions.py": "the tests of tools/fake_actions.py on one client",
    "tests/unit/test_loop.py": "the tests of listener/loop.py through one harness",
}


def lines_of(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("\n")


def size_problems(sizes: dict[str, int], exempt: dict[str, str]) -> list[str]:
    """What is wrong with ``sizes`` (path → lines, every module there is) under ``exempt``."""
    problems = []
    for path, lines in sorted(sizes.items()):
        if lines > LIMIT and path not in exempt:
            problems.append(f"{path}: {lines} lines, over {LIMIT}: split it by role")
        if lines <= LIMIT and path in exempt:
            problems.append(f"{path}: {lines} lines, no longer over {LIMIT}: drop its exemption")
    for path in sorted(set(exempt) - set(sizes)):
        problems.append(f"{path}: exempt but no such module")
    for path, reason in sorted(exempt.items()):
        if not reason.strip() or "\n" in reason:
            problems.append(f"{path}: the reason must be one line")
    return problems


def test_the_check_can_fail() -> None:
    """Over the limit without an exemption, a stale exemption and a missing path all fail."""
    over, under = LIMIT + 1, LIMIT
    assert size_problems({"a.py": over, "b.py": over}, {"b.py": "why"}) == [
        f"a.py: {over} lines, over {LIMIT}: split it by role"
    ]
    assert size_problems({"a.py": under}, {"a.py": "why"}) == [
        f"a.py: {under} lines, no longer over {LIMIT}: drop its exemption"
    ]
    assert size_problems({}, {"gone.py": "why"}) == ["gone.py: exempt but no such module"]
    assert size_problems({"a.py": over}, {"a.py": " "}) == ["a.py: the reason must be one line"]
    assert size_problems({"a.py": under, "b.py": over}, {"b.py": "why"}) == []


def test_no_module_over_the_limit_unless_exempt() -> None:
    sizes = {
        str(path.relative_to(ROOT)): lines_of(path)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert size_problems(sizes, EXEMPT) == []
