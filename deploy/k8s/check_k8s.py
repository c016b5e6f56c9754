#!/usr/bin/env python3
"""Checks rendered pscluster manifests for what a JSON schema cannot see.

kubernetes-validate --strict checks every object's fields and types; this
script checks that the objects fit together and fit pscluster:

  - cluster.yaml (the ConfigMap every pod mounts) names exactly the pods the
    StatefulSets create: `<sts>-<i>.<service>:<grpc port>`, one per replica;
  - every StatefulSet has a headless Service whose selector matches its pods,
    every selector (StatefulSet, Service, PodDisruptionBudget) matches pods;
  - every flag passed to a server is one that binary has (ABSL_FLAG);
  - gRPC probes and Prometheus annotations point at declared ports, and the
    metrics port is the one given to --metrics_address;
  - every container has requests and limits and the restricted security
    context (non-root uid 10001, no privilege escalation, read-only root,
    ALL capabilities dropped, RuntimeDefault seccomp);
  - mounts name volumes that exist; ConfigMaps and claims they use exist;
  - mutual TLS: cluster.yaml's `tls:` names files under /etc/pscluster/tls,
    where each container mounts (not optional) the Secret of the cert-manager
    Certificate whose subject OU is its role (coordinator, ps, worker); every
    Certificate is issued by the one CA Issuer, whose CA Certificate comes from
    a selfSigned Issuer; a role's dnsNames cover its cluster.yaml hosts; an
    OU=user Certificate exists for psctl; the cert-manager objects only use
    fields cert-manager v1 has (no schema for them is bundled offline);
    probes are tcpSocket (the kubelet's gRPC probes cannot do mutual TLS);
  - the coordinator takes --auth_tokens_file from a mounted Secret;
  - NetworkPolicies: every pod is selected by one with Ingress; the PS and
    worker gRPC/data ports admit only pscluster pods, metrics only Prometheus
    pods; every port a policy admits is a container port;
  - the coordinator and every PS share the state volume (PS write checkpoint
    shards into directories the coordinator names), and each job's
    checkpoint.dir is on it;
  - the coordinator's --ps_memory_limit_bytes is below the PS memory limit;
  - the sidecar evaluator (task type evaluator, no gRPC port): probes are
    httpGet on its metrics port, it mounts no certificate (it serves and
    dials no RPC), its --checkpoint_root is the shared claim's checkpoints
    and its --checkpoint_dir is the checkpoint.dir of a job of the jobs
    ConfigMap, and one pod only (one writer of its state file).

  - with --prometheus, every SRV name that config scrapes is a Service port
    of these manifests, in their namespace.

Usage: check_k8s.py [--prometheus prometheus-k8s.yml] RENDERED.yaml...
       (RENDERED.yaml: the output of `kubectl kustomize DIR`)
Exits 1 listing every problem, 0 printing a summary.
"""

import os
import re
import sys

import yaml

# The flags each binary defines: rpc/server_flags.cc (all servers) plus its
# main.cc. Read from the sources when this script runs from the source tree,
# else these copies are used (tests under Bazel see only deploy/).
SERVER_FLAGS = {"address", "port_file", "metrics_address", "log_level", "cluster", "task_type",
                "task_index"}
BINARY_FLAGS = {
    "ps_server": {"checkpoint_root"},
    "worker_server": {"ps_timeout_ms", "compute_threads", "data_root", "checkpoint_root",
                      "collective_timeout_s"},
    "coordinator": {"ps", "workers", "max_attempts", "cluster_wait_s", "ps_memory_limit_bytes",
                    "state_dir", "checkpoint_root", "data_root", "auth_tokens_file", "run_job"},
    "evaluator": {"checkpoint_root", "checkpoint_dir", "job", "data_root", "poll_interval_s",
                  "summary_dir", "until_job_ends", "eval_closure_examples", "compute_threads"},
}
# The files that define each binary's own flags (those present are read).
BINARY_SOURCES = {"ps_server": ["ps/main.cc"],
                  "worker_server": ["worker/main.cc", "worker/worker_server_main.cc"],
                  "coordinator": ["coordinator/main.cc"], "evaluator": ["evaluator/main.cc"]}
