#!/usr/bin/env bash
# The ray testbed on a CUDA cluster, in one command per machine (see docs/ray.md).
#
#   scripts/ray_gpu_cluster.sh                 # this machine alone: start Ray on its GPU, run the check, stop Ray
#   scripts/ray_gpu_cluster.sh head            # start the head node on this machine, print the join command
#   scripts/ray_gpu_cluster.sh worker HOST:PORT  # join this machine to the head
#   scripts/ray_gpu_cluster.sh check           # (on the head, once workers joined) run the check on the cluster
#   scripts/ray_gpu_cluster.sh stop            # ray stop on this machine
#
# Each machine offers ONE GPU to Ray (GPU=<index>, default 0) and declares that GPU's memory as the
# custom resource vram_mb, so Ray never co-locates GPU tasks beyond it. The check runs S2 under the
# agent on the cluster's GPUs (--size ${SIZE:-paper}), then K=4 concurrent invocations (throughput),
# writing everything under ${OUT:-ray-gpu-out}/. Needs: pip install -e '.[tools,ray]' on every machine.
set -euo pipefail

GPU="${GPU:-0}"
SIZE="${SIZE:-paper}"
OUT="${OUT:-ray-gpu-out}"
PORT="${PORT:-6379}"
ROUNDS="${ROUNDS:-5}"

die() { echo "error: $*" >&2; exit 1; }

gpu_mb() {
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this machine has no CUDA driver"
  nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i "$GPU" | head -1 | tr -d ' '
}

start_node() {  # $@: ray start arguments (--head ... or --address ...)
  local mb
  mb="$(gpu_mb)"
  [[ "$mb" =~ ^[0-9]+$ ]] || die "cannot read the memory of GPU $GPU (nvidia-smi said: $mb)"
  CUDA_VISIBLE_DEVICES="$GPU" ray start "$@" --num-gpus 1 --resources "{\"vram_mb\": $mb}" \
    --system-config '{"idle_worker_killing_time_threshold_ms": 3600000}' --disable-usage-stats
  echo "node offers GPU $GPU with vram_mb=$mb"
}

check() {
  mkdir -p "$OUT"
  ray status || die "no Ray cluster here: run '$0 head' first"
  agentsched run S2 --testbed ray --ray-address auto --size "$SIZE" --policy agent-rules --rounds "$ROUNDS" \
    --repeats 3 --json "$OUT/run_S2.json" | tee "$OUT/run_S2.txt"
  agentsched throughput S2 --ray-address auto --size "$SIZE" --concurrency 4 --batches 5 \
    --mapping "A=gpu_now,B=cpu,C=cpu,D=gpu_now" --json "$OUT/throughput_S2.json" | tee "$OUT/throughput_S2.txt"
  echo "wrote $OUT/"
}

case "${1:-all}" in
  head)
    start_node --head --port "$PORT"
    echo "join other machines with: $0 worker $(hostname -I 2>/dev/null | awk '{print $1}'):$PORT"
    ;;
  worker)
    [[ $# -ge 2 ]] || die "usage: $0 worker HEAD_HOST:PORT"
    start_node --address "$2"
    ;;
  check) check ;;
  stop) ray stop ;;
  all)
    start_node --head --port "$PORT"
    trap 'ray stop >/dev/null 2>&1 || true' EXIT
    check
    ;;
  *) die "unknown command '$1' (valid: head, worker HOST:PORT, check, stop, or none)" ;;
esac
