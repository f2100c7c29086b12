#!/usr/bin/env bash
# Node's tests in three runs: unit and end-to-end tests two at a time, then the lab tests alone
# (test/e2e/lab: fresh Debian machines with their own Docker engines, whose image pulls and writes
# would otherwise load the disk under the timing-sensitive tests), then the heavy ones alone
# (test/heavy: 10 GiB through the API each way, for the same reason). All always run; each prints
# its own `ℹ pass N` / `ℹ fail N`, which CI adds up.
set -uo pipefail
rc=0
node --test --test-concurrency=2 "packages/*/src/**/*.test.ts" "bench/*.test.ts" "test/e2e/*.test.ts" "test/security/*.test.ts" "test/docs/*.test.ts" || rc=$?
node --test --test-concurrency=1 "test/e2e/lab/*.test.ts" || rc=$?
node --test --test-concurrency=1 "test/heavy/*.test.ts" || rc=$?
exit "$rc"
