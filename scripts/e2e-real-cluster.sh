#!/usr/bin/env bash
# Run gangscale's live-cluster checks against a REAL cluster. NOT run in CI
# (it needs Docker + kind, or a cluster of your own); see docs/live-cluster.md.
#
#   scripts/e2e-real-cluster.sh                      # kind, Kubernetes 1.36, gates on
#   K8S_VERSION=v1.35.0 scripts/e2e-real-cluster.sh  # 1.35: Workload v1alpha1 + spec.workloadRef
#   USE_CURRENT_CONTEXT=1 scripts/e2e-real-cluster.sh  # your kubeconfig's cluster (EKS...), gates already on
#
# Environment: K8S_VERSION (kindest/node tag, default v1.36.0), CLUSTER (kind
# cluster name), KEEP=1 (keep the kind cluster), FEATURE_GATES (override, e.g.
# "GenericWorkload" on releases where GangScheduling is gone), PYTHON.
# It creates namespace gangscale-e2e with one PodGroup/Workload and 3 pods that
# stay Pending (300 CPUs each: no real node has that many), then: `gangscale check`, `gangscale plan`,
# `gangscale dump` + plan from the dump, and the `realcluster` pytest tests.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
K8S_VERSION=${K8S_VERSION:-v1.36.0}
CLUSTER=${CLUSTER:-gangscale-e2e}
NS=gangscale-e2e
work=$(mktemp -d)
kubeconfig="$work/kubeconfig"

minor=$(echo "$K8S_VERSION" | sed -E 's/^v?1\.([0-9]+).*/\1/')
case "$minor" in
  35) api=v1alpha1 ;;
  36) api=v1alpha2 ;;
  *)  api=v1beta1 ;;
esac
gates=${FEATURE_GATES:-GenericWorkload GangScheduling}

cleanup() {
  if [[ -z "${USE_CURRENT_CONTEXT:-}" && -z "${KEEP:-}" ]]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [[ -n "${USE_CURRENT_CONTEXT:-}" ]]; then
  kubectl config view --raw --minify >"$kubeconfig"
else
  command -v kind >/dev/null || { echo "kind is not installed" >&2; exit 2; }
  {
    echo "kind: Cluster"
    echo "apiVersion: kind.x-k8s.io/v1alpha4"
    echo "featureGates:"
    for g in $gates; do echo "  $g: true"; done
    echo "runtimeConfig:"
    echo "  \"scheduling.k8s.io/$api\": \"true\""
    echo "nodes:"
    echo "- role: control-plane"
    echo "- role: worker"
  } >"$work/kind.yaml"
  kind create cluster --name "$CLUSTER" --image "kindest/node:$K8S_VERSION" --config "$work/kind.yaml" \
    --kubeconfig "$kubeconfig" --wait 120s
fi
export KUBECONFIG="$kubeconfig"

# ---------------------------------------------------------------- the gang
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
if [[ "$api" == v1alpha1 ]]; then
  link="workloadRef: {name: train, podGroup: workers}"
  kubectl apply -f - <<YAML
apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {name: train, namespace: $NS}
spec:
  podGroups:
  - name: workers
    policy: {gang: {minCount: 3}}
YAML
else
  link="schedulingGroup: {podGroupName: train}"
  kubectl apply -f - <<YAML
apiVersion: scheduling.k8s.io/$api
kind: PodGroup
metadata: {name: train, namespace: $NS}
spec:
  schedulingPolicy: {gang: {minCount: 3}}
YAML
fi
for i in 0 1 2; do
  kubectl apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: train-$i, namespace: $NS}
spec:
  $link
  containers:
  - name: worker
    image: registry.k8s.io/pause:3.10
    resources: {requests: {cpu: "300", memory: 8Gi}}
YAML
done
kubectl -n "$NS" get pod train-0 -o jsonpath='{.spec}' | grep -q -e schedulingGroup -e workloadRef \
  || { echo "FAIL: the API server dropped the pod's gang link (GenericWorkload off?)" >&2; exit 1; }

# ---------------------------------------------------------------- gangscale
cd "$here"
echo "== gangscale check"
status=0
$PYTHON -m gangscale check --kubeconfig "$kubeconfig" || status=$?
[[ $status -le 1 ]] || { echo "FAIL: check could not read the cluster" >&2; exit 1; }

echo "== gangscale plan (live)"
$PYTHON -m gangscale plan --kubeconfig "$kubeconfig" --nodegroups config/e2e/catalog.yaml -o json \
  --output-file "$work/plan.json"
echo "== gangscale dump + plan from the dump"
$PYTHON -m gangscale dump --kubeconfig "$kubeconfig" -n "$NS" --output-file "$work/dump.json"
$PYTHON -m gangscale plan --cluster "$work/dump.json" --nodegroups config/e2e/catalog.yaml -o json \
  --output-file "$work/plan-from-dump.json"
$PYTHON - "$work/plan.json" "$work/plan-from-dump.json" "$NS" <<'PY'
import json, sys
live, dumped, ns = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
gang = {g["name"]: g for g in live["gangs"] if g["namespace"] == ns}
name = "train/workers" if "train/workers" in gang else "train"
assert gang[name]["decision"] == "scale-up", gang
assert live["scaleUp"].get("e2e-huge") == 2, live["scaleUp"]
assert dumped["scaleUp"] == {"e2e-huge": 2}, dumped["scaleUp"]
print("plan ok:", name, live["scaleUp"])
PY

echo "== pytest -m realcluster"
GANGSCALE_E2E_KUBECONFIG="$kubeconfig" GANGSCALE_E2E_NAMESPACE="$NS" \
  $PYTHON -m pytest -q -m realcluster tests/kube/test_realcluster.py
echo "e2e: all checks passed against $(kubectl version -o json | $PYTHON -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
