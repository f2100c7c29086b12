#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (this project's CI machines have none).
#
# First half, anywhere: what nvidia-smi says, and what denvd reports to a server as this host's GPUs
# (`denvd gpus`: each GPU's index, UUID, model and memory, the driver, the device nodes, CDI devices
# and how the engine can pass them). Second half, where a Docker engine runs with the NVIDIA
# Container Toolkit or CDI: `denv up` (a control plane and this host), a one-service project asking
# for one GPU deployed, and what the container sees: the start phase's evidence (the GPU placement
# gave it, by UUID) and `nvidia-smi -L` run in it. Everything it makes is removed at the end.
#
#   bash scripts/gpu-check.sh            # after the repository's set-up (bash scripts/prepare.sh)
#   DENVD="node denvd.cjs" bash scripts/gpu-check.sh   # the first half with a bundled denvd
set -euo pipefail
cd "$(dirname "$0")/.."
node=${NODE:-node}
denvd=${DENVD:-"$node packages/denvd/bin/denvd.js"}

echo "== nvidia-smi -L"
nvidia-smi -L 2>&1 || echo "(nvidia-smi is not here or failed)"
echo "== nvidia-smi --query-gpu (what denvd asks)"
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits 2>&1 || true
echo "== denvd gpus"
$denvd gpus

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "== no Docker engine answers here: the deploy half is not run"
  exit 0
fi

work=$(mktemp -d)
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then
    kill "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  # denv up's storage pool is a mount inside the work directory.
  grep " $work" /proc/mounts | awk '{print $2}' | sort -r | xargs -r umount -l || true
  rm -rf "$work"
}
trap cleanup EXIT
image=${GPU_CHECK_IMAGE:-127.0.0.1:5000/denv/opsbox:bookworm}
mkdir -p "$work/gpu-check"
cat >"$work/gpu-check/compose.yaml" <<YAML
services:
  cuda:
    image: $image
    command: [sleep, infinity]
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: 1
              capabilities: [gpu, utility]
YAML
denv() { "$node" packages/cli/bin/denv.js "$@"; }
echo "== denv validate"
denv validate "$work/gpu-check"
export DENV_CONFIG="$work/cli.json"
port=${GPU_CHECK_PORT:-7799}
"$node" packages/cli/bin/denv.js up --port "$port" --data-dir "$work/up" --json >"$work/up.json" 2>"$work/up.log" &
up_pid=$!
for _ in $(seq 1 600); do
  grep -q '"api_key"' "$work/up.json" 2>/dev/null && break
  kill -0 "$up_pid" 2>/dev/null || { cat "$work/up.log"; exit 1; }
  sleep 0.5
done
server=$("$node" -e 'const u=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log(u.server)' "$work/up.json")
key=$("$node" -e 'const u=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log(u.api_key)' "$work/up.json")
denv login --server "$server" --api-key "$key" >/dev/null
echo "== denv host list"
denv host list
denv project create --kind service --source "$work/gpu-check" gpu-check >/dev/null
echo "== denv deploy (one GPU)"
denv deploy --project gpu-check --env alpha --wait || true
echo "== the start phase's GPUs, and nvidia-smi -L in the container"
curl -fsS -H "authorization: Bearer $key" "$server/v1/envs/gpu-check%2Falpha/deployments" |
  "$node" -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const d=JSON.parse(s).deployments[0];for(const p of d.phases)if(p.name==="place"||p.name==="start")console.log(p.name,p.status,JSON.stringify(p.name==="start"?Object.fromEntries(Object.entries(p.evidence?.containers??{}).map(([k,v])=>[k,v.gpus])):p.evidence?.gpus??p.reason));})' || true
denv exec gpu-check/alpha -- nvidia-smi -L || true
denv env destroy gpu-check/alpha >/dev/null 2>&1 || true
