#!/usr/bin/env bash
# Sourced by stack-test.sh: make sure a Docker engine answers. Where none does, Debian's
# docker.io is installed (with iptables) and dockerd is started as root in the
# background, its log in a temporary folder. Anything that cannot be done ends the
# script with one line saying why (exit 1): the stack test never skips silently.
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

docker_fail() { echo "stack test: $*" >&2; exit 1; }

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null; then
    echo "installing docker.io (Debian's Docker engine) and iptables for the stack test"
    apt_install docker.io iptables mmdebstrap \
      || docker_fail "no Docker engine here and docker.io could not be installed (apt-get install docker.io needs root and Debian's packages)"
  fi
  [ "$(id -u)" -eq 0 ] || docker_fail "no Docker engine answers and starting dockerd needs root"
  DOCKERD_LOG=$(mktemp -d)/dockerd.log
  echo "starting dockerd (log: $DOCKERD_LOG)"
  setsid dockerd >"$DOCKERD_LOG" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 \
    || docker_fail "dockerd did not answer within 60 s: $(tail -1 "$DOCKERD_LOG")"
fi
if ! command -v mmdebstrap >/dev/null; then
  apt_install mmdebstrap || true  # docker/bases.sh says so if it is needed after all
fi
