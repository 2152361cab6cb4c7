#!/usr/bin/env bash
# Build local base images from Debian's packages, for machines that cannot pull
# python:3.11-slim-bookworm or postgres:16 from Docker Hub (an offline site, a
# mirror of Debian only). Needs root (mmdebstrap, docker) and Debian's mirror.
#
#   docker/bases.sh            build what is missing, print the settings to use (on
#                              standard output; what it does goes to standard error)
#   docker/bases.sh --rebuild  build all three again
#
# Images (tags are the defaults; SCALEBENCH_BASE_PREFIX changes "scalebench-"):
#   scalebench-debian:bookworm        minbase Debian 12, from mmdebstrap | docker import
#   scalebench-python:3.11-bookworm   + python3 and a virtual environment on PATH
#                                     (docker/bases/python.Dockerfile)
#   scalebench-postgres:15-bookworm   + postgresql-15 behind the public image's
#                                     environment contract (docker/bases/postgres.Dockerfile)
#
# Then point the compose file at them, in .env or the environment:
#   SCALEBENCH_PYTHON_BASE=scalebench-python:3.11-bookworm
#   SCALEBENCH_POSTGRES_IMAGE=scalebench-postgres:15-bookworm
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

prefix=${SCALEBENCH_BASE_PREFIX:-scalebench-}
debian="${prefix}debian:bookworm"
python="${prefix}python:3.11-bookworm"
postgres="${prefix}postgres:15-bookworm"
rebuild=0
[ "${1:-}" = "--rebuild" ] && rebuild=1

fail() { printf 'docker/bases.sh: %s\n' "$*" >&2; exit 1; }
have() { [ "$rebuild" = 0 ] && docker image inspect "$1" >/dev/null 2>&1; }

docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info failed)"

if ! have "$debian"; then
  command -v mmdebstrap >/dev/null || fail "mmdebstrap is missing (Debian: apt-get install mmdebstrap)"
  echo "bases: $debian from Debian's packages (mmdebstrap, about a minute)" >&2
  log=$(mktemp)
  if ! mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm - 2>"$log" \
      | docker import --message "minbase Debian bookworm (docker/bases.sh)" - "$debian" >/dev/null; then
    tail -5 "$log" >&2
    rm -f "$log"
    fail "mmdebstrap or docker import failed (above)"
  fi
  rm -f "$log"
fi

for pair in "python:$python" "postgres:$postgres"; do
  name=${pair%%:*} tag=${pair#*:}
  if ! have "$tag"; then
    echo "bases: $tag (docker/bases/$name.Dockerfile)" >&2
    DOCKER_BUILDKIT=0 docker build --quiet --build-arg "DEBIAN_BASE=$debian" \
      -f "docker/bases/$name.Dockerfile" -t "$tag" docker/bases >/dev/null \
      || fail "building $tag failed"
  fi
done

echo "SCALEBENCH_PYTHON_BASE=$python"
echo "SCALEBENCH_POSTGRES_IMAGE=$postgres"
