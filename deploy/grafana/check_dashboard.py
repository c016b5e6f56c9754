#!/usr/bin/env python3
"""Checks a Grafana dashboard JSON model and every PromQL query in it.

No Grafana server runs on these machines, so this checks what Grafana would
need and what promtool can:

  structure  the dashboard has a title, uid, integer schemaVersion and a
             Prometheus datasource variable; every panel has a unique integer
             id, a title, a known type, a gridPos of integers inside the
             24-column grid that overlaps no other panel, a datasource, and
             targets each with a refId and an expr;
  variables  every $var, ${var} or [[var]] in a query is a templating
             variable or a Grafana built-in ($__rate_interval, ...);
  metrics    every pscluster_* / process_* name a query uses is one the
             servers export (KNOWN_METRICS, itself checked against the C++
             sources when they are next to this script), so a typo'd or
             renamed metric that would just draw an empty panel fails here;
  PromQL     each expr, with variables replaced (built-in intervals by
             durations, other variables by their `allValue` or `.*`), becomes
             one recording rule in a temporary rules file that
             `promtool check rules` parses.

With --rules FILE..., the metric names used by Prometheus rule files (the
alerts) are checked against KNOWN_METRICS too.

Usage: check_dashboard.py DASHBOARD.json [--rules RULES.yml...]
Exits 1 naming each failing panel by id and title, 0 with a summary.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Panel types of Grafana 10/11 core (and `row`).
PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "histogram",
               "piechart", "text", "state-timeline", "status-history", "barchart", "logs",
               "row"}

# What the pscluster servers export (README "Metrics"). Histograms are listed
# by their family name; _bucket, _sum and _count are accepted.
KNOWN_METRICS = {
    # coordinator
    "pscluster_jobs", "pscluster_queue_depth", "pscluster_job_steps_total",
    "pscluster_job_examples_total", "pscluster_job_examples_per_second",
    "pscluster_job_train_loss", "pscluster_job_eval_metric", "pscluster_closures_scheduled_total",
    "pscluster_closures_retried_total", "pscluster_closures_failed_total",
    "pscluster_ps_recoveries_total", "pscluster_lost_steps_total", "pscluster_workers_lost_total",
    "pscluster_checkpoints_total", "pscluster_checkpoint_failures_total",
    "pscluster_checkpoint_age_seconds", "pscluster_checkpoint_duration_seconds",
    "pscluster_checkpoint_bytes", "pscluster_checkpoints_disabled",
    "pscluster_cluster_tasks_healthy",
    # worker
    "pscluster_worker_compute_seconds_total", "pscluster_worker_pull_seconds_total",
    "pscluster_worker_push_seconds_total", "pscluster_worker_steps_total",
    "pscluster_worker_examples_total",
    # ps
    "pscluster_ps_applied_updates_total", "pscluster_ps_pull_requests_total",
    "pscluster_ps_push_requests_total", "pscluster_ps_bytes_pushed_total",
    "pscluster_ps_bytes_pulled_total", "pscluster_ps_applied_steps_total",
    "pscluster_ps_duplicate_steps_total", "pscluster_ps_held_bytes", "pscluster_ps_variable_bytes",
    "pscluster_ps_jobs", "pscluster_ps_hash_table_evictions_total",
    # every server
    "pscluster_rpc_requests_total", "pscluster_rpc_latency_seconds", "process_cpu_seconds_total",
    "process_resident_memory_bytes", "process_start_time_seconds",
}
HISTOGRAMS = {"pscluster_rpc_latency_seconds"}

# Grafana's built-in variables, replaced by values of the right kind.
BUILTINS = {
    "__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__interval_ms": "60000",
    "__range_s": "3600", "__range_ms": "3600000", "__auto": "1m",
}
VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
METRIC_RE = re.compile(r"\b((?:pscluster|process)_[a-zA-Z0-9_]+)\b")


def metrics_in_sources():
    """Metric names quoted in the servers' C++ sources, or None if not found."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    names = set()
    for top in ("coordinator", "ps", "worker", "rpc"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".cc", ".h")) and not f.endswith("_test.cc"):
                    with open(os.path.join(dirpath, f), errors="replace") as src:
                        names.update(re.findall(r'"((?:pscluster|process)_[a-z0-9_]+)"', src.read()))
    return names or None


