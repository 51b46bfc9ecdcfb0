"""``ghalistener`` / ``python -m listener``: run the listener, turn failures into one line.

``ghalistener rbac --name … --namespace … --github-config-url …`` prints the least-privilege
Role and RoleBinding for that scale set's listener instead (see ``listener.rbac``);
``ghalistener whatif …`` imports job traces and replays them, where the optional ``whatif``
package is installed (``whatif_command``; the image leaves it out);
``ghalistener overlay --values … --scale-set … --overlay …`` prints a team's own ARC values
with the chart's overlay merged in (see ``listener.overlay``).

Exit status 0 after a clean shutdown (SIGTERM), 1 on any error. A bad config prints ARC's
own fatal line; other errors print ``Error: ...``. The ARC controller recreates
the pod whenever the container exits, so exiting is the recovery path for fatal errors.
"""

from __future__ import annotations

# Only the standard library and listener.signals before the stop handler is installed: the
# imports below main() take about a second, and a SIGTERM in that time must not kill the
# process uncleanly.
import asyncio
import logging
import os
import sys
import time

from listener import signals


def _expected() -> tuple[type[BaseException], ...]:
    """Errors whose message says it all; anything else is a bug, reported with its type."""
    from base.http.errors import HTTPError
    from base.kube import KubeError
    from capacity.settings_problems import CapacitySettingsError
    from listener.config import ConfigError
    from listener.startup import StartupError

    return (ConfigError, CapacitySettingsError, StartupError, HTTPError, KubeError)


def _leaf_errors(exc: BaseException) -> list[BaseException]:
    """Flatten the ExceptionGroups a TaskGroup raises into the errors that caused them."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(_leaf_errors(inner))
        return leaves
    return [exc]


def _go_log_prefix() -> str:
    # Go's log.Printf prefix (LstdFlags): local date and time, then a space.
    return time.strftime("%Y/%m/%d %H:%M:%S ")


def error_lines(exc: BaseException) -> list[str]:
    """One line per cause, secrets masked: ``Error: ...``, or ARC's own line for config errors.

    A bad config gives exactly the line ARC's listener prints (``Failed to read config: ...``
    after Go's log timestamp), because operators alert on it.
    """
    from capacity.settings_problems import CapacitySettingsError
    from listener.config import ConfigError
    from listener.logs import redact

    expected = _expected()
    lines = []
    for error in _leaf_errors(exc):
        if isinstance(error, ConfigError):
            line = " ".join(error.line.splitlines())
            prefix = "" if error.stage == "env" else _go_log_prefix()
            lines.append(prefix + redact(line))
            continue
        if isinstance(error, CapacitySettingsError):
            # One line per bad setting (and the reference), so one restart shows them all.
            lines.extend(f"Error: {redact(line)}" for line in str(error).splitlines())
            continue
        message = " ".join(str(error).splitlines())
        if not isinstance(error, expected):
            message = f"{type(error).__name__}: {message}".rstrip(": ")
        lines.append(f"Error: {redact(message)}")
    return lines


def rbac_command(argv: list[str]) -> int:
    """``ghalistener rbac``: print the least-privilege Role and RoleBinding (YAML)."""
    import argparse

    import yaml

    from listener.rbac import listener_name, manifests

    parser = argparse.ArgumentParser(
        prog="ghalistener rbac",
        description=(
            "Print the Role and RoleBinding that give exactly this scale set's listener "
            "ServiceAccount (named by ARC) what the capacity monitor needs. Apply the output "
            "in the runner namespace instead of deploy/rbac/rolebinding.yaml."
        ),
    )
    parser.add_argument("--name", required=True, help="the AutoscalingRunnerSet's name")
    parser.add_argument(
        "--namespace", required=True, help="the AutoscalingRunnerSet's (runner) namespace"
    )
    parser.add_argument(
        "--github-config-url",
        required=True,
        help="githubConfigUrl as given to ARC's chart (a trailing / is removed, as the chart does)",
    )
    parser.add_argument(
        "--runner-group",
        default="",
        help="spec.runnerGroup exactly as written in the AutoscalingRunnerSet (empty if unset)",
    )
    parser.add_argument(
        "--controller-namespace",
        default="arc-systems",
        help="where ARC's controller creates the listener ServiceAccount (default arc-systems)",
    )
    args = parser.parse_args(argv)
    docs = manifests(
        scale_set=args.name,
        namespace=args.namespace,
        runner_group=args.runner_group,
        github_config_url=args.github_config_url,
        controller_namespace=args.controller_namespace,
    )
    listener = listener_name(args.name, args.namespace, args.runner_group, args.github_config_url)
    print(f"# Least-privilege RBAC for the listener ServiceAccount {listener}")
    where = args.controller_namespace
    print(f"# ({where}); check that it exists: kubectl get sa -n {where} {listener}")
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0


def _read_yaml_docs(path: str, flag: str) -> list[object]:
    """The YAML documents of a file (``-``: standard input), or one line naming the flag."""
    import yaml

    from listener.overlay import OverlayError

    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        return list(yaml.safe_load_all(text))
    except OSError as exc:
        raise OverlayError(f"{flag} {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise OverlayError(f"{flag} {path}: not YAML: {' '.join(str(exc).split())}") from exc


def overlay_command(argv: list[str]) -> int:
    """``ghalistener overlay``: print the team's ARC values with the overlay merged in."""
    import argparse

    import yaml

    from listener.overlay import OverlayError, check_team, find_overlay, merge

    parser = argparse.ArgumentParser(
        prog="ghalistener overlay",
        description=(
            "Merge the capacity listener's overlay for ARC's gha-runner-scale-set chart into "
            "your own values for that chart, by container name, and print one static values "
            "file: your runner image, env, volumes, sidecars and initContainers stay yours."
        ),
    )
    parser.add_argument(
        "--values", required=True, help="your own gha-runner-scale-set values file (- : stdin)"
    )
    parser.add_argument("--scale-set", required=True, help="the scale set's name in the chart")
    parser.add_argument(
        "--overlay",
        required=True,
        help=(
            "the overlay: the chart's <scale set>-arc-values values.yaml, that ConfigMap, or "
            "`helm template` output of the chart (- : stdin)"
        ),
    )
    args = parser.parse_args(argv)
    try:
        if args.values == "-" and args.overlay == "-":
            raise OverlayError("--values and --overlay cannot both be standard input")
        team_docs = [d for d in _read_yaml_docs(args.values, "--values") if d is not None]
        team = team_docs[0] if team_docs else {}  # an empty file: no values of your own
        if len(team_docs) > 1 or not isinstance(team, dict):
            raise OverlayError(f"--values {args.values}: expected one map of chart values")
        check_team(team, args.scale_set)
        ours = find_overlay(
            _read_yaml_docs(args.overlay, "--overlay"), args.scale_set, yaml.safe_load
        )
        merged = merge(team, ours)
    except OverlayError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    for path in merged.replaced:
        print(f"ghalistener overlay: your {path} is replaced by the overlay's", file=sys.stderr)
    name = args.scale_set
    command = f"--values {args.values} --scale-set {name} --overlay {args.overlay}"
    print(f"# Values for ARC's gha-runner-scale-set chart, scale set {name}: your values with")
    print("# the capacity listener's overlay merged in. Generated: change an input and run")
    print(f"#   ghalistener overlay {command}")
    print(f"# again. Install: helm upgrade --install {name} <gha-runner-scale-set chart> \\")
    print(f"#   --namespace <runner namespace> --values values-{name}.yaml\n")
    print(yaml.safe_dump(merged.values, sort_keys=False, width=100), end="")
    return 0


