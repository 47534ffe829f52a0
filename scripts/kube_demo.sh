#!/usr/bin/env bash
# The Kubernetes demo in one command, with no cluster: an emulated API server (real HTTP, the
# real `kubernetes` client), the sync loop, scheduling cycles and the dispatcher, in Kubernetes
# mode on its own SQLite database (var/kube-demo). Extra arguments go to `manage.py kube_demo`
# (--seconds, --interval, --port, --keep-running).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" ""
export KAI_VAR_DIR="${KAI_VAR_DIR:-$PWD/var/kube-demo}"
export KAI_CLUSTER_MODE=kubernetes
export KAI_KUBECONFIG="$KAI_VAR_DIR/kubeconfig"
export KAI_KUBE_DISPATCH_SECONDS=1
unset DATABASE_URL KAI_KUBE_IN_CLUSTER KAI_KUBE_CONTEXT
mkdir -p "$KAI_VAR_DIR"
exec .venv/bin/python manage.py kube_demo "$@"
