#!/usr/bin/env bash
# Sourced by test.sh: make sure the PostgreSQL the tests use answers.
# SCALEBENCH_TEST_POSTGRES_URL overrides the default server (postgres@127.0.0.1:5432).
# The server package (the tests also start clusters of their own with its pg_ctl) and the
# psql client (init.sql of the compose stack is run through it) are installed when missing.
# A local Debian cluster that is down is started. Where no server answers and none can be
# started, the run gets a cluster of its own: initdb into a temporary folder (trust
# authentication, 127.0.0.1 only, on a free port), stopped and removed when the run ends.
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
if ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || ! command -v psql >/dev/null; then
  echo "installing postgresql (server and psql) for the database tests"
  apt_install postgresql postgresql-client \
    || echo "PostgreSQL could not be installed here; apt-get install postgresql" >&2
fi
if [ -n "${SCALEBENCH_TEST_POSTGRES_URL:-}" ]; then
  return 0
fi
if command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; then
  return 0
fi
if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ] \
  && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
  version=$(ls /etc/postgresql | sort -V | tail -1)
  echo "starting the local PostgreSQL $version cluster for the tests"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return 0
    sleep 1
  done
fi

# A cluster of this run's own.
pg_bin=$(compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" | sort -V | tail -1 | xargs -r dirname || true)
if [ -z "$pg_bin" ]; then
  echo "PostgreSQL is not answering on 127.0.0.1:5432 and its server is not installed." >&2
  echo "Install it (apt-get install postgresql) or set SCALEBENCH_TEST_POSTGRES_URL." >&2
  exit 1
fi
pg_root=$(mktemp -d "${TMPDIR:-/tmp}/scalebench-test-pg-XXXXXX")
as_owner=()
if [ "$(id -u)" -eq 0 ]; then  # initdb and the server refuse to run as root
  chown postgres "$pg_root"
  as_owner=(runuser -u postgres --)
fi
pg_port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "starting a PostgreSQL cluster of the test run's own on 127.0.0.1:$pg_port ($pg_root)"
"${as_owner[@]}" "$pg_bin/initdb" -D "$pg_root/data" -U postgres --auth=trust -E UTF8 >/dev/null
"${as_owner[@]}" "$pg_bin/pg_ctl" -D "$pg_root/data" -l "$pg_root/server.log" -w start \
  -o "-p $pg_port -k $pg_root -c listen_addresses=127.0.0.1" >/dev/null
stop_test_postgres() {
  "${as_owner[@]}" "$pg_bin/pg_ctl" -D "$pg_root/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$pg_root"
}
trap stop_test_postgres EXIT
export SCALEBENCH_TEST_POSTGRES_URL="postgresql+psycopg2://postgres@127.0.0.1:$pg_port/postgres"
