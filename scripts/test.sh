#!/usr/bin/env bash
# The README's test command: prepares the machine (Node 24, dependencies, Python 3, Docker engine,
# images, registry, a browser), then type-checks, lints and runs every test: Node's (unit and end-to-end, on
# the real engine), then Python's (the package's unit tests and the Inspect, Harbor and OpenEnv
# conformance suites against a live denv). Both always run; the exit code says whether all passed.
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
npm test || rc=$?
DENV_NODE=$(command -v node) /usr/bin/python3 python/tests/run.py || rc=$?
exit "$rc"
