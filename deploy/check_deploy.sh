#!/usr/bin/env bash
# Checks the deploy/ files offline, printing each command it runs:
#
#   prometheus  promtool check config (both scrape configs, with the rules),
#               promtool check rules, promtool test rules (every alert fires
#               and stays quiet where it should);
#   grafana     deploy/grafana/check_dashboard.py on the dashboard (structure,
#               variables, metric names, every query through promtool), and a
#               broken copy of it, which must fail naming the panel;
#   k8s         kubectl kustomize of the base and the dev overlay; every object
#               through kubernetes-validate --strict against Kubernetes
#               $K8S_VERSIONS (but cert-manager's Issuers and Certificates,
#               whose CRD schemas it does not bundle: check_k8s.py checks
#               their fields and chain); deploy/k8s/check_k8s.py (what a
#               schema cannot see: mTLS mounts and roles, NetworkPolicies,
#               and that prometheus-k8s.yml's SRV names are the dev overlay's
#               Services); typo'd copies (`replica:`, `prots:`) and a wrong
#               type, which kubernetes-validate must reject; a cluster.yaml
#               that disagrees with the StatefulSets, a typo'd Certificate
#               field, a worker mounting the coordinator's certificate and a
#               PS port open to every namespace, which check_k8s.py must
#               reject.
#
#   kubeflow    kubectl kustomize deploy/k8s/kubeflow; its ConfigMap and
#               NetworkPolicy through kubernetes-validate --strict; the TFJob
#               through deploy/k8s/kubeflow/check_tfjob.py (the TFJob CRD's
#               schema, each replica's pod template as a PodTemplate, and
#               pscluster's rules for it); typo'd and wrong copies of the
#               TFJob, which it must reject.
#
# Usage: deploy/check_deploy.sh [prometheus|grafana|k8s|kubeflow|all]...   (default all)
# Run from the source tree, or as //deploy:*_test under Bazel. A missing tool
# (promtool, kubectl, kubernetes-validate; ./setup.sh installs them) fails
# the check naming it. Exit 0 only if every check passed.
set -uo pipefail

K8S_VERSIONS=${K8S_VERSIONS:-"1.32.0 1.37.0"}   # kubectl's version here, and the newest bundled

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  here="$TEST_SRCDIR/${TEST_WORKSPACE:-__main__}/deploy"
fi
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/check_deploy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export HOME=${HOME:-$tmp}
python=/usr/bin/python3   # Debian's: has PyYAML (pyenv's python3 may not)
[[ -x $python ]] || python=python3

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Runs a command, printing it first; fails the check if it fails.
run() {
  echo "+ $*"
  "$@" || { fail "$* (exit $?)"; return 1; }
}

# Runs a command that must fail and print a line matching $1.
run_must_fail() {
  local want=$1
  shift
  echo "+ $*   # must fail with /$want/"
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  if ((rc == 0)); then
    fail "$* passed, but must fail"
  elif ! grep -qE -- "$want" <<<"$out"; then
    fail "$* failed without /$want/"
  else
    echo "    (failed as it must)"
  fi
}

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    fail "$1 not found on PATH ($PATH): $2"
    return 1
  fi
}

check_prometheus() {
  echo "== prometheus"
  need promtool "Debian package prometheus; ./setup.sh installs it" || return
  # promtool resolves rule_files relative to each config file.
  run promtool check config "$here/prometheus/prometheus.yml" "$here/prometheus/prometheus-k8s.yml"
  run promtool check rules "$here/prometheus/rules/pscluster.rules.yml"
  # test rules runs from the test file's directory (rule_files are relative).
  (cd "$here/prometheus/rules" && run promtool test rules pscluster.rules.test.yml) ||
    fail "promtool test rules"
}

