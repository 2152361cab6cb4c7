#!/usr/bin/env bash
# Set up and run the embedded default through Airflow: the Task 1a DAG (light)
# at 1 and 2 local workers, one repeat each (the default is three; one keeps
# this first look short), then the Task 0 DAG (all-reduce, light) at 2
# workers. Each is a real Airflow DAG run (`airflow dags test`, no scheduler
# needed) with Airflow's home in ./var/airflow; results go to ./var/results
# and the SQLite results database ./var/scalebench.db, and each sweep's table
# is printed from that database. Then the dashboard starts on localhost.
set -euo pipefail
source "$(dirname "$0")/_env.sh"

python -m cli.embedded task1a_resnet20_cifar10 '{"workers": [1, 2], "light": true, "repeats": 1}'
python -m cli.embedded task0_allreduce '{"workers": [2], "light": true}'

if [ -z "${SCALEBENCH_NO_DASHBOARD:-}" ]; then
  port=${SCALEBENCH_DASHBOARD_PORT:-8050}
  echo
  echo "dashboard: http://127.0.0.1:${port}/  (Ctrl-C stops it; SCALEBENCH_NO_DASHBOARD=1 skips it)"
  exec scalebench dashboard --host 127.0.0.1 --port "$port"
fi
