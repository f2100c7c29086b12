#!/usr/bin/env bash
# The README's test command: prepares the machine (Node 24, dependencies, Docker engine, images,
# registry), then type-checks, lints and runs every test (unit and end-to-end, on the real engine).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/prepare.sh
source scripts/ensure-node.sh
npm test
