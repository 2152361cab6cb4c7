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
if [ "$#" -gt 0 ]; then
  python -m pytest "$@"
  exit
fi
# The whole suite in two runs. The quick tests go two at a time (pytest-xdist; each test file
# stays on one process, so a file's tests never race each other for the host's network
# namespaces or firewall rules). Then the slow ones, one at a time: they train, time
# collectives or measure contention, and another test beside them would be measured too.
# Both always run, so that one run's failures never hide the other's.
status=0
python -m pytest -m "not slow and not stack" -n 2 --dist loadfile || status=$?
python -m pytest -m "slow and not stack" || status=$?
exit "$status"
