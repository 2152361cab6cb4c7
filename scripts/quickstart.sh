#!/usr/bin/env bash
# Set up and run the embedded default: a light Task 1a sweep at 1 and 2 local
# workers, then Task 0 (all-reduce) light with 2 workers. Results go under
# ./var/results (SCALEBENCH_RESULTS_URI); each sweep prints its table.
set -euo pipefail
source "$(dirname "$0")/_env.sh"

scalebench run task1a-resnet20-cifar10 --light --workers 1,2
scalebench run task0-allreduce --light --workers 2