check_grafana() {
  echo "== grafana"
  need promtool "Debian package prometheus; ./setup.sh installs it" || return
  run "$python" "$here/grafana/check_dashboard.py" "$here/grafana/pscluster.json" \
    --rules "$here/prometheus/rules/pscluster.rules.yml"
  # Negative case: an unclosed parenthesis in the RPC latency panel, and a
  # typo'd metric name in the PS bytes panel.
  "$python" - "$here/grafana/pscluster.json" "$tmp/broken.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["panels"]:
    if p["title"] == "RPC latency":
        p["targets"][0]["expr"] = p["targets"][0]["expr"].rstrip(")")
    if p["title"] == "PS bytes pushed and pulled":
        p["targets"][0]["expr"] = p["targets"][0]["expr"].replace("bytes_pushed", "bytes_push")
json.dump(d, open(sys.argv[2], "w"))
PY
  run_must_fail "panel [0-9]+ 'RPC latency' target A: promtool check rules rejects" \
    "$python" "$here/grafana/check_dashboard.py" "$tmp/broken.json"
  run_must_fail "'PS bytes pushed and pulled' target A: metric pscluster_ps_bytes_push_total" \
    "$python" "$here/grafana/check_dashboard.py" "$tmp/broken.json"
}

# skip REASON: reports this check as SKIPPED (a skipped test case in the
# XML Bazel reads, and on stdout) and ends the script with success. Only for a
# tool no package registry here has: it never passes silently.
skip() {
  echo "SKIPPED: $1"
  if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
    cat > "$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="deploy" tests="1" skipped="1">
<testcase name="${area}_manifests" classname="deploy"><skipped message="$1"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}

check_k8s() {
  echo "== k8s"
  # kubectl is not a Debian 12 package (the project's machines ship it in
  # their base image; PyPI has no kustomize): where it is missing the check
  # is skipped, saying so.
  command -v kubectl >/dev/null 2>&1 ||
    skip "kubectl (with kustomize) is not installed and no Debian 12 package or PyPI project provides it"
  need kubectl "kubectl >= 1.27 with kustomize (the base image's /usr/bin/kubectl)" || return
  need kubernetes-validate "PyPI kubernetes-validate; ./setup.sh installs it" || return
  # kustomize refuses files that are symlinks out of the kustomization root
  # (Bazel runfiles are), so render a dereferenced copy.
  cp -rL "$here/k8s" "$tmp/k8s"
  local name out
  for name in base overlays/dev; do
    out="$tmp/$(basename "$name").yaml"
    echo "+ kubectl kustomize deploy/k8s/$name > $(basename "$out")"
    if ! kubectl kustomize "$tmp/k8s/$name" >"$out"; then
      fail "kubectl kustomize deploy/k8s/$name"
      continue
    fi
    # cert-manager objects aside: no offline schema (check_k8s.py checks them).
    "$python" - "$out" "$out.core" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
core = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
yaml.safe_dump_all(core, open(sys.argv[2], "w"))
print(f"    {len(docs) - len(core)} cert-manager objects left to check_k8s.py")
PY
    local v
    for v in $K8S_VERSIONS; do
      run kubernetes-validate --strict --quiet -k "$v" "$out.core" &&
        echo "    every object of $name valid against Kubernetes $v (--strict)"
    done
    if [[ $name == overlays/dev ]]; then
      # The Kubernetes scrape config finds the dev overlay's pods.
      run "$python" "$here/k8s/check_k8s.py" --prometheus "$here/prometheus/prometheus-k8s.yml" "$out"
    else
      run "$python" "$here/k8s/check_k8s.py" "$out"
    fi
  done
  # Negative cases: typo'd copies of the rendered PS StatefulSet. Only
  # --strict rejects unknown fields: without it kubernetes-validate 1.37.0
  # passes `replica:` (checked by hand), so every validation here is strict.
  "$python" - "$tmp/dev.yaml" "$tmp" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ps = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "ps")
def write(name, doc):
    with open(f"{sys.argv[2]}/{name}", "w") as f:
        yaml.safe_dump(doc, f)
