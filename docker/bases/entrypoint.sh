#!/bin/sh
# Entrypoint of the Debian-built PostgreSQL base (postgres.Dockerfile): the same
# environment contract as the public postgres image, written for Debian's
# postgresql-15. Runs as root, then becomes the postgres user.
#
#   first start (empty $PGDATA): initdb with POSTGRES_USER / POSTGRES_PASSWORD,
#     password (scram-sha-256) logins from any address, POSTGRES_DB created, then
#     /docker-entrypoint-initdb.d/*.sql and *.sh run against a server that
#     listens on its socket only, so nobody connects before they are done
#   every start: the server in the foreground, listening on every address
set -eu

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

if [ "${1:-postgres}" != "postgres" ]; then
  exec "$@"
fi
[ "$#" -gt 0 ] && shift

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
install -d -o postgres -g postgres -m 0700 "$PGDATA"
install -d -o postgres -g postgres -m 0775 /var/run/postgresql

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres-entrypoint: POSTGRES_PASSWORD is empty or not set; refusing to create a database without one" >&2
    exit 1
  fi
  password_file=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$password_file"
  chown postgres "$password_file"
  as_postgres initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$password_file" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"

  as_postgres pg_ctl --pgdata="$PGDATA" --wait --silent \
    --options="-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" start
  if [ "$POSTGRES_DB" != "postgres" ]; then
    # On standard input: psql interpolates :"db" there, not in --command.
    printf 'CREATE DATABASE :"db";\n' | as_postgres psql --quiet --username="$POSTGRES_USER" \
      --dbname=postgres --set=ON_ERROR_STOP=1 --set=db="$POSTGRES_DB" >/dev/null
  fi
  for file in /docker-entrypoint-initdb.d/*; do
    case "$file" in
      *.sql) echo "postgres-entrypoint: running $file"
             as_postgres psql --quiet --username="$POSTGRES_USER" --dbname="$POSTGRES_DB" \
               --set=ON_ERROR_STOP=1 --no-psqlrc --file="$file" ;;
      *.sh)  echo "postgres-entrypoint: running $file"; as_postgres sh "$file" ;;
      *)     [ -e "$file" ] && echo "postgres-entrypoint: ignoring $file" ;;
    esac
  done
  as_postgres pg_ctl --pgdata="$PGDATA" --wait --silent --mode=fast stop
  echo "postgres-entrypoint: database initialised"
fi

exec setpriv --reuid=postgres --regid=postgres --init-groups -- \
  postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@"
