#!/usr/bin/env bash
# The README's main-job command: prepares the machine (Node 24, dependencies, Docker engine, images,
# registry), then runs the seed's journey on examples/ops-world with the real `denv` command:
# denv up, login, project create, deploy alpha with its phases live, fork, exec, files put and get,
# snapshot mid-episode and fork from it, a scripted agent answer, rollback, and the phase log.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# One run at a time: a second waits for the first (the engine, the registry and the ports are shared).
DENV_LOCK=run source "$ROOT/scripts/run-lock.sh"
cd "$ROOT"
# Only what the journey uses: the tests' images and packages are the test command's.
bash scripts/prepare.sh main
source scripts/ensure-node.sh
node scripts/journey.ts