a = yaml.safe_load(yaml.safe_dump(ps))
a["spec"]["replica"] = a["spec"].pop("replicas")
write("typo_replica.yaml", a)
b = yaml.safe_load(yaml.safe_dump(ps))
c = b["spec"]["template"]["spec"]["containers"][0]
c["prots"] = c.pop("ports")
write("typo_prots.yaml", b)
d = yaml.safe_load(yaml.safe_dump(ps))
d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "grpc"
write("wrong_type_port.yaml", d)
PY
  local v=${K8S_VERSIONS%% *}
  run_must_fail "'replica' was unexpected" kubernetes-validate --strict -k "$v" "$tmp/typo_replica.yaml"
  run_must_fail "'prots' was unexpected" kubernetes-validate --strict -k "$v" "$tmp/typo_prots.yaml"
  run_must_fail "'grpc' is not of type 'integer'" kubernetes-validate --strict -k "$v" "$tmp/wrong_type_port.yaml"
  # ... and a cluster.yaml that disagrees with the StatefulSets.
  sed 's/ps-0\.ps:2222/ps-0.ps:2223/' "$tmp/dev.yaml" >"$tmp/bad_cluster.yaml"
  run_must_fail 'cluster.yaml: `ps` is' "$python" "$here/k8s/check_k8s.py" "$tmp/bad_cluster.yaml"
  # ... and broken security: a typo'd Certificate field, a worker mounting the
  # coordinator's certificate, a PS port open to every namespace.
  "$python" - "$tmp/dev.yaml" "$tmp" <<'PY'
import sys, yaml
def variant(name, change):
    docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
    for d in docs:
        change(d)
    yaml.safe_dump_all(docs, open(f"{sys.argv[2]}/{name}", "w"))
def typo_ou(d):
    if d["kind"] == "Certificate" and d["metadata"]["name"] == "pscluster-ps":
        d["spec"]["subject"]["organizationalUnit"] = d["spec"]["subject"].pop("organizationalUnits")
def worker_coordinator_cert(d):
    if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "worker":
        for v in d["spec"]["template"]["spec"]["volumes"]:
            if v["name"] == "tls":
                v["secret"]["secretName"] = "pscluster-coordinator-tls"
def ps_open(d):
    if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "pscluster-ps":
        d["spec"]["ingress"][0]["from"][0]["namespaceSelector"] = {}
def evaluator_elsewhere(d):
    if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "evaluator":
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        args[:] = [a.replace("--checkpoint_dir=fashion-mnist-mlp", "--checkpoint_dir=other-job")
                   for a in args]
def evaluator_with_cert(d):
    if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "evaluator":
        pod = d["spec"]["template"]["spec"]
        pod["volumes"].append({"name": "tls", "secret": {"secretName": "pscluster-worker-tls"}})
        pod["containers"][0]["volumeMounts"].append({"name": "tls", "mountPath": "/etc/pscluster/tls"})
variant("typo_ou.yaml", typo_ou)
variant("worker_coordinator_cert.yaml", worker_coordinator_cert)
variant("ps_open.yaml", ps_open)
variant("evaluator_elsewhere.yaml", evaluator_elsewhere)
variant("evaluator_with_cert.yaml", evaluator_with_cert)
PY
  run_must_fail 'unknown field spec.subject.organizationalUnit' \
    "$python" "$here/k8s/check_k8s.py" "$tmp/typo_ou.yaml"
  run_must_fail "worker_server needs OU=.'worker'." \
    "$python" "$here/k8s/check_k8s.py" "$tmp/worker_coordinator_cert.yaml"
  run_must_fail 'port 2222 .grpc. must admit only pscluster pods' \
    "$python" "$here/k8s/check_k8s.py" "$tmp/ps_open.yaml"
  # ... and an evaluator that watches no job's directory, or holds a certificate.
  run_must_fail 'is not the checkpoint.dir of a job' \
    "$python" "$here/k8s/check_k8s.py" "$tmp/evaluator_elsewhere.yaml"
  run_must_fail 'the evaluator needs no certificate' \
    "$python" "$here/k8s/check_k8s.py" "$tmp/evaluator_with_cert.yaml"
}