# The what-if package is an extra the image leaves out; an upgrade from an image that had it
# should say how to get it back rather than show an import error.
WHATIF_MISSING = (
    "Error: ghalistener whatif is not in this installation (the image leaves it out): "
    "pip install '.[whatif]' in a checkout of this version, then run it there"
)


def whatif_command(argv: list[str]) -> int:
    """``ghalistener whatif …``: the optional ``whatif`` package's command line, or one line
    saying how to install it. Named by string: nothing in the product imports it
    (pyproject.toml's import contracts)."""
    import importlib

    try:
        module = importlib.import_module("whatif.cli")
    except ModuleNotFoundError as exc:
        if exc.name not in ("whatif", "whatif.cli"):
            raise  # the package is there but broken: its own error says more
        print(WHATIF_MISSING, file=sys.stderr)
        return 1
    status: int = module.main(argv)
    return status


def main() -> None:
    signals.install_early()
    if sys.argv[1:2] == ["rbac"]:
        sys.exit(rbac_command(sys.argv[2:]))
    if sys.argv[1:2] == ["overlay"]:
        sys.exit(overlay_command(sys.argv[2:]))
    if sys.argv[1:2] == ["webhook-receiver"]:
        from listener import receiver_main

        sys.exit(receiver_main.cli(sys.argv[2:], os.environ))
    if sys.argv[1:2] == ["whatif"]:
        sys.exit(whatif_command(sys.argv[2:]))
    from listener import app

    try:
        asyncio.run(app.main(os.environ))
    except KeyboardInterrupt:
        sys.exit(0)
    except Exception as exc:  # the process boundary: report, then exit 1
        # Printed, not logged: the logging handler may not exist yet (bad config).
        for line in error_lines(exc):
            print(line, file=sys.stderr)
        logging.getLogger("listener").debug("exit", exc_info=exc)
        sys.exit(1)


if __name__ == "__main__":
    main()
