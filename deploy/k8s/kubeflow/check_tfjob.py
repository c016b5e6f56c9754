#!/usr/bin/env python3
"""Checks a rendered Kubeflow TFJob of pscluster servers, offline.

No TFJob CRD is bundled anywhere offline, so its schema is written here from
the kubeflow.org/v1 API (training-operator's TFJobSpec, ReplicaSpec and
RunPolicy): every field and enum the CRD has, nothing more, so that a typo'd
field (`tfReplicaSpec`, `replica`) or a wrong type fails as it would at the
API server. Each replica's pod template is then validated as a PodTemplate by
kubernetes-validate --strict against each Kubernetes version given.

Then what a schema cannot see, for pscluster under the training-operator:
  - Chief (1 replica) runs `coordinator --run_job=...`, PS runs ps_server,
    Worker runs worker_server, Evaluator (optional) runs evaluator, each in
    the container the operator reads, named `tensorflow`, with its
    `tfjob-port`;
  - no flag that would override the operator's TF_CONFIG (--cluster,
    --task_type, --task_index, --address, --ps, --workers); every flag is
    one the binary has;
  - the job file --run_job names is a key of a ConfigMap mounted there, and
    its data files lie under the chief's and the workers' --data_root;
    --auth_tokens_file lies in a mounted Secret;
  - restart policies that heal without re-running a finished job: the chief
    ExitCode or Never (OnFailure/Always would run a FAILED or SUCCEEDED job
    again), PS and workers not Never (a dead PS must come back to heal);
    cleanPodPolicy Running or All (PS and workers never exit on their own);
  - containers run restricted (non-root, no privilege escalation, read-only
    root, ALL capabilities dropped) with requests and limits;
  - a NetworkPolicy admits the gRPC port only from pods of the same TFJob.

  check_tfjob.py [-k VERSION]... RENDERED.yaml
      exits 1 listing every problem, 0 printing a summary
  check_tfjob.py --tf_config TYPE INDEX RENDERED.yaml
      prints the TF_CONFIG the operator gives that replica (its
      genTFConfigJSONStr: every replica but the evaluator, as
      <job>-<type>-<i>.<namespace>.svc:<tfjob-port>)
"""

import json
import os
import sys

import jsonschema
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
import check_k8s  # noqa: E402  (deploy/k8s/check_k8s.py: the servers' flags)

INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
INT64 = {"type": "integer"}
REPLICA_TYPES = ["Chief", "Master", "PS", "Worker", "Evaluator"]
# The kubeflow.org/v1 TFJob, as its CRD's openAPIV3Schema describes it (the
# pod template aside: kubernetes-validate checks it as a PodTemplateSpec).
TFJOB_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "TFJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "status": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["tfReplicaSpecs"],
            "properties": {
                "enableDynamicWorker": {"type": "boolean"},
                "successPolicy": {"enum": ["", "AllWorkers"]},
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "activeDeadlineSeconds": dict(INT64, minimum=1),
                        "backoffLimit": dict(INT32, minimum=0),
                        "cleanPodPolicy": {"enum": ["All", "Running", "None"]},
                        "ttlSecondsAfterFinished": dict(INT32, minimum=0),
                        "suspend": {"type": "boolean"},
                        "managedBy": {"type": "string"},
                        "schedulingPolicy": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "minAvailable": INT32,
                                "minResources": {"type": "object"},
                                "priorityClass": {"type": "string"},
                                "queue": {"type": "string"},
                                "scheduleTimeoutSeconds": INT32,
                            },
                        },
                    },
                },
                "tfReplicaSpecs": {
                    "type": "object",
                    "propertyNames": {"enum": REPLICA_TYPES},
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["template"],
                        "properties": {
                            "replicas": dict(INT32, minimum=0),
                            "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
                            "template": {"type": "object"},
                        },
                    },
                },
            },
        },
    },
}
BINARIES = {"Chief": "coordinator", "Master": "coordinator", "PS": "ps_server",
            "Worker": "worker_server", "Evaluator": "evaluator"}
# TF_CONFIG names these; a flag would override it (and --address the port).
CLUSTER_FLAGS = {"cluster", "task_type", "task_index", "address", "ps", "workers"}
DEFAULT_PORT = 2222  # the operator's, when the container names no tfjob-port
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def flag_values(args):
    """{flag name: value} of --name=value / --name (bool) arguments."""
    flags = {}
    for a in args or []:
        if a.startswith("--"):
            name, _, value = a[2:].partition("=")
            flags[name] = value
    return flags


def tensorflow_container(template):
    for c in template.get("spec", {}).get("containers") or []:
        if c.get("name") == "tensorflow":
            return c
    return None


def port_of(container):
    for p in (container or {}).get("ports") or []:
        if p.get("name") == "tfjob-port":
            return p.get("containerPort")
    return DEFAULT_PORT