TASK_TYPES = {"ps_server": "ps", "worker_server": "worker", "coordinator": "chief",
              "evaluator": "evaluator"}
RUN_AS_USER = 10001
# The subject OU each binary's certificate carries (rpc/peer_role.h).
ROLES = {"ps_server": "ps", "worker_server": "worker", "coordinator": "coordinator"}
# cert-manager.io/v1 fields these manifests may use (a typo'd field would be
# ignored by cert-manager with a warning at best).
CERT_SPEC_FIELDS = {"secretName", "commonName", "subject", "dnsNames", "ipAddresses", "uris",
                    "emailAddresses", "duration", "renewBefore", "usages", "isCA", "privateKey",
                    "issuerRef", "secretTemplate", "keystores", "literalSubject",
                    "revisionHistoryLimit", "additionalOutputFormats", "nameConstraints",
                    "encodeUsagesInRequest", "otherNames", "renewBeforePercentage"}
CERT_SUBJECT_FIELDS = {"organizations", "organizationalUnits", "countries", "localities",
                       "provinces", "streetAddresses", "postalCodes", "serialNumber"}
CERT_KEY_FIELDS = {"algorithm", "encoding", "size", "rotationPolicy"}
CERT_USAGES = {"signing", "digital signature", "content commitment", "key encipherment",
               "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
               "decipher only", "any", "server auth", "client auth", "code signing",
               "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user",
               "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"}
ISSUER_TYPES = {"selfSigned", "ca", "acme", "vault", "venafi"}
PROMETHEUS_LABELS = {"app.kubernetes.io/name": "prometheus"}
PSCLUSTER_LABELS = {"app.kubernetes.io/name": "pscluster"}
STATE_MOUNT = "/var/lib/pscluster"
TLS_MOUNT = "/etc/pscluster/tls"


