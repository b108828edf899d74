#!/usr/bin/env bash
# Training under load imbalance: the quickstart's digits model (deploy/local/train_digits.py) on
# 2 nodes x 4 ranks, each step one rank (drawn with a seed every rank shares) sleeping 50 to 200 ms
# after its backward pass. Synchronous DistributedOptimizer against eager-SGD's solo and majority
# partial allreduce (models averaged every --full-sync-every steps and at the end): step time and
# held-out accuracy after the same number of epochs. Prints a table and one JSON line.
#   bench/partial_training.sh [--nodes 2] [--ranks 8] [--epochs 12] [--delay-ms 50,200]
#                             [--full-sync-every 6] [--lr 0.04] [--momentum 0.5] [--build build]
# (--lr is per rank, scaled by the number of ranks. SGD with momentum 0.5 and 0.04 x 8 trains the
# 8-rank job to 96 % in 12 epochs; with the quickstart's momentum 0.9, stale gradients make partial
# training unstable here.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2 ranks=8 epochs=12 delay=50,200 every=6 lr=0.04 momentum=0.5 build="$here/../build"
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --delay-ms) delay=$2; shift 2 ;;
    --full-sync-every) every=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --momentum) momentum=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "partial_training.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
run() {
  "$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn -- /usr/bin/python3 \
    "$here/../deploy/local/train_digits.py" --epochs "$epochs" --lr "$lr" --momentum "$momentum" --delay-ms "$delay" --min-accuracy 0 --no-status \
    --json "$@" 2>/dev/null | grep '^{'
}
results=("$(run)" "$(run --partial solo --full-sync-every "$every")" "$(run --partial majority --full-sync-every "$every")")
/usr/bin/python3 - "${results[@]}" <<'PY'
import json, sys
rows = [json.loads(a) for a in sys.argv[1:]]
sync = rows[0]
print(f"# digits under imbalance: {sync['ranks']} ranks on {sync['nodes']} nodes, {sync['epochs']} epochs "
      f"({sync['steps']} steps per rank), one rank per step sleeps {sync['delay_ms']} ms")
print(f"# {'optimizer':<28} {'step ms':>8} {'speedup':>8} {'accuracy %':>11} {'vs sync':>8} {'mean NAP':>9}")
for r in rows:
    label = "synchronous" if r["mode"] == "synchronous" else \
        f"{r['mode']} (full sync every {r['full_sync_every']})"
    r["speedup"] = round(sync["step_ms"] / r["step_ms"], 2)
    r["accuracy_delta"] = round(r["accuracy_pct"] - sync["accuracy_pct"], 2)
    print(f"  {label:<28} {r['step_ms']:>8.1f} {r['speedup']:>7.2f}x {r['accuracy_pct']:>11.2f} "
          f"{r['accuracy_delta']:>+8.2f} {r['mean_nap']:>9.2f}")
by = {r["mode"]: r for r in rows}
print(f"# goals: majority >= 1.3x faster per step ({by['majority']['speedup']}x) with accuracy within 1 point "
      f"({by['majority']['accuracy_delta']:+}); solo >= 1.5x ({by['solo']['speedup']}x)")
print(json.dumps({"bench": "partial_training", "rows": rows}))
PY
