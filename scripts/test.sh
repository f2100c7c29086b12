#!/usr/bin/env bash
# The README's test command: prepares the machine (Node 24, dependencies, Python 3, Docker engine,
# images, registry, a browser), then type-checks, lints and runs every test: Node's (unit and end-to-end, on
# the real engine) and, beside them, Python's (the package's unit tests and the Inspect, Harbor and
# OpenEnv conformance suites against a live denv). Both always run once the type-check and lint
# pass; the exit code says whether all passed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# One run at a time: a second waits for the first (the engine, the registry and the ports are shared).
DENV_LOCK=run source "$ROOT/scripts/run-lock.sh"
cd "$ROOT"
# Where the run's time goes, printed as `phase: …` lines (CI's log keeps them).
phase_start=$(date +%s)
phase() {
  echo "phase: $1 $(($(date +%s) - phase_start)) s"
  phase_start=$(date +%s)
}
bash scripts/prepare.sh
# denvd as one executable per architecture, which the installer tests serve through /install.sh;
# rebuilt only when its inputs changed.
bash scripts/build-denvd.sh
# Debian's chromium, which the console's browser tests drive.
bash scripts/ensure-chromium.sh
source scripts/ensure-node.sh
phase "set-up (engine, images, registry, denvd, browser)"
# Every Node process of the run (each test file, each `denv` a test runs) keeps its compiled code
# and stripped TypeScript here, and the next finds it: a process starts in about half the CPU.
# Only a cache: keyed by the files' contents, and a cold one is rebuilt as it goes.
export NODE_COMPILE_CACHE=${NODE_COMPILE_CACHE:-/var/cache/denv/node-compile-cache}
# Files under temporary directories add entries each run: past 1 GiB it starts again.
[ "$(du -sm "$NODE_COMPILE_CACHE" 2>/dev/null | cut -f1)" -gt 1024 ] 2>/dev/null && rm -rf "$NODE_COMPILE_CACHE"
# Every server the tests start (Node's and Python's live one) checks each JSON answer against its
# route's schema: a mismatch fails the request that met it.
export DENV_CHECK_ANSWERS=1
rc=0
checked=0
npm run typecheck && npm run lint && checked=1 || rc=1
phase "type-check and lint"
# Python's suites (API calls that mostly wait on containers, against a live denv of their own)
# beside Node's; their lines are kept aside and printed whole after Node's report.
py_log=$(mktemp)
(
  py_start=$(date +%s)
  DENV_NODE=$(command -v node) /usr/bin/python3 python/tests/run.py >"$py_log" 2>&1
  py_rc=$?
  [ -n "${DENV_TEST_TIMES:-}" ] && echo "$(($(date +%s) - py_start)) python/tests/run.py" >>"$DENV_TEST_TIMES"
  exit "$py_rc"
) &
py=$!
# Node's tiers (test/harness/run-suite.ts): unit and end-to-end files longest first, several at
# once, with the lab and heavy runs one at a time beside them.
[ "$checked" = 1 ] && { node test/harness/run-suite.ts || rc=$?; }
phase "node's tests"
wait "$py" || rc=1
phase "python's tests (after node's)"
cat "$py_log"
rm -f "$py_log"
exit "$rc"