def flags_from_sources():
    """Returns BINARY_FLAGS read from the source tree, or None if not found."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    flag_re = re.compile(r"ABSL_FLAG\([^,]+,\s*(\w+)\s*,")
    try:
        with open(os.path.join(root, "rpc/server_flags.cc")) as f:
            common = set(flag_re.findall(f.read()))
        result = {}
        for binary, paths in BINARY_SOURCES.items():
            found = [p for p in paths if os.path.exists(os.path.join(root, p))]
            if not found:
                return None
            result[binary] = set(common)
            for path in found:
                with open(os.path.join(root, path)) as f:
                    result[binary] |= set(flag_re.findall(f.read()))
        return result
    except OSError:
        return None


class Checker:
    def __init__(self, docs, flags):
        self.docs = docs
        self.flags = flags
        self.errors = []

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def objects(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def find(self, kind, name):
        for d in self.objects(kind):
            if d["metadata"]["name"] == name:
                return d
        return None

    def run(self):
        for sts in self.objects("StatefulSet"):
            self.check_statefulset(sts)
        for pdb in self.objects("PodDisruptionBudget"):
            self.check_selects_pods(f"PodDisruptionBudget/{pdb['metadata']['name']}",
                                    pdb["spec"]["selector"]["matchLabels"])
        for svc in self.objects("Service"):
            self.check_selects_pods(f"Service/{svc['metadata']['name']}", svc["spec"]["selector"])
        self.check_cluster_file()
        self.check_certificates()
        self.check_network_policies()
        self.check_memory_limit()
        self.check_jobs()
        kinds = {}
        for d in self.docs:
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
        return kinds

    def pod_templates(self):
        return [t["spec"]["template"] for t in self.objects("StatefulSet")]

    def check_selects_pods(self, where, selector):
        for template in self.pod_templates():
            labels = template["metadata"].get("labels", {})
            if all(labels.get(k) == v for k, v in selector.items()):
                return
        self.error(where, f"selector {selector} matches no pod template")

    def container_binary(self, container):
        command = container.get("command") or []
        return os.path.basename(command[0]) if command else None

    def check_statefulset(self, sts):
        name = sts["metadata"]["name"]
        where = f"StatefulSet/{name}"
        spec = sts["spec"]
        template = spec["template"]
        labels = template["metadata"].get("labels", {})
        for k, v in spec["selector"]["matchLabels"].items():
            if labels.get(k) != v:
                self.error(where, f"selector {k}={v} does not match the pod labels {labels}")
        svc = self.find("Service", spec.get("serviceName", ""))
        if svc is None:
            self.error(where, f"serviceName {spec.get('serviceName')!r} names no Service")
        else:
            svc_where = f"Service/{svc['metadata']['name']}"
            if svc["spec"].get("clusterIP") != "None":
                self.error(svc_where, "is not headless (clusterIP: None)")
            # Prometheus finds pods by the SRV records of the `metrics` port,
            # and pods must keep their names while not ready.
            if "metrics" not in {p.get("name") for p in svc["spec"].get("ports", [])}:
                self.error(svc_where, "has no port named metrics (Prometheus' SRV discovery)")
            if svc["spec"].get("publishNotReadyAddresses") is not True:
                self.error(svc_where, "must set publishNotReadyAddresses: true")
        pod = template["spec"]
        pod_sc = pod.get("securityContext", {})
        if pod_sc.get("runAsNonRoot") is not True or pod_sc.get("runAsUser") != RUN_AS_USER:
            self.error(where, f"pod securityContext must set runAsNonRoot: true, runAsUser: {RUN_AS_USER}")
        if pod_sc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            self.error(where, "pod securityContext must set seccompProfile RuntimeDefault")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for v in volumes.values():
            if "configMap" in v and self.find("ConfigMap", v["configMap"]["name"]) is None:
                self.error(where, f"volume {v['name']}: no ConfigMap {v['configMap']['name']}")
            claim = v.get("persistentVolumeClaim", {}).get("claimName")
            if claim and self.find("PersistentVolumeClaim", claim) is None:
                self.error(where, f"volume {v['name']}: no PersistentVolumeClaim {claim}")
        annotations = template["metadata"].get("annotations", {})
        for c in pod["containers"]:
            self.check_container(f"{where} container {c['name']}", c, volumes, annotations, name)

    def check_container(self, where, c, volumes, annotations, sts_name):
        binary = self.container_binary(c)
        if binary not in BINARY_FLAGS:
            self.error(where, f"command {c.get('command')} is not one of {sorted(BINARY_FLAGS)}")
            return
        args = {}
        for arg in c.get("args", []):
            m = re.fullmatch(r"--(\w+)=(.*)", arg)
            if not m:
                self.error(where, f"argument {arg!r} is not --flag=value")
                continue
            if m.group(1) not in self.flags[binary]:
                self.error(where, f"{binary} has no flag --{m.group(1)}")
            args[m.group(1)] = m.group(2)
        if args.get("task_type", TASK_TYPES[binary]) != TASK_TYPES[binary]:
            self.error(where, f"--task_type={args['task_type']} but {binary} runs {TASK_TYPES[binary]}")
        env = {e["name"]: e for e in c.get("env", [])}
        for ref in re.findall(r"\$\((\w+)\)", " ".join(c.get("args", []))):
            if ref not in env:
                self.error(where, f"args use $({ref}) but the container has no env {ref}")
        index = args.get("task_index", "")
        if binary == "evaluator":
            self.check_evaluator(where, c, args, volumes, sts_name)
            return
        if binary != "coordinator":
            source = env.get(index[2:-1], {}).get("valueFrom", {}).get("fieldRef", {})
            if source.get("fieldPath") != "metadata.labels['apps.kubernetes.io/pod-index']":
                self.error(where, "--task_index must come from the pod-index label (the ordinal)")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        port_numbers = set(ports.values())
        for probe_name in ("readinessProbe", "livenessProbe"):
            probe = c.get(probe_name)
            if not probe or "tcpSocket" not in probe:
                self.error(where, f"{probe_name} must be a tcpSocket probe (the gRPC port takes "
                           "only mutual TLS; the kubelet's gRPC probes have no client certificate)")
                continue
            port = probe["tcpSocket"]["port"]
            if port not in ("grpc", ports.get("grpc")):
                self.error(where, f"{probe_name} port {port} is not the grpc port")
        if annotations.get("prometheus.io/scrape") != "true":
            self.error(where, "pod lacks the prometheus.io/scrape: \"true\" annotation")
        metrics_port = annotations.get("prometheus.io/port")
        if metrics_port is None or int(metrics_port) not in port_numbers:
            self.error(where, f"prometheus.io/port {metrics_port} is not a container port")
        if args.get("metrics_address") != f"0.0.0.0:{metrics_port}":
            self.error(where, f"--metrics_address must be 0.0.0.0:{metrics_port}")
        resources = c.get("resources", {})
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in resources.get(kind, {}):
                    self.error(where, f"no resources.{kind}.{r}")
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            self.error(where, "securityContext.allowPrivilegeEscalation must be false")
        if sc.get("readOnlyRootFilesystem") is not True:
            self.error(where, "securityContext.readOnlyRootFilesystem must be true")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            self.error(where, "securityContext.capabilities.drop must be [ALL]")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        for m in mounts.values():
            if m["name"] not in volumes:
                self.error(where, f"volumeMount {m['name']} names no volume")
        self.check_tls_mount(where, binary, mounts, volumes)
        if binary == "coordinator":
            tokens = args.get("auth_tokens_file", "")
            secret = volumes.get(mounts.get(os.path.dirname(tokens), {}).get("name"), {}).get("secret")
            if not tokens:
                self.error(where, "needs --auth_tokens_file (bearer tokens on the job service)")
            elif not secret or secret.get("optional"):
                self.error(where, f"--auth_tokens_file={tokens} is not in a mounted, "
                           "non-optional Secret")
        cluster = args.get("cluster", "")
        mount = mounts.get(os.path.dirname(cluster))
        cm = volumes.get(mount["name"], {}).get("configMap") if mount else None
        data = self.find("ConfigMap", cm["name"]).get("data", {}) if cm and self.find("ConfigMap", cm["name"]) else {}
        if os.path.basename(cluster) not in data:
            self.error(where, f"--cluster={cluster} is not a file of a mounted ConfigMap")
        if binary == "coordinator":
            state = volumes.get(mounts.get(STATE_MOUNT, {}).get("name"), {})
            if state.get("persistentVolumeClaim", {}).get("claimName") != "pscluster-state":
                self.error(where, f"{STATE_MOUNT} must mount the shared pscluster-state claim")
        elif binary == "ps_server" or "checkpoint_root" in args:
            # PS shards and workers' copies of multi_worker_mirrored jobs: the
            # checkpoints of the shared claim at --checkpoint_root, and nothing
            # more of it (the coordinator's state holds its lease secret).
            root = args.get("checkpoint_root", "")
            state = volumes.get(mounts.get(root, {}).get("name"), {})
            if state.get("persistentVolumeClaim", {}).get("claimName") != "pscluster-state":
                self.error(where, f"--checkpoint_root={root} must mount the shared pscluster-state claim")
            if STATE_MOUNT in mounts:
                self.error(where, f"{binary} must not mount all of {STATE_MOUNT} (the coordinator's state)")

    def check_evaluator(self, where, c, args, volumes, sts_name):
        """The sidecar evaluator's container: what check_container checks
        otherwise does not fit it (no gRPC port, no certificate)."""
        if args.get("task_index", "0") != "0":
            self.error(where, "--task_index must be 0 (there is one evaluator)")
        sts = self.find("StatefulSet", sts_name)
        if sts and sts["spec"].get("replicas", 1) != 1:
            self.error(where, "replicas must be 1 (one evaluator writes the job's evaluator/state)")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        if set(ports) != {"metrics"}:
            self.error(where, f"ports {sorted(ports)}: the evaluator serves only metrics")
        for probe_name in ("readinessProbe", "livenessProbe"):
            get = (c.get(probe_name) or {}).get("httpGet", {})
            if get.get("port") not in ("metrics", ports.get("metrics")) or get.get("path") != "/metrics":
                self.error(where, f"{probe_name} must be httpGet /metrics on the metrics port")
        annotations = sts["spec"]["template"]["metadata"].get("annotations", {}) if sts else {}
        if annotations.get("prometheus.io/scrape") != "true" or \
                str(ports.get("metrics")) != annotations.get("prometheus.io/port"):
            self.error(where, "prometheus.io/scrape and prometheus.io/port must name its metrics port")
        if args.get("metrics_address") != f"0.0.0.0:{ports.get('metrics')}":
            self.error(where, f"--metrics_address must be 0.0.0.0:{ports.get('metrics')}")
        resources = c.get("resources", {})
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in resources.get(kind, {}):
                    self.error(where, f"no resources.{kind}.{r}")
        sc = c.get("securityContext", {})
        if (sc.get("allowPrivilegeEscalation") is not False or
                sc.get("readOnlyRootFilesystem") is not True or
                sc.get("capabilities", {}).get("drop") != ["ALL"]):
            self.error(where, "securityContext must forbid privilege escalation, make the root "
                       "read-only and drop ALL capabilities")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        for m in mounts.values():
            if m["name"] not in volumes:
                self.error(where, f"volumeMount {m['name']} names no volume")
            elif "secret" in volumes[m["name"]]:
                self.error(where, f"mounts Secret {volumes[m['name']]['secret'].get('secretName')}: "
                           "the evaluator needs no certificate")
        root = args.get("checkpoint_root", "")
        state = volumes.get(mounts.get(root, {}).get("name"), {})
        if state.get("persistentVolumeClaim", {}).get("claimName") != "pscluster-state":
            self.error(where, f"--checkpoint_root={root} must mount the shared pscluster-state claim")
        if STATE_MOUNT in mounts:
            self.error(where, f"the evaluator must not mount all of {STATE_MOUNT} (the coordinator's state)")
        want = os.path.normpath(os.path.join(root, args.get("checkpoint_dir", "")))
        dirs = [os.path.normpath(d) for d in self.job_checkpoint_dirs()]
        if not args.get("checkpoint_dir") or want not in dirs:
            self.error(where, f"--checkpoint_dir={args.get('checkpoint_dir')} (under {root}) is "
                       f"not the checkpoint.dir of a job in the jobs ConfigMap {dirs}")

    def job_checkpoint_dirs(self):
        out = []
        for cm in self.objects("ConfigMap"):
            for key, text in cm.get("data", {}).items():
                if key == "cluster.yaml":
                    continue
                job = yaml.safe_load(text)
                if isinstance(job, dict) and job.get("checkpoint", {}).get("dir"):
                    out.append(job["checkpoint"]["dir"])
        return out

    def certificate_of_secret(self, secret_name):
        for cert in self.objects("Certificate"):
            if cert.get("spec", {}).get("secretName") == secret_name:
                return cert
        return None

    def check_tls_mount(self, where, binary, mounts, volumes):
        """The container's TLS_MOUNT is its role's Certificate's Secret."""
        mount = mounts.get(TLS_MOUNT)
        secret = volumes.get(mount["name"], {}).get("secret") if mount else None
        if not secret:
            self.error(where, f"{TLS_MOUNT} must mount a Secret (its role's certificate)")
            return
        if secret.get("optional"):
            self.error(where, f"the {TLS_MOUNT} Secret must not be optional (no plaintext fallback)")
        if "items" in secret:
            self.error(where, f"the {TLS_MOUNT} Secret must keep tls.crt, tls.key, ca.crt (no items)")
        cert = self.certificate_of_secret(secret.get("secretName"))
        if cert is None:
            self.error(where, f"{TLS_MOUNT}: Secret {secret.get('secretName')} is no Certificate's")
            return
        ous = cert["spec"].get("subject", {}).get("organizationalUnits")
        if ous != [ROLES[binary]]:
            self.error(where, f"{TLS_MOUNT} mounts Certificate/{cert['metadata']['name']} "
                       f"(OU {ous}), but {binary} needs OU=[{ROLES[binary]!r}]")

    def check_certificates(self):
        """cert-manager objects: structure (no bundled schema) and issuance chain."""
        issuers = {}
        for issuer in self.objects("Issuer") + self.objects("ClusterIssuer"):
            name = issuer["metadata"]["name"]
            where = f"{issuer['kind']}/{name}"
            if issuer.get("apiVersion") != "cert-manager.io/v1":
                self.error(where, "apiVersion must be cert-manager.io/v1")
            spec = issuer.get("spec", {})
            if len(spec) != 1 or not set(spec) <= ISSUER_TYPES:
                self.error(where, f"spec must be exactly one of {sorted(ISSUER_TYPES)}, got {sorted(spec)}")
            if "ca" in spec and set(spec["ca"]) - {"secretName", "crlDistributionPoints",
                                                     "ocspServers", "issuingCertificateURLs"}:
                self.error(where, f"unknown ca fields {sorted(set(spec['ca']) - {'secretName'})}")
            issuers[name] = issuer
        certs = self.objects("Certificate")
        for cert in certs:
            where = f"Certificate/{cert['metadata']['name']}"
            if cert.get("apiVersion") != "cert-manager.io/v1":
                self.error(where, "apiVersion must be cert-manager.io/v1")
            spec = cert.get("spec", {})
            for field in sorted(set(spec) - CERT_SPEC_FIELDS):
                self.error(where, f"unknown field spec.{field}")
            for field in sorted(set(spec.get("subject", {})) - CERT_SUBJECT_FIELDS):
                self.error(where, f"unknown field spec.subject.{field}")
            for field in sorted(set(spec.get("privateKey", {})) - CERT_KEY_FIELDS):
                self.error(where, f"unknown field spec.privateKey.{field}")
            for usage in spec.get("usages", []):
                if usage not in CERT_USAGES:
                    self.error(where, f"unknown usage {usage!r}")
            if not spec.get("secretName"):
                self.error(where, "no spec.secretName")
            ref = spec.get("issuerRef", {})
            if ref.get("name") not in issuers:
                self.error(where, f"issuerRef {ref.get('name')!r} names no Issuer")
        # The chain: one CA Issuer, backed by an isCA Certificate that a
        # selfSigned Issuer signs; every other Certificate issued by that CA.
        ca_issuers = [i for i in issuers.values() if "ca" in i.get("spec", {})]
        if len(ca_issuers) != 1:
            self.error("certificates", f"{len(ca_issuers)} CA Issuers, want exactly 1")
            return
        ca_issuer = ca_issuers[0]
        ca_cert = self.certificate_of_secret(ca_issuer["spec"]["ca"].get("secretName"))
        if ca_cert is None or ca_cert["spec"].get("isCA") is not True:
            self.error(f"Issuer/{ca_issuer['metadata']['name']}",
                       "its secretName is not an isCA Certificate's Secret")
        else:
            signer = issuers.get(ca_cert["spec"].get("issuerRef", {}).get("name"), {})
            if "selfSigned" not in signer.get("spec", {}):
                self.error(f"Certificate/{ca_cert['metadata']['name']}", "is not self-signed")
        roles = {}
        for cert in certs:
            if cert is ca_cert:
                continue
            where = f"Certificate/{cert['metadata']['name']}"
            spec = cert["spec"]
            if spec.get("isCA"):
                self.error(where, "only the cluster CA may be isCA")
            if spec.get("issuerRef", {}).get("name") != ca_issuer["metadata"]["name"]:
                self.error(where, f"must be issued by the cluster CA Issuer {ca_issuer['metadata']['name']}")
            ous = spec.get("subject", {}).get("organizationalUnits", [])
            if len(ous) != 1 or ous[0] not in ("coordinator", "ps", "worker", "user"):
                self.error(where, f"subject.organizationalUnits {ous} must be one role: "
                           "coordinator, ps, worker or user")
                continue
            if ous[0] in roles:
                self.error(where, f"a second OU={ous[0]} Certificate")
            roles[ous[0]] = cert
            want = {"client auth"} if ous[0] == "user" else {"client auth", "server auth"}
            if not want <= set(spec.get("usages", [])):
                self.error(where, f"usages must include {sorted(want)}")
        if "user" not in roles:
            self.error("certificates", "no OU=user Certificate (psctl's)")
        # Each role's dnsNames cover the hosts peers dial (cluster.yaml).
        cluster = self.cluster_yaml()
        for task_type, role in (("chief", "coordinator"), ("ps", "ps"), ("worker", "worker")):
            cert = roles.get(role)
            if cert is None:
                self.error("certificates", f"no OU={role} Certificate")
                continue
            names = set(cert["spec"].get("dnsNames", []))
            for address in (cluster or {}).get("cluster", {}).get(task_type, []) or []:
                host = address.rsplit(":", 1)[0]
                if host not in names:
                    self.error(f"Certificate/{cert['metadata']['name']}",
                               f"dnsNames {sorted(names)} lack {host} (cluster.yaml `{task_type}`)")
        tls = (cluster or {}).get("tls") or {}
        for key, file in (("cert", "tls.crt"), ("key", "tls.key"), ("ca", "ca.crt")):
            if tls.get(key) != f"{TLS_MOUNT}/{file}":
                self.error("cluster.yaml", f"`tls.{key}` must be {TLS_MOUNT}/{file} (the mounted "
                           f"Certificate Secret), got {tls.get(key)!r}")

    def cluster_yaml(self):
        cms = [cm for cm in self.objects("ConfigMap") if "cluster.yaml" in cm.get("data", {})]
        return yaml.safe_load(cms[0]["data"]["cluster.yaml"]) if len(cms) == 1 else None

    def check_network_policies(self):
        policies = self.objects("NetworkPolicy")
        for sts in self.objects("StatefulSet"):
            template = sts["spec"]["template"]
            labels = template["metadata"].get("labels", {})
            where = f"StatefulSet/{sts['metadata']['name']}"
            mine = [p for p in policies
                    if all(labels.get(k) == v for k, v in
                           p["spec"].get("podSelector", {}).get("matchLabels", {}).items())
                    and p["spec"].get("podSelector", {}).get("matchLabels")
                    and "Ingress" in p["spec"].get("policyTypes", [])]
            if not mine:
                self.error(where, "no NetworkPolicy (Ingress) selects its pods")
                continue
            c = template["spec"]["containers"][0]
            binary = self.container_binary(c)
            ports = {p["containerPort"]: p["name"] for p in c.get("ports", [])}
            admitted = set()
            for policy in mine:
                pwhere = f"NetworkPolicy/{policy['metadata']['name']}"
                for rule in policy["spec"].get("ingress", []):
                    sources = rule.get("from")
                    for port in rule.get("ports", []) or [{"port": p} for p in ports]:
                        number = port.get("port")
                        if isinstance(number, str):
                            number = {v: k for k, v in ports.items()}.get(number)
                        if number not in ports:
                            self.error(pwhere, f"admits port {port.get('port')}, not a container "
                                       f"port of {where}")
                            continue
                        admitted.add(number)
                        name = ports[number]
                        if name == "metrics":
                            ok = sources and all(
                                s.get("podSelector", {}).get("matchLabels") == PROMETHEUS_LABELS
                                for s in sources)
                            if not ok:
                                self.error(pwhere, f"port {number} (metrics) must admit only "
                                           f"Prometheus pods {PROMETHEUS_LABELS}")
                        elif binary != "coordinator":
                            ok = sources and all(
                                "namespaceSelector" not in s and "ipBlock" not in s and
                                s.get("podSelector", {}).get("matchLabels") == PSCLUSTER_LABELS
                                for s in sources)
                            if not ok:
                                self.error(pwhere, f"port {number} ({name}) must admit only "
                                           f"pscluster pods {PSCLUSTER_LABELS} of the namespace")
            for number, name in ports.items():
                if number not in admitted:
                    self.error(where, f"no NetworkPolicy admits port {number} ({name})")

    def server(self, binary):
        """(StatefulSet, container) running binary, or (None, None)."""
        for sts in self.objects("StatefulSet"):
            for c in sts["spec"]["template"]["spec"]["containers"]:
                if self.container_binary(c) == binary:
                    return sts, c
        return None, None

    def check_cluster_file(self):
        sts, c = self.server("coordinator")
        if c is None:
            self.error("coordinator", "no StatefulSet runs the coordinator")
            return
        cluster_cms = [cm for cm in self.objects("ConfigMap") if "cluster.yaml" in cm.get("data", {})]
        if len(cluster_cms) != 1:
            self.error("cluster.yaml", f"{len(cluster_cms)} ConfigMaps hold a cluster.yaml, want 1")
            return
        cluster = yaml.safe_load(cluster_cms[0]["data"]["cluster.yaml"]).get("cluster", {})
        for task_type, binary in (("chief", "coordinator"), ("ps", "ps_server"),
                                  ("worker", "worker_server")):
            sts, c = self.server(binary)
            if sts is None:
                self.error("cluster.yaml", f"no StatefulSet runs {binary}")
                continue
            port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
            want = [f"{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}:{port}"
                    for i in range(sts["spec"].get("replicas", 1))]
            if cluster.get(task_type) != want:
                self.error("cluster.yaml", f"`{task_type}` is {cluster.get(task_type)}, but "
                           f"StatefulSet/{sts['metadata']['name']} runs {want}")

    def check_memory_limit(self):
        _, coordinator = self.server("coordinator")
        _, ps = self.server("ps_server")
        if coordinator is None or ps is None:
            return
        limit = None
        for arg in coordinator.get("args", []):
            if arg.startswith("--ps_memory_limit_bytes="):
                limit = int(arg.split("=", 1)[1])
        memory = ps["resources"]["limits"]["memory"]
        units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", memory)
        ps_bytes = int(m.group(1)) * units.get(m.group(2), 1) if m else None
        if limit is None or limit == 0 or ps_bytes is None or limit >= ps_bytes:
            self.error("coordinator", f"--ps_memory_limit_bytes={limit} must be set below the "
                       f"PS memory limit {memory}")

    def check_jobs(self):
        for cm in self.objects("ConfigMap"):
            for key, text in cm.get("data", {}).items():
                if key == "cluster.yaml":
                    continue
                job = yaml.safe_load(text)
                where = f"ConfigMap/{cm['metadata']['name']} {key}"
                if not isinstance(job, dict) or "model" not in job:
                    self.error(where, "is not a job spec")
                    continue
                ckpt = job.get("checkpoint", {}).get("dir", "")
                if ckpt and not ckpt.startswith(STATE_MOUNT + "/"):
                    self.error(where, f"checkpoint.dir {ckpt} is not on the shared volume {STATE_MOUNT}")
                for split in ("train", "eval"):
                    for field, path in job.get("data", {}).get(split, {}).items():
                        if field != "format" and isinstance(path, str) and not path.startswith("/"):
                            self.error(where, f"data.{split}.{field} {path} is not an absolute path")


