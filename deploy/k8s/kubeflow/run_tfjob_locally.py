#!/usr/bin/env python3
"""Runs a TFJob manifest's replicas as local processes, as the operator would.

What the training-operator does for each replica of the TFJob, done here on
127.0.0.1: it gives the pod TF_CONFIG (check_tfjob.tf_config: every task's
address, this task's type and index) and runs the `tensorflow` container's
command and args. Here each task's address is 127.0.0.1:<a free port> instead
of <job>-<type>-<i>.<namespace>.svc:2222, files the pod would find under its
ConfigMap and Secret mounts are written to a temporary directory (a Secret's
keys are generated: `tokens` gets a fresh admin token), and --metrics_address
serves on 127.0.0.1:0. Nothing else of the command line changes.

It waits for the chief (bounded by --timeout), stops every other process by
its pid (SIGTERM, then SIGKILL), prints the chief's output, and exits with the
chief's exit status: what the TFJob's success or failure would be.

  run_tfjob_locally.py --bin DIR [--job_override KEY=VALUE]... [--timeout S]
      TFJOB.yaml CONFIGMAP.yaml...
  --bin DIR              where coordinator, ps_server, worker_server are
  --job_override K=V     sets a key of the --run_job file (dotted path, YAML
                         value), e.g. train.epochs=1, data.train.limit=4000
"""

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import check_tfjob  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_dotted(doc, dotted, value):
    keys = dotted.split(".")
    for k in keys[:-1]:
        doc = doc.setdefault(k, {})
    doc[keys[-1]] = yaml.safe_load(value)


def stop(proc):
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--job_override", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("manifests", nargs="+")
    args = parser.parse_args()

    docs = []
    for path in args.manifests:
        with open(path) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    job = next(d for d in docs if d.get("kind") == "TFJob")
    config_maps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
    work = tempfile.mkdtemp(prefix="tfjob-")
    specs = job["spec"]["tfReplicaSpecs"]

    # Every task's address, as the operator would write it, mapped to a port.
    local = {}
    for rtype, spec in specs.items():
        for i in range(spec.get("replicas", 1)):
            local[(rtype, i)] = f"127.0.0.1:{free_port()}"

    def local_tf_config(rtype, index):
        config = check_tfjob.tf_config(job, rtype, index)
        for t, addresses in config["cluster"].items():
            rt = next(r for r in specs if r.lower() == t)
            config["cluster"][t] = [local[(rt, i)] for i in range(len(addresses))]
        return config

    def materialize(rtype, index, template):
        """{mount path: local directory} for the pod's ConfigMap/Secret mounts."""
        container = check_tfjob.tensorflow_container(template)
        volumes = {v["name"]: v for v in template["spec"].get("volumes") or []}
        mounts = {}
        for m in container.get("volumeMounts") or []:
            v = volumes[m["name"]]
            d = os.path.join(work, f"{rtype.lower()}-{index}", m["name"])
            os.makedirs(d, exist_ok=True)
            if "configMap" in v:
                for key, text in config_maps[v["configMap"]["name"]]["data"].items():
                    if key.endswith((".yaml", ".yml")) and m["name"] == "jobs":
                        spec = yaml.safe_load(text)
                        for o in args.job_override:
                            k, _, value = o.partition("=")
                            set_dotted(spec, k, value)
                        text = yaml.safe_dump(spec)
                    with open(os.path.join(d, key), "w") as f:
                        f.write(text)
            elif "secret" in v:
                with open(os.path.join(d, "tokens"), "w") as f:
                    f.write(f"admin:{secrets.token_hex(16)}\n")
            mounts[m["mountPath"].rstrip("/")] = d
        return mounts

    def command_line(rtype, index, template):
        container = check_tfjob.tensorflow_container(template)
        mounts = materialize(rtype, index, template)
        argv = [os.path.join(args.bin, container["command"][0])] + container["command"][1:]
        for a in container.get("args") or []:
            name, eq, value = a.partition("=")
            if name == "--metrics_address":
                a = "--metrics_address=127.0.0.1:0"
            elif eq:
                for mount, d in mounts.items():
                    if value.startswith(mount + "/"):
                        a = f"{name}={d}{value[len(mount):]}"
            argv.append(a)
        return argv

    procs = {}
    chief = None
    try:
        for (rtype, i) in sorted(local, key=lambda k: (k[0] in ("Chief", "Master"), k)):
            template = specs[rtype]["template"]
            env = dict(os.environ, TF_CONFIG=json.dumps(local_tf_config(rtype, i)))
            argv = command_line(rtype, i, template)
            log = open(os.path.join(work, f"{rtype.lower()}-{i}.log"), "w")
            print(f"run_tfjob_locally: {rtype} {i}: TF_CONFIG task at {local[(rtype, i)]}: "
                  f"{' '.join(os.path.basename(a) if n == 0 else a for n, a in enumerate(argv))}",
                  flush=True)
            p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if rtype in (
                "Chief", "Master") else log, stderr=log, text=True)
            procs[(rtype, i)] = p
            if rtype in ("Chief", "Master"):
                chief = p
        try:
            out, _ = chief.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"run_tfjob_locally: the chief did not end within {args.timeout} s",
                  file=sys.stderr)
            stop(chief)
            out = ""
        print(out, end="")
        for (rtype, i), p in procs.items():
            if p is not chief and p.poll() is not None:
                print(f"run_tfjob_locally: {rtype} {i} exited {p.returncode} before the chief "
                      "ended", file=sys.stderr)
        code = chief.returncode
        if code != 0:
            with open(os.path.join(work, "chief-0.log")) as f:
                sys.stderr.write("".join(f.readlines()[-20:]))
        print(f"run_tfjob_locally: chief exited {code}")
        return code if code >= 0 else 128 - code
    finally:
        for p in procs.values():
            stop(p)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
