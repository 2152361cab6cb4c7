#!/usr/bin/env bash
# Set up and run the whole test suite (lint first). Extra arguments replace the two runs
# below with one pytest run of them, e.g. scripts/test.sh -m "not slow" or
# scripts/test.sh tests/test_records.py
set -euo pipefail
source "$(dirname "$0")/_env.sh" test
source scripts/_postgres.sh
source scripts/_chromium.sh
# torch.compile's CPU backend builds C++: the compiled-run tests need a compiler.
command -v g++ >/dev/null || apt_install g++ || echo "g++ is missing: the compiled-run tests will fail" >&2
# Shaped groups open a firewall that drops forwarded traffic (Docker's) for their bridge.
# The package can be there with its alternatives never set (no iptables on PATH): set them.
command -v iptables >/dev/null || apt_install iptables || true
command -v iptables >/dev/null || update-alternatives --auto iptables >/dev/null 2>&1 || true
command -v iptables >/dev/null \
  || echo "iptables is missing: the emulated-network firewall tests will fail" >&2

# The Kustomize base and overlays of deploy/kubernetes are rendered with kubectl kustomize.
command -v kubectl >/dev/null || apt_install kubernetes-client \
  || echo "kubectl is missing: the Kustomize rendering tests will fail" >&2

ruff check .
ruff format --check .
lint-imports --no-cache
# SCALEBENCH_COVERAGE=1: line and branch coverage of the product folders (pyproject.toml's
# [tool.coverage]), child processes included, kept outside the repository and reported at the end.
cov=()
if [ "${SCALEBENCH_COVERAGE:-}" = 1 ]; then
  COVERAGE_FILE="$(mktemp -d)/.coverage"
  export COVERAGE_FILE
  cov=(--cov --cov-append --cov-report=)
fi
# SCALEBENCH_TEST_CPU=1: every test's processor seconds, its own and those of the processes it
# started (tests/processor_time.py), and at the end the costliest tests and files.
machine_cpu_s() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{print ($2 + $3 + $4 + $7 + $8) / hz}' /proc/stat; }
cpu_report() {
  [ -n "${SCALEBENCH_TEST_CPU_DIR:-}" ] || return 0
  python tests/processor_time.py "$SCALEBENCH_TEST_CPU_DIR" \
    --machine-s "$(awk -v a="$machine_before" -v b="$(machine_cpu_s)" 'BEGIN{print b - a}')" || true
}
if [ "${SCALEBENCH_TEST_CPU:-}" = 1 ]; then
  SCALEBENCH_TEST_CPU_DIR=$(mktemp -d)
  export SCALEBENCH_TEST_CPU_DIR
  machine_before=$(machine_cpu_s)
fi
if [ "$#" -gt 0 ]; then
  status=0
  python -m pytest "${cov[@]}" "$@" || status=$?
  cpu_report
  exit "$status"
fi
# The whole suite in two runs. First every test but the timing ones, three at a time
# (SCALEBENCH_TEST_PROCESSES sets how many: more on a machine with more cores;
# pytest-xdist; on 2 cores the third fills what the other two leave idle while they wait for
# a process, a server or one of Airflow's 1 s polls: 8:21 against 8:48 two at a time on a
# 2-core AMD EPYC). The slow ones that train or start groups go one by one and first; the
# quick ones follow file by file, so that a file's tests never race each other for the host's
# network namespaces or firewall rules (tests/slow_first.py). Then, one at a time, the tests
# marked timing: they assert on a timing or on contention, or change the host's firewall (or
# build emulated links), and another test beside them would be measured too. That run
# collects only the files that mark some test timing.
# Both runs always run, so that one run's failures never hide the other's.
# In the run that shares the cores, idle OpenMP threads sleep instead of spinning: a spinning
# thread burns the turns of the test beside it (the slow tests took 955 s spinning, 710 s not,
# on a 2-core AMD EPYC). The timing run keeps torch's default, as a user's run has it.
status=0
OMP_WAIT_POLICY=PASSIVE python -m pytest "${cov[@]}" -m "not timing and not stack" \
  -n "${SCALEBENCH_TEST_PROCESSES:-3}" --slow-first || status=$?
mapfile -t timing_files < <(grep -l "mark\.timing" tests/test_*.py)
python -m pytest "${cov[@]}" -m "timing and not stack" "${timing_files[@]}" || status=$?
cpu_report
if [ "${#cov[@]}" -gt 0 ]; then
  echo "coverage: $(coverage report --format=total --precision 1) % of the product folders' lines" \
    "and branches; the data: $COVERAGE_FILE (coverage report -m, or html, with COVERAGE_FILE set)"
fi
exit "$status"