def check_prometheus_srv(path, docs):
    """Errors for SRV names in a Prometheus config that these Services do not serve."""
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] == "Service"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    errors = []
    with open(path) as f:
        config = yaml.safe_load(f)
    names = [n for job in config.get("scrape_configs", []) for sd in job.get("dns_sd_configs", [])
             for n in sd.get("names", [])]
    if not names:
        errors.append(f"{path}: no dns_sd_configs names")
    for name in names:
        m = re.fullmatch(r"_(\w+)\._tcp\.([\w-]+)\.([\w-]+)\.svc\.cluster\.local", name)
        if not m:
            errors.append(f"{path}: {name} is not _PORT._tcp.SERVICE.NAMESPACE.svc.cluster.local")
            continue
        port, svc, ns = m.groups()
        if svc not in services or ns not in namespaces:
            errors.append(f"{path}: {name}: no Service {svc} in namespace {ns}")
        elif port not in {p.get("name") for p in services[svc]["spec"]["ports"]}:
            errors.append(f"{path}: {name}: Service {svc} has no port named {port}")
    return errors


def main(argv):
    prometheus = None
    if len(argv) > 2 and argv[1] == "--prometheus":
        prometheus, argv = argv[2], argv[:1] + argv[3:]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    flags = flags_from_sources()
    source = "the sources" if flags else "this script's copy"
    copy = {b: SERVER_FLAGS | f for b, f in BINARY_FLAGS.items()}
    failed = False
    if flags:
        for binary, names in copy.items():
            for stale in sorted(names - flags[binary]):
                print(f"check_k8s: BINARY_FLAGS lists --{stale}, which {binary} no longer has",
                      file=sys.stderr)
                failed = True
    flags = flags or copy
    for path in argv[1:]:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        checker = Checker(docs, flags)
        kinds = checker.run()
        if prometheus:
            checker.errors += check_prometheus_srv(prometheus, docs)
        if checker.errors:
            failed = True
            for e in checker.errors:
                print(f"check_k8s: {path}: {e}", file=sys.stderr)
        else:
            summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
            print(f"check_k8s: {path}: OK ({summary}; server flags from {source})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
