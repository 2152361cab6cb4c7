#!/usr/bin/env bash
# Set up and run the whole test suite (lint first). Extra arguments go to pytest,
# e.g. scripts/test.sh -m "not slow" or scripts/test.sh tests/test_records.py
set -euo pipefail
source "$(dirname "$0")/_env.sh" test
source scripts/_postgres.sh
source scripts/_chromium.sh
# torch.compile's CPU backend builds C++: the compiled-run tests need a compiler.
command -v g++ >/dev/null || apt_install g++ || echo "g++ is missing: the compiled-run tests will fail" >&2
# Shaped groups open a firewall that drops forwarded traffic (Docker's) for their bridge.
command -v iptables >/dev/null || apt_install iptables \
  || echo "iptables is missing: the emulated-network firewall tests will fail" >&2

# The Kustomize base and overlays of deploy/kubernetes are rendered with kubectl kustomize.
command -v kubectl >/dev/null || apt_install kubernetes-client \
  || echo "kubectl is missing: the Kustomize rendering tests will fail" >&2

ruff check .
ruff format --check .
lint-imports --no-cache
python -m pytest "$@"
