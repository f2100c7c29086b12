#!/bin/sh
# Puts `denv` on the PATH: a small launcher in $PREFIX/bin (default /usr/local) that runs this
# checkout's CLI, which brings Node 24 itself. Run it again after moving the checkout; remove it
# with `rm $PREFIX/bin/denv`. The Harbor adapter and shell completion (`denv completion bash`)
# need `denv` on the PATH.
set -eu
REPO=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
command -v node >/dev/null 2>&1 || {
  echo "install-cli: node is not on the PATH; run bash scripts/prepare.sh (or install Node) first" >&2
  exit 1
}
[ -f "$REPO/packages/cli/bin/denv.js" ] || {
  echo "install-cli: $REPO is not a denv checkout (no packages/cli/bin/denv.js)" >&2
  exit 1
}
[ -d "$REPO/node_modules" ] || {
  echo "install-cli: $REPO has no node_modules; run npm ci there (bash scripts/prepare.sh does)" >&2
  exit 1
}
mkdir -p "$PREFIX/bin"
tmp="$PREFIX/bin/.denv.$$"
# The checkout's path is written quoted, so one with spaces works; any node starts the launcher.
printf '#!/bin/sh\nexec node %s "$@"\n' "'$(printf '%s' "$REPO/packages/cli/bin/denv.js" | sed "s/'/'\\\\''/g")'" >"$tmp"
chmod 0755 "$tmp"
mv -f "$tmp" "$PREFIX/bin/denv"
echo "installed $PREFIX/bin/denv → $REPO/packages/cli/bin/denv.js ($("$PREFIX/bin/denv" --version))"