def metric_known(name):
    if name in KNOWN_METRICS:
        return True
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in HISTOGRAMS:
            return True
    return False


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class Dashboard:
    def __init__(self, model):
        self.model = model
        self.errors = []
        self.variables = {}       # name -> value substituted into queries
        self.datasource_vars = set()
        self.queries = []         # (where, expr) to check with promtool

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def substitute(self, where, expr):
        def repl(m):
            name = m.group(1) or m.group(2) or m.group(3)
            if name in BUILTINS:
                return BUILTINS[name]
            if name in self.variables:
                return self.variables[name]
            self.error(where, f"uses ${name}, which is neither a dashboard variable nor a "
                              "Grafana built-in")
            return ".*"
        return VAR_RE.sub(repl, expr)

    def check_metric_names(self, where, expr):
        for name in METRIC_RE.findall(expr):
            if not metric_known(name):
                self.error(where, f"metric {name} is not one the pscluster servers export")

    def check_top(self):
        m = self.model
        for key in ("title", "uid"):
            if not isinstance(m.get(key), str) or not m[key]:
                self.error("dashboard", f"no {key}")
        if not is_int(m.get("schemaVersion")) or m["schemaVersion"] < 36:
            self.error("dashboard", f"schemaVersion {m.get('schemaVersion')!r} is not an integer >= 36")
        if not isinstance(m.get("panels"), list) or not m["panels"]:
            self.error("dashboard", "no panels")
        variables = m.get("templating", {}).get("list", [])
        for v in variables:
            name = v.get("name")
            if not name:
                self.error("templating", "a variable without a name")
                continue
            if v.get("type") == "datasource":
                if v.get("query") != "prometheus":
                    self.error(f"variable {name}", "a datasource variable must query `prometheus`")
                self.datasource_vars.add(name)
            self.variables[name] = v.get("allValue") or ".*"
        if not self.datasource_vars:
            self.error("templating", "no Prometheus datasource variable")
        for v in variables:
            if v.get("type") != "query":
                continue
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else (q or "")
            where = f"variable {v['name']}"
            m2 = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q) or \
                re.fullmatch(r"\s*query_result\((.*)\)\s*", q)
            if m2:
                expr = m2.group(1)
                self.check_datasource(where, v.get("datasource"))
                self.check_metric_names(where, expr)
                self.queries.append((where, self.substitute(where, expr)))
            elif not re.fullmatch(r"\s*label_values\(\s*\w+\s*\)\s*", q):
                self.error(where, f"query {q!r} is not label_values(...) or query_result(...)")

    def check_datasource(self, where, ds):
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        if not isinstance(uid, str) or not uid:
            self.error(where, "no datasource")
            return
        m = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
        if m and (m.group(1) or m.group(2)) not in self.datasource_vars:
            self.error(where, f"datasource {uid} is not a datasource variable")
        if isinstance(ds, dict) and ds.get("type") not in (None, "prometheus"):
            self.error(where, f"datasource type {ds.get('type')!r} is not prometheus")

    def all_panels(self):
        for p in self.model.get("panels", []):
            yield p
            for child in p.get("panels", []) if p.get("type") == "row" else []:
                yield child

    def check_panels(self):
        ids = {}
        boxes = []
        for n, p in enumerate(self.all_panels()):
            title = p.get("title")
            where = f"panel {p.get('id', '#' + str(n))} {title!r}"
            if not isinstance(title, str) or not title.strip():
                self.error(where, "no title")
            if p.get("type") not in PANEL_TYPES:
                self.error(where, f"type {p.get('type')!r} is not a Grafana panel type")
            if not is_int(p.get("id")):
                self.error(where, "id is not an integer")
            elif p["id"] in ids:
                self.error(where, f"id {p['id']} is also panel {ids[p['id']]!r}")
            else:
                ids[p["id"]] = title
            g = p.get("gridPos")
            if not isinstance(g, dict) or not all(is_int(g.get(k)) for k in "xywh"):
                self.error(where, f"gridPos {g!r} needs integer x, y, w, h")
            elif g["x"] < 0 or g["y"] < 0 or g["w"] < 1 or g["h"] < 1 or g["x"] + g["w"] > 24:
                self.error(where, f"gridPos {g} is outside the 24-column grid")
            else:
                for other, og in boxes:
                    if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"] and
                            g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                        self.error(where, f"gridPos {g} overlaps {other} {og}")
                boxes.append((where, g))
            if p.get("type") in ("row", "text"):
                continue
            self.check_datasource(where, p.get("datasource"))
            targets = p.get("targets")
            if not isinstance(targets, list) or not targets:
                self.error(where, "no targets")
                continue
            ref_ids = set()
            for t in targets:
                ref = t.get("refId")
                twhere = f"{where} target {ref}"
                if not ref or ref in ref_ids:
                    self.error(twhere, "refId missing or repeated")
                ref_ids.add(ref)
                if "datasource" in t:
                    self.check_datasource(twhere, t["datasource"])
                expr = t.get("expr")
                if not isinstance(expr, str) or not expr.strip():
                    self.error(twhere, "no expr")
                    continue
                self.check_metric_names(twhere, expr)
                self.queries.append((twhere, self.substitute(twhere, expr)))


