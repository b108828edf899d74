#!/usr/bin/env bash
# Issue 37: the time from a rank's death to the job's next completed step, with --on-loss continue
# and restore (syncrun --elastic, Horovod's elastic loop) beside a restart from the checkpoint in
# the same run (bench/elastic.py says how each is taken).
#   bench/elastic.sh [--shapes 2x2,4x1] [--trials 3] [--steps 25] [--kill-step 10] [--model cnn|resnet18]
#                    [--build build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/elastic.py" "$@"