def tf_config(tfjob, rtype, index):
    """The TF_CONFIG the training-operator sets for replica (rtype, index)."""
    name = tfjob["metadata"]["name"]
    namespace = tfjob["metadata"].get("namespace", "default")
    cluster = {}
    for t, spec in tfjob["spec"]["tfReplicaSpecs"].items():
        if t == "Evaluator":  # not part of the training cluster
            continue
        port = port_of(tensorflow_container(spec["template"]))
        rt = t.lower()
        cluster[rt] = [f"{name}-{rt}-{i}.{namespace}.svc:{port}"
                       for i in range(spec.get("replicas", 1))]
    return {"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
            "environment": "cloud"}


def under(path, roots):
    return any(os.path.normpath(path).startswith(os.path.normpath(r) + "/") for r in roots)


class Checker:
    def __init__(self, docs, flags, versions):
        self.docs = docs
        self.flags = flags
        self.versions = versions
        self.errors = []

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def find(self, kind, name):
        for d in self.docs:
            if d.get("kind") == kind and d.get("metadata", {}).get("name") == name:
                return d
        return None

    def run(self):
        tfjobs = [d for d in self.docs if d.get("kind") == "TFJob"]
        if not tfjobs:
            self.error("manifests", "no TFJob")
        for job in tfjobs:
            self.check_tfjob(job)
        return len(tfjobs)

    def check_tfjob(self, job):
        where = f"TFJob {job.get('metadata', {}).get('name')}"
        schema_errors = sorted(jsonschema.Draft7Validator(TFJOB_SCHEMA).iter_errors(job),
                               key=lambda e: list(e.absolute_path))
        for e in schema_errors:
            path = ".".join(str(p) for p in e.absolute_path) or "(top)"
            self.error(where, f"{path}: {e.message}")
        if schema_errors:
            return
        specs = job["spec"]["tfReplicaSpecs"]
        import kubernetes_validate  # PyPI; ./setup.sh installs it

        for rtype, spec in specs.items():
            rwhere = f"{where} {rtype}"
            for version in self.versions:
                wrapper = {"apiVersion": "v1", "kind": "PodTemplate",
                           "metadata": {"name": f"{job['metadata']['name']}-{rtype.lower()}"},
                           "template": spec["template"]}
                try:
                    kubernetes_validate.validate(wrapper, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    self.error(rwhere, f"template (Kubernetes {version}): {e.message}")
                except kubernetes_validate.SchemaNotFoundError as e:
                    self.error(rwhere, f"no schema for Kubernetes {version}: {e}")
            self.check_replica(job, rtype, spec, rwhere)
        for needed in ("Chief", "PS", "Worker"):
            if needed not in specs and not (needed == "Chief" and "Master" in specs):
                self.error(where, f"no {needed} replicas (the {BINARIES[needed]})")
        chief = specs.get("Chief") or specs.get("Master")
        if chief and chief.get("replicas", 1) != 1:
            self.error(where, "exactly one Chief: the coordinator")
        cleanup = job["spec"].get("runPolicy", {}).get("cleanPodPolicy", "None")
        if cleanup not in ("Running", "All"):
            self.error(where, f"runPolicy.cleanPodPolicy {cleanup}: PS and workers never exit on "
                       "their own, so they would run on after the chief (use Running or All)")
        self.check_network_policy(job, where)

    def check_replica(self, job, rtype, spec, where):
        template = spec["template"]
        container = tensorflow_container(template)
        if container is None:
            self.error(where, "no container named `tensorflow` (the one the operator reads)")
            return
        if not any(p.get("name") == "tfjob-port" for p in container.get("ports") or []):
            self.error(where, "container tensorflow has no port named tfjob-port")
        binary = BINARIES[rtype]
        command = (container.get("command") or [None])[0]
        if command != binary:
            self.error(where, f"runs {command}, not {binary}")
            return
        args = flag_values(container.get("args"))
        for name in sorted(args):
            if name in CLUSTER_FLAGS:
                self.error(where, f"--{name} overrides the operator's TF_CONFIG")
            elif name not in self.flags[binary]:
                self.error(where, f"{binary} has no flag --{name}")
        policy = spec.get("restartPolicy", "Never")
        if rtype in ("Chief", "Master") and policy not in ("ExitCode", "Never"):
            self.error(where, f"restartPolicy {policy} would run the job again after it ended "
                       "(use ExitCode: 1 is final, 128+signal restarts)")
        if rtype in ("PS", "Worker") and policy == "Never":
            self.error(where, "restartPolicy Never: a dead task never comes back to heal the job")
        pod = template.get("spec", {})
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts") or []}
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        self.check_security(pod, container, where)
        if binary == "coordinator":
            self.check_chief(job, args, mounts, volumes, where)

    def check_security(self, pod, container, where):
        pod_sc = pod.get("securityContext") or {}
        sc = container.get("securityContext") or {}
        if not (pod_sc.get("runAsNonRoot") or sc.get("runAsNonRoot")):
            self.error(where, "runAsNonRoot is not set")
        if sc.get("allowPrivilegeEscalation") is not False:
            self.error(where, "allowPrivilegeEscalation must be false")
        if sc.get("readOnlyRootFilesystem") is not True:
            self.error(where, "readOnlyRootFilesystem must be true")
        if "ALL" not in (sc.get("capabilities") or {}).get("drop", []):
            self.error(where, "capabilities must drop ALL")
        resources = container.get("resources") or {}
        if not resources.get("requests") or not resources.get("limits"):
            self.error(where, "container needs resource requests and limits")

    def mounted_file(self, path, mounts, volumes, where, what, kinds):
        """The (volume, key) under which `path` is mounted, or None (an error)."""
        for mount_path, m in mounts.items():
            if path.startswith(mount_path.rstrip("/") + "/"):
                volume = volumes.get(m["name"])
                if volume is None:
                    self.error(where, f"mount {mount_path} names no volume {m['name']}")
                    return None
                if not any(k in volume for k in kinds):
                    self.error(where, f"{what} {path} is not in a {' or '.join(kinds)} volume")
                    return None
                return volume, path[len(mount_path.rstrip("/")) + 1:]
        self.error(where, f"{what} {path} is not under any mount")
        return None

    def check_chief(self, job, args, mounts, volumes, where):
        run_job = args.get("run_job")
        if not run_job:
            self.error(where, "the coordinator needs --run_job (the chief runs the job and exits)")
            return
        found = self.mounted_file(run_job, mounts, volumes, where, "--run_job", ["configMap"])
        if found:
            volume, key = found
            name = volume["configMap"]["name"]
            cm = self.find("ConfigMap", name)
            if cm is None:
                self.error(where, f"ConfigMap {name} (--run_job) is not in the manifests")
            elif key not in (cm.get("data") or {}):
                self.error(where, f"ConfigMap {name} has no key {key} (--run_job)")
            else:
                self.check_job_file(job, cm["data"][key], args, where)
        tokens = args.get("auth_tokens_file")
        if not tokens:
            self.error(where, "no --auth_tokens_file: anyone who reaches the chief could "
                       "submit or cancel jobs")
        else:
            self.mounted_file(tokens, mounts, volumes, where, "--auth_tokens_file", ["secret"])

    def check_job_file(self, job, text, chief_args, where):
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as e:
            self.error(where, f"the --run_job file is not YAML: {e}")
            return
        files = []
        for part in ("train", "eval"):
            source = ((spec.get("data") or {}).get(part)) or {}
            files += [source[k] for k in ("images", "labels", "path") if isinstance(source.get(k), str)]
        roots = {"chief": chief_args.get("data_root", "/usr/share/datasets").split(",")}
        worker = job["spec"]["tfReplicaSpecs"].get("Worker")
        if worker:
            c = tensorflow_container(worker["template"]) or {}
            roots["workers"] = flag_values(c.get("args")).get(
                "data_root", "/usr/share/datasets").split(",")
        for f in files:
            for who, r in roots.items():
                if not under(f, r):
                    self.error(where, f"job data file {f} is outside the {who}' --data_root {r}")
        if (spec.get("checkpoint") or {}).get("dir") and "checkpoint_root" not in chief_args:
            self.error(where, "the job sets checkpoint.dir but the chief has no --checkpoint_root")

    def check_network_policy(self, job, where):
        name = job["metadata"]["name"]
        ports = {port_of(tensorflow_container(s["template"]))
                 for s in job["spec"]["tfReplicaSpecs"].values()}
        for np in (d for d in self.docs if d.get("kind") == "NetworkPolicy"):
            selector = np["spec"].get("podSelector", {}).get("matchLabels", {})
            if selector.get(JOB_NAME_LABEL) != name:
                continue
            for port in ports:
                for rule in np["spec"].get("ingress") or []:
                    if port not in {p.get("port") for p in rule.get("ports") or []}:
                        continue
                    for peer in rule.get("from") or []:
                        labels = peer.get("podSelector", {}).get("matchLabels", {})
                        if "namespaceSelector" in peer or labels.get(JOB_NAME_LABEL) != name:
                            self.error(where, f"NetworkPolicy {np['metadata']['name']}: port "
                                       f"{port} must admit only pods of TFJob {name}")
            return
        self.error(where, f"no NetworkPolicy selects the TFJob's pods ({JOB_NAME_LABEL}: {name})")


def main(argv):
    versions = []
    args = argv[1:]
    if len(args) == 4 and args[0] == "--tf_config":
        docs = [d for d in yaml.safe_load_all(open(args[3])) if d]
        job = next(d for d in docs if d.get("kind") == "TFJob")
        print(json.dumps(tf_config(job, args[1], int(args[2]))))
        return 0
    while len(args) >= 2 and args[0] == "-k":
        versions.append(args[1])
        args = args[2:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    flags = check_k8s.flags_from_sources() or {
        b: check_k8s.SERVER_FLAGS | f for b, f in check_k8s.BINARY_FLAGS.items()}
    with open(args[0]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    checker = Checker(docs, flags, versions or ["1.32.0"])
    n = checker.run()
    if checker.errors:
        for e in checker.errors:
            print(f"check_tfjob: {args[0]}: {e}", file=sys.stderr)
        return 1
    print(f"check_tfjob: {args[0]}: OK ({n} TFJob; templates valid against Kubernetes "
          f"{', '.join(checker.versions)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