check_kubeflow() {
  echo "== kubeflow"
  command -v kubectl >/dev/null 2>&1 ||
    skip "kubectl (with kustomize) is not installed and no Debian 12 package or PyPI project provides it"
  need kubernetes-validate "PyPI kubernetes-validate; ./setup.sh installs it" || return
  cp -rL "$here/k8s" "$tmp/k8s"
  local out="$tmp/kubeflow.yaml"
  echo "+ kubectl kustomize deploy/k8s/kubeflow > kubeflow.yaml"
  kubectl kustomize "$tmp/k8s/kubeflow" >"$out" || { fail "kubectl kustomize deploy/k8s/kubeflow"; return; }
  # The core objects through kubernetes-validate; the TFJob (no CRD schema
  # offline) through check_tfjob.py, which validates its pod templates.
  "$python" - "$out" "$out.core" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
yaml.safe_dump_all([d for d in docs if d["kind"] != "TFJob"], open(sys.argv[2], "w"))
PY
  local v versions=()
  for v in $K8S_VERSIONS; do
    run kubernetes-validate --strict --quiet -k "$v" "$out.core" &&
      echo "    the ConfigMap and NetworkPolicy valid against Kubernetes $v (--strict)"
    versions+=(-k "$v")
  done
  run "$python" "$here/k8s/kubeflow/check_tfjob.py" "${versions[@]}" "$out"
  # Negative cases: what the TFJob CRD's schema, the pod schema and
  # check_tfjob.py must each reject.
  "$python" - "$out" "$tmp" <<'PY'
import sys, yaml
def variant(name, change):
    docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
    for d in docs:
        if d["kind"] == "TFJob":
            change(d)
    yaml.safe_dump_all(docs, open(f"{sys.argv[2]}/tfjob_{name}.yaml", "w"))
def typo_specs(d): d["spec"]["tfReplicaSpec"] = d["spec"].pop("tfReplicaSpecs")
def typo_replica(d):
    ps = d["spec"]["tfReplicaSpecs"]["PS"]; ps["replica"] = ps.pop("replicas")
def bad_policy(d): d["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
def typo_prots(d):
    c = d["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]
    c["prots"] = c.pop("ports")
def chief_on_failure(d): d["spec"]["tfReplicaSpecs"]["Chief"]["restartPolicy"] = "OnFailure"
def cluster_flag(d):
    d["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"].append(
        "--cluster=/etc/pscluster/cluster.yaml")
def renamed(d): d["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["name"] = "ps"
for name, change in [("typo_specs", typo_specs), ("typo_replica", typo_replica),
                     ("bad_policy", bad_policy), ("typo_prots", typo_prots),
                     ("chief_on_failure", chief_on_failure), ("cluster_flag", cluster_flag),
                     ("renamed", renamed)]:
    variant(name, change)
PY
  local check=("$python" "$here/k8s/kubeflow/check_tfjob.py")
  run_must_fail "'tfReplicaSpec' was unexpected" "${check[@]}" "$tmp/tfjob_typo_specs.yaml"
  run_must_fail "'replica' was unexpected" "${check[@]}" "$tmp/tfjob_typo_replica.yaml"
  run_must_fail "'Sometimes' is not one of" "${check[@]}" "$tmp/tfjob_bad_policy.yaml"
  run_must_fail "'prots' was unexpected" "${check[@]}" "$tmp/tfjob_typo_prots.yaml"
  run_must_fail "restartPolicy OnFailure would run the job again" "${check[@]}" "$tmp/tfjob_chief_on_failure.yaml"
  run_must_fail "--cluster overrides the operator's TF_CONFIG" "${check[@]}" "$tmp/tfjob_cluster_flag.yaml"
  run_must_fail "no container named .tensorflow." "${check[@]}" "$tmp/tfjob_renamed.yaml"
}

areas=("$@")
((${#areas[@]} > 0)) || areas=(all)
for area in "${areas[@]}"; do
  case "$area" in
    prometheus) check_prometheus ;;
    grafana) check_grafana ;;
    k8s) check_k8s ;;
    kubeflow) check_kubeflow ;;
    all) check_prometheus; check_grafana; check_k8s; check_kubeflow ;;
    *) echo "usage: $0 [prometheus|grafana|k8s|kubeflow|all]..." >&2; exit 2 ;;
  esac
done

if ((failures > 0)); then
  echo "check_deploy: $failures check(s) FAILED" >&2
  exit 1
fi
echo "check_deploy: all checks passed (${areas[*]})"
