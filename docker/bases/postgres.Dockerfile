# A stand-in for the postgres image built from Debian's packages only, for
# machines that cannot pull from Docker Hub (docker/bases.sh builds it). It
# keeps the contract the compose file relies on (docker/bases/entrypoint.sh):
# POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB; the data directory
# /var/lib/postgresql/data; /docker-entrypoint-initdb.d/*.sql run once, through
# psql with ON_ERROR_STOP, on an empty data directory; pg_isready on PATH. It is
# PostgreSQL 15 (Debian 12's), not 16: a data volume made by one does not start
# with the other.
ARG DEBIAN_BASE=scalebench-debian:bookworm
FROM ${DEBIAN_BASE}

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       postgresql-15=15.* \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
    && install -d -o postgres -g postgres -m 0775 /var/run/postgresql \
    && install -d -m 0755 /docker-entrypoint-initdb.d

COPY entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint"]
CMD ["postgres"]
