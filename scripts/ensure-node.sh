# Sourced by the README's commands: puts Node 24 first on PATH. Where the machine's node is older
# (these machines ship Node 20, which is end-of-life) Node 24 comes from the npm registry's `node`
# package, installed once into a cache outside the checkout and reused by later runs and clones.
DENV_NODE_VERSION=$(cat "$(dirname "${BASH_SOURCE[0]}")/../.node-version")
DENV_NODE_CACHE=${DENV_NODE_CACHE:-/var/cache/denv/node-$DENV_NODE_VERSION}
_denv_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$_denv_major" -lt 24 ]; then
  if ! "$DENV_NODE_CACHE/node_modules/node/bin/node" --version >/dev/null 2>&1; then
    if ! command -v npm >/dev/null; then
      echo "[node] installing Debian's npm to fetch Node $DENV_NODE_VERSION" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
    fi
    echo "[node] installing Node $DENV_NODE_VERSION from the npm registry into $DENV_NODE_CACHE" >&2
    rm -rf "$DENV_NODE_CACHE" && mkdir -p "$DENV_NODE_CACHE"
    (cd "$DENV_NODE_CACHE" && echo '{"private":true}' >package.json &&
      npm install --prefer-offline --no-audit --no-fund --loglevel=error "node@$DENV_NODE_VERSION" >/dev/null)
    "$DENV_NODE_CACHE/node_modules/node/bin/node" --version >/dev/null ||
      { echo "[node] Node $DENV_NODE_VERSION did not install" >&2; return 1; }
  fi
  export PATH="$DENV_NODE_CACHE/node_modules/node/bin:$PATH"
fi
unset _denv_major
