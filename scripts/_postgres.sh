#!/usr/bin/env bash
# Sourced by test.sh: make sure the PostgreSQL the tests use answers.
# SCALEBENCH_TEST_POSTGRES_URL overrides the default server (postgres@127.0.0.1:5432).
# A local Debian cluster that is down is started; anything else is a clear failure.
# The psql client (init.sql of the compose stack is run through it) is installed when missing.
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
if ! command -v psql >/dev/null; then
  echo "installing postgresql-client (psql) for the deployment tests"
  apt_install postgresql-client \
    || echo "psql is missing and could not be installed here; apt-get install postgresql-client" >&2
fi
if [ -n "${SCALEBENCH_TEST_POSTGRES_URL:-}" ]; then
  return 0
fi
if command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; then
  return 0
fi
if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
  version=$(ls /etc/postgresql | sort -V | tail -1)
  echo "starting the local PostgreSQL $version cluster for the tests"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return 0
    sleep 1
  done
fi
echo "PostgreSQL is not answering on 127.0.0.1:5432 and could not be started here." >&2
echo "Start one (e.g. 'docker compose up -d postgres') or set SCALEBENCH_TEST_POSTGRES_URL." >&2
exit 1
