#!/usr/bin/env bash
# The README's test command: prepares the machine (Node 24, dependencies, Python 3, Docker engine,
# images, registry, a browser), then type-checks, lints and runs every test: Node's (unit and end-to-end, on
# the real engine), and Python's (the package's unit tests and the Inspect, Harbor and OpenEnv
# conformance suites against a live denv) beside Node's heavy run. Both always run (Node's only once
# the type-check and lint pass); the exit code says whether all passed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/prepare.sh
# denvd as one executable per architecture, which the installer tests serve through /install.sh;
# rebuilt only when its inputs changed.
bash scripts/build-denvd.sh
# Debian's chromium, which the console's browser tests drive.
bash scripts/ensure-chromium.sh
source scripts/ensure-node.sh
rc=0
checked=0
npm run typecheck && npm run lint && checked=1 || rc=1
[ "$checked" = 1 ] && { bash scripts/node-tests.sh main lab || rc=$?; }
# The heavy run (10 GiB each way: the disk and a core) and Python's suites (API calls that mostly
# wait on containers) side by side: ~4 minutes less than one after the other. Python's lines are
# kept aside and printed whole after the heavy run's, so neither report is cut into the other.
py_log=$(mktemp)
DENV_NODE=$(command -v node) /usr/bin/python3 python/tests/run.py >"$py_log" 2>&1 &
py=$!
[ "$checked" = 1 ] && { bash scripts/node-tests.sh heavy || rc=$?; }
wait "$py" || rc=1
cat "$py_log"
rm -f "$py_log"
exit "$rc"
