#!/usr/bin/env bash
# Write a self-contained kube config for the service account scalebench-airflow
# (permissions: the Role scalebench-launcher in the scalebench namespace), for an
# Airflow that runs outside the cluster, e.g. docker-compose.yml's.
#
#   docker/kube/make-kubeconfig.sh [OUTPUT]        (default: docker/kube/config)
#
# Needs kubectl, its current context pointing at the cluster with rights to read
# Secrets in the namespace, and the manifests applied:
#   kubectl apply -k deploy/kubernetes/base && kubectl apply -f deploy/kubernetes/outside-cluster/
# SCALEBENCH_K8S_NAMESPACE (default scalebench) names the namespace; the API
# server address is the current context's (override with KUBE_SERVER).
set -euo pipefail

namespace=${SCALEBENCH_K8S_NAMESPACE:-scalebench}
secret=scalebench-airflow-token
out=${1:-"$(dirname "$0")/config"}

server=${KUBE_SERVER:-$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')}
[ -n "$server" ] || { echo "make-kubeconfig: no API server in the current kubectl context" >&2; exit 1; }

# The token controller fills the Secret shortly after it is created.
token=""
for _ in $(seq 1 30); do
  token=$(kubectl -n "$namespace" get secret "$secret" -o jsonpath='{.data.token}')
  [ -n "$token" ] && break
  sleep 1
done
[ -n "$token" ] || {
  echo "make-kubeconfig: secret $namespace/$secret has no token; apply deploy/kubernetes/outside-cluster/" >&2
  exit 1
}
ca=$(kubectl -n "$namespace" get secret "$secret" -o jsonpath='{.data.ca\.crt}')
token=$(printf '%s' "$token" | base64 --decode)

umask 077
cat > "$out" <<CONFIG
apiVersion: v1
kind: Config
clusters:
  - name: scalebench
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: scalebench-airflow
    user:
      token: $token
contexts:
  - name: scalebench
    context:
      cluster: scalebench
      user: scalebench-airflow
      namespace: $namespace
current-context: scalebench
CONFIG
echo "make-kubeconfig: wrote $out (service account $namespace/scalebench-airflow, server $server)"
