-- PostgreSQL for scalebench: one database and one owner role per purpose, and a
-- login for the dashboard that reads, and may set a nightly finding's triage state.
--
--   AIRFLOW_DB_USER    (airflow)     owns AIRFLOW_DB_NAME (airflow): Airflow's metadata
--   SCALEBENCH_DB_USER (scalebench)  owns SCALEBENCH_DB_NAME (scalebench): the results;
--                                    its schema comes from `scalebench db upgrade`
--   SCALEBENCH_DASHBOARD_DB_USER (dashboard)  a login with no privileges here;
--                                    `scalebench db grant-readonly` (airflow-init) grants
--                                    it SELECT on the results tables, now and future,
--                                    and UPDATE of nightly_finding's state and note
--
-- The postgres image runs this file once, when its data volume is initialised
-- (/docker-entrypoint-initdb.d, as the superuser, psql with ON_ERROR_STOP). Names
-- and passwords come from the container's environment through psql's \getenv
-- (psql 15 or newer). It is idempotent: running it again changes nothing that
-- exists. Changing a password in .env later does NOT change an initialised
-- volume; run `ALTER ROLE <name> PASSWORD '...'` as postgres for that.

\set ON_ERROR_STOP on

\getenv airflow_user AIRFLOW_DB_USER
\getenv airflow_db AIRFLOW_DB_NAME
\getenv airflow_password AIRFLOW_DB_PASSWORD
\getenv results_user SCALEBENCH_DB_USER
\getenv results_db SCALEBENCH_DB_NAME
\getenv results_password SCALEBENCH_DB_PASSWORD
\getenv dashboard_user SCALEBENCH_DASHBOARD_DB_USER
\getenv dashboard_password SCALEBENCH_DASHBOARD_DB_PASSWORD

-- Names default to the usual ones; passwords must be given (and not be empty).
\if :{?airflow_user} \else \set airflow_user airflow \endif
\if :{?airflow_db} \else \set airflow_db airflow \endif
\if :{?results_user} \else \set results_user scalebench \endif
\if :{?results_db} \else \set results_db scalebench \endif
\if :{?dashboard_user} \else \set dashboard_user dashboard \endif
\if :{?airflow_password} \else \set airflow_password '' \endif
\if :{?results_password} \else \set results_password '' \endif
\if :{?dashboard_password} \else \set dashboard_password '' \endif

SELECT count(*) > 0 AS sb_missing, string_agg(name, ', ') AS sb_missing_names
FROM (VALUES ('AIRFLOW_DB_PASSWORD', :'airflow_password'),
             ('SCALEBENCH_DB_PASSWORD', :'results_password'),
             ('SCALEBENCH_DASHBOARD_DB_PASSWORD', :'dashboard_password')) AS given(name, value)
WHERE value = '' \gset
\if :sb_missing
  \warn 'scalebench init.sql: empty or not set in the postgres service''s environment:' :sb_missing_names
  SELECT 1 / 0 AS a_database_password_is_missing;
\endif

-- Roles (created once; an existing role keeps its password).
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'airflow_user', :'airflow_password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'airflow_user') \gexec
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'results_user', :'results_password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'results_user') \gexec
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'dashboard_user', :'dashboard_password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'dashboard_user') \gexec
-- Defence in depth: even with a stray grant, the dashboard's sessions cannot write.
SELECT format('ALTER ROLE %I SET default_transaction_read_only = on', :'dashboard_user') \gexec

-- Databases, each owned by its role (PostgreSQL 15+: the owner may create in
-- schema public, nobody else may).
SELECT format('CREATE DATABASE %I OWNER %I', :'airflow_db', :'airflow_user')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'airflow_db') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'results_db', :'results_user')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'results_db') \gexec

-- Only the owners connect; `scalebench db grant-readonly` adds CONNECT for the dashboard.
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'airflow_db') \gexec
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'results_db') \gexec