def promtool_check(queries, tmpdir):
    """Returns promtool's error text for these queries as rules, or ''."""
    rules = [{"record": f"dashboard_query_{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]
    path = os.path.join(tmpdir, "dashboard.rules.yml")
    with open(path, "w") as f:
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, indent=1)  # JSON is YAML
    r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    return "" if r.returncode == 0 else (r.stdout + r.stderr).strip()


def rule_file_exprs(path):
    """The expr strings of a Prometheus rules file (simple YAML scan: no PyYAML needed)."""
    exprs = []
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:- )?expr:\s*(.*)$", lines[i])
        if m:
            indent, value = len(m.group(1)), m.group(2)
            if value.startswith(("|", ">")):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                exprs.append(" ".join(block))
                continue
            exprs.append(value.strip("'\""))
        i += 1
    return exprs


def main(argv):
    args = argv[1:]
    rules_files = []
    if "--rules" in args:
        k = args.index("--rules")
        args, rules_files = args[:k], args[k + 1:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if shutil.which("promtool") is None:
        print("check_dashboard: promtool not found (Debian package `prometheus`; ./setup.sh "
              "installs it)", file=sys.stderr)
        return 1
    with open(args[0]) as f:
        try:
            model = json.load(f)
        except json.JSONDecodeError as e:
            print(f"check_dashboard: {args[0]}: not JSON: {e}", file=sys.stderr)
            return 1
    d = Dashboard(model)
    exported = metrics_in_sources()
    if exported is not None:  # run from the source tree: KNOWN_METRICS must be current
        for name in sorted(KNOWN_METRICS - exported):
            d.error("KNOWN_METRICS", f"{name} is not in the servers' sources any more")
    d.check_top()
    d.check_panels()
    for path in rules_files:
        exprs = rule_file_exprs(path)
        if not exprs:
            d.error(path, "no expr found")
        for n, expr in enumerate(exprs):
            d.check_metric_names(f"{os.path.basename(path)} rule {n + 1}", expr)
    with tempfile.TemporaryDirectory() as tmpdir:
        if d.queries and promtool_check(d.queries, tmpdir):
            # Find the culprits one query at a time.
            for where, expr in d.queries:
                out = promtool_check([(where, expr)], tmpdir)
                if out:
                    detail = out.splitlines()[-1].strip()
                    d.error(where, f"promtool check rules rejects {expr!r}: {detail}")
    if d.errors:
        for e in d.errors:
            print(f"check_dashboard: {args[0]}: {e}", file=sys.stderr)
        return 1
    n_panels = sum(1 for _ in d.all_panels())
    print(f"check_dashboard: {args[0]}: OK ({n_panels} panels, {len(d.queries)} PromQL queries "
          f"passed promtool check rules" +
          (f"; metric names of {len(rules_files)} rules file(s) known)" if rules_files else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
