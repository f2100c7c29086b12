#!/usr/bin/env bash
# The README's main-job command. Today it prepares the machine and runs the ops-world smoke check
# (the example stack up on the real engine, healthy, seeded, the task's answer checked, torn down).
# It is the command that will run the seed's whole journey once the CLI journey exists.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/prepare.sh
source scripts/ensure-node.sh
node --test --test-reporter=spec test/e2e/ops-world-smoke.test.ts
