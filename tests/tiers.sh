#!/usr/bin/env bash
# `make test`: every check, the fast gate first.
#
#   gate:  lint (ruff, mypy, import-linter, vulture) and the unit tier (on TEST_WORKERS
#          workers) — no cluster, no Go; a failure here stops the run within minutes, before
#          any build.
#   build: the local control plane, Karpenter and the conformance reference (cached under
#          ~/.cache/capacity-listener; only a fresh machine pays for them).
#   slow:  every other directory of tests/ (chart: helm lint/template with the pinned Helm;
#          integration, e2e, conformance, image, and any
#          tier added later), each its own pytest run, all run even if one fails;
#          integration and e2e on TEST_WORKERS (default 2) pytest-xdist workers, their
#          tests marked `alone` after them on one.
#
# Ends with one line per tier: name, wall seconds, result. Exit 1 if any tier failed.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

rows=()
failed=0
tier() {
  local name=$1
  shift
  local start=$SECONDS rc
  echo "=== tier $name: $*"
  "$@"
  rc=$?
  local took=$((SECONDS - start))
  if [ "$rc" -eq 0 ]; then
    rows+=("$(printf '%-14s %6ds  ok' "$name" "$took")")
  else
    rows+=("$(printf '%-14s %6ds  FAILED (exit %d)' "$name" "$took" "$rc")")
    failed=1
  fi
  return "$rc"
}
summary() {
  echo
  echo "=== tiers (wall seconds)"
  printf '%s\n' "${rows[@]}"
  printf '%-14s %6ds\n' "total" "$SECONDS"
}

# The fast gate: stop at the first failure. The unit tier runs on virtual time, so its files
# spread over the workers as they are.
workers=${TEST_WORKERS:-2}
if ! tier lint make --no-print-directory lint-only \
  || ! tier unit "$VENV/bin/pytest" tests/unit -q -n "$workers"; then
  summary
  exit 1
fi

if ! tier build make --no-print-directory cluster-build conformance-build; then
  summary
  exit 1
fi

# The slow tiers in a fixed order, then any other test directory (so a new tier cannot be
# left out of `make test` by forgetting this file).
ordered=(chart integration e2e conformance image)
others=()
for dir in tests/*/; do
  name=$(basename "$dir")
  case " unit support ${ordered[*]} " in
    *" $name "*) ;;
    *) ls "$dir"test_*.py >/dev/null 2>&1 && others+=("$name") ;;
  esac
done
# The integration and e2e tiers wait mostly on the control plane and Karpenter (launch
# delays, consolidation, reconcile ticks): their files run on several pytest-xdist workers,
# each with its own local control plane and Karpenter; --dist loadfile keeps a file's tests,
# which share fixtures, on one worker. TEST_WORKERS=1 runs them one at a time. Tests marked
# `alone` run afterwards on one worker with nothing beside them: the fault soak judges every
# poll's header against the pods listed within 2 s, and beside a second worker one run saw a
# header above confirmed capacity for under a second (docs/soak.md, "Known").
spread=" integration e2e "
for name in "${ordered[@]}" "${others[@]}"; do
  [ -d "tests/$name" ] || continue
  if [[ "$spread" == *" $name "* && "$workers" -gt 1 ]]; then
    # --durations: the slowest tests of each tier, where a shorter CI has to start.
    tier "$name" "$VENV/bin/pytest" "tests/$name" -q --durations=10 -m "not alone" \
      -n "$workers" --dist loadfile
    # Exit 5: no test of the tier is marked `alone`.
    tier "$name-alone" bash -c '"$@"; rc=$?; [ "$rc" -eq 5 ] && exit 0; exit "$rc"' _ \
      "$VENV/bin/pytest" "tests/$name" -q --durations=10 -m alone
  else
    tier "$name" "$VENV/bin/pytest" "tests/$name" -q --durations=10
  fi
done

summary
exit "$failed"
