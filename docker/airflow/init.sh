#!/usr/bin/env bash
# airflow-init: what the long-running services need before they start. The
# compose file runs it on every `docker compose up`; every step is idempotent.
#
#   0. refuse .env.example's publicly known secrets
#   1. check the settings the DAGs read (a bad one fails here, naming it,
#      rather than as a DAG import error later) and the Kubernetes connection
#   2. airflow db migrate                       (Airflow's metadata database)
#   3. scalebench db upgrade                    (the results database's schema)
#   4. scalebench db grant-readonly <dashboard> (SELECT on the results tables)
#   5. airflow pools set --include-deferred <pool> <max workers>   (one slot per worker /
#      GPU; a group deferred to the triggerer keeps its slots)
#   6. the Airflow UI's admin password (simple auth manager's passwords file)
#
# Environment: see .env.example and the compose file.
set -euo pipefail

say() { printf 'airflow-init: %s\n' "$*"; }
fail() { printf 'airflow-init: %s\n' "$*" >&2; exit 2; }

# 0. No secret may still be .env.example's: those values are public. Every variable
#    marked "local development only" there is compared with the one given here.
example=${SCALEBENCH_ENV_EXAMPLE:-/opt/scalebench/env.example}
[ -r "$example" ] || fail "cannot read $example (.env.example, which the compose file mounts) to check that no secret still has its example value"
public=()
marked=0
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in
    "# local development only"*) marked=1; continue ;;
    \#* | "") continue ;;
  esac
  if [ "$marked" = 1 ]; then
    name=${line%%=*}
    if [ -n "${!name:-}" ] && [ "${!name}" = "${line#*=}" ]; then public+=("$name"); fi
  fi
  marked=0
done <"$example"
if [ "${#public[@]}" -gt 0 ]; then
  fail "refusing to start: ${public[*]} still have the publicly known values of .env.example. Put new ones in .env (a secret: python3 -c \"import secrets; print(secrets.token_urlsafe(32))\"; AIRFLOW_FERNET_KEY: python3 -c \"import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())\"); database passwords must be set before the postgres volume is first created (or changed there too: see .env.example)"
fi

for name in AIRFLOW__DATABASE__SQL_ALCHEMY_CONN SCALEBENCH_DATABASE_URL \
            SCALEBENCH_DASHBOARD_DB_USER AIRFLOW_ADMIN_USER AIRFLOW_ADMIN_PASSWORD \
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE; do
  [ -n "${!name:-}" ] || fail "$name is not set (see .env.example)"
done
pool=${SCALEBENCH_POOL:-scalebench_workers}
slots=${SCALEBENCH_MAX_WORKERS:-32}

say "checking the scalebench settings"
python - <<'PY'
import json
import os
import sys

from operators.kubernetes import KubernetesSettings
from scalebench import config
from scalebench.nightly import NightlySettings

try:
    config.max_workers()
    NightlySettings.from_env()
    KubernetesSettings.from_env()
except ValueError as exc:
    sys.exit(f"airflow-init: {exc}")

# The Kubernetes launcher's connection, when it is given as an environment variable.
conn_id = os.environ.get("SCALEBENCH_K8S_CONN_ID", "").strip() or "kubernetes_default"
variable = "AIRFLOW_CONN_" + conn_id.upper()
raw = os.environ.get(variable, "").strip()
if raw:
    where = f"{variable}: "
    try:
        conn = json.loads(raw)
    except ValueError as exc:
        sys.exit(f"airflow-init: {where}not JSON ({exc}); see .env.example")
    if not isinstance(conn, dict) or conn.get("conn_type") != "kubernetes":
        sys.exit(f'airflow-init: {where}expected {{"conn_type": "kubernetes", "extra": {{...}}}}')
    extra = conn.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    given = [k for k in ("in_cluster", "kube_config_path", "kube_config") if extra.get(k)]
    if len(given) > 1:
        sys.exit(f"airflow-init: {where}{' and '.join(given)} exclude each other")
    path = extra.get("kube_config_path")
    if path and not os.access(path, os.R_OK):
        sys.exit(
            f"airflow-init: {where}kube_config_path {path} is not a readable file in the "
            "container: put the kube config where SCALEBENCH_KUBE_CONFIG_DIR points (mounted at "
            "/opt/scalebench/kube) and make it readable by AIRFLOW_UID"
        )
    print(f"airflow-init: {variable}: {', '.join(given) or 'default credentials'}")
PY

say "migrating the Airflow metadata database"
airflow db migrate

say "migrating the results database"
scalebench db upgrade

say "granting the dashboard's role ${SCALEBENCH_DASHBOARD_DB_USER} read-only access"
scalebench db grant-readonly "${SCALEBENCH_DASHBOARD_DB_USER}"

say "pool ${pool}: ${slots} slot(s)"
airflow pools set --include-deferred "${pool}" "${slots}" "scalebench: one slot per worker (GPU)"

say "admin login of the Airflow UI: ${AIRFLOW_ADMIN_USER}"
python - <<'PY'
import json
import os
from pathlib import Path

path = Path(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
path.parent.mkdir(parents=True, exist_ok=True)
passwords = {os.environ["AIRFLOW_ADMIN_USER"]: os.environ["AIRFLOW_ADMIN_PASSWORD"]}
new = path.with_name(path.name + ".new")
fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w", encoding="utf-8") as stream:
    stream.write(json.dumps(passwords) + "\n")
new.chmod(0o600)
new.replace(path)
PY

say "done"
