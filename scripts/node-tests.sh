#!/usr/bin/env bash
# Node's tests in three runs: unit and end-to-end tests two at a time (main), then the lab tests
# alone (lab: fresh Debian machines with their own Docker engines, whose image pulls and writes
# would otherwise load the disk under the timing-sensitive tests), then the heavy ones alone
# (heavy: 10 GiB through the API each way, for the same reason). Name runs to make only those
# (`bash scripts/node-tests.sh heavy`); none named makes all three. All named always run; each
# prints its own `ℹ pass N` / `ℹ fail N`, which CI adds up.
set -uo pipefail
runs=("$@")
[ ${#runs[@]} -eq 0 ] && runs=(main lab heavy)
rc=0
for run in "${runs[@]}"; do
  case "$run" in
  main) node --test --test-concurrency=2 "packages/*/src/**/*.test.ts" "bench/*.test.ts" "test/e2e/*.test.ts" "test/security/*.test.ts" "test/docs/*.test.ts" || rc=$? ;;
  lab) node --test --test-concurrency=1 "test/e2e/lab/*.test.ts" || rc=$? ;;
  heavy) node --test --test-concurrency=1 "test/heavy/*.test.ts" || rc=$? ;;
  *)
    echo "node-tests.sh: no run named '$run' (main, lab, heavy)" >&2
    rc=2
    ;;
  esac
done
exit "$rc"
