#!/usr/bin/env bash
# Everything both README commands need, each step skipped when already done (`prepare.sh main`:
# only what the main job uses; see setup-host.sh):
# Node 24, the npm dependencies, and the host (Docker engine, images, registry). The denvd
# executables (scripts/build-denvd.sh, with its aarch64 cross compiler) are built by the test
# command only: the installer tests serve them, the main job does not use them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=ensure-node.sh
source scripts/ensure-node.sh
lock_hash=$( (cat package-lock.json; node --version) | sha256sum | cut -c1-16)
if [ "$(cat node_modules/.denv-lock-hash 2>/dev/null)" != "$lock_hash" ]; then
  echo "[prepare] npm ci" >&2
  npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null
  echo "$lock_hash" >node_modules/.denv-lock-hash
fi
bash scripts/setup-host.sh "${1:-all}"
# The console's script and stylesheet (packages/console/dist), rebuilt when its sources changed.
node packages/console/src/console-assets.ts >/dev/null
