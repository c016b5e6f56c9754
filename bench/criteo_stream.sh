#!/usr/bin/env bash
# Issue 24's must-show: DLRM (examples/criteo_dlrm.yaml's model) streaming a
# Criteo-layout TFRecord set of at least 12 GiB on 2 PS x 2 workers.
#
#   bench/criteo_stream.sh [--data DIR] [--rows N] [--slice_rows N] [--rounds N] [--slice_only]
#
# 1. The big set: datagen/criteo_gen writes --rows rows (default 18,500,000:
#    ~12.9 GB of tf.Example TFRecord in 48 shards) and 100,000 held-out rows
#    into DIR (default data/criteo12g; git-ignored), unless DIR/meta.json is
#    there already. meta.json holds the holdout's Bayes-optimal AUC.
# 2. A slice: --slice_rows rows (default 400,000) written twice from the
#    same seed, as TFRecord and as TSV (criteo_gen --format both: the same
#    rows). The in-memory path (csv, loaded whole) and the streaming path
#    (tfrecord) train one epoch of it each, interleaved --rounds times
#    (default 3); the median examples/s of each and their ratio.
# 3. The big run: one epoch over the big set, streaming. Every worker's
#    VmRSS and VmHWM are sampled each second from /proc; the job's
#    examples/s and holdout AUC against the Bayes-optimal AUC.
#    --slice_only: steps 2 alone (no big set), results in
#    bench/results/<date>-criteo-stream-slice.{json,md}.
# Results: bench/results/<date>-criteo-stream.{json,md}. Nothing here is
# part of ./run_tests.sh; run it on a quiet machine (it prints the load).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

data=data/criteo12g
rows=18500000
slice_rows=400000
rounds=3
slice_only=0
while (($# > 0)); do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    --slice_rows) slice_rows="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --slice_only) slice_only=1; shift ;;
    *) echo "criteo_stream: unknown argument $1" >&2; exit 2 ;;
  esac
done
python=/usr/bin/python3
[[ -x $python ]] || python=python3

bazel build //client:psctl //datagen:criteo_gen //ps:ps_server //worker:worker_server //coordinator
bin=.bazel/bin
work="$(mktemp -d "${TMPDIR:-/tmp}/criteo-stream.XXXXXX")"
trap 'rm -rf "$work"' EXIT
slice=data/criteo-slice-$slice_rows

if ((slice_only == 0)) && [[ ! -f $data/meta.json ]]; then
  echo "criteo_stream: generating $rows rows into $data (TFRecord, 48 shards)"
  "$bin/datagen/criteo_gen" --out "$data" --rows "$rows" --shards 48 --holdout_rows 100000 \
    --holdout_shards 1 --format tfrecord --signal 1
fi
if [[ ! -f $slice/meta.json ]]; then
  echo "criteo_stream: generating the $slice_rows-row slice into $slice (TFRecord and TSV)"
  "$bin/datagen/criteo_gen" --out "$slice" --rows "$slice_rows" --shards 4 --holdout_rows 20000 \
    --holdout_shards 1 --format both --compress none --signal 1
fi
bytes=0
if ((slice_only == 0)); then
  bytes=$(du -cb "$data"/train-*.tfrecord | tail -1 | cut -f1)
  echo "criteo_stream: $data holds $bytes bytes of training TFRecord"
fi

# The three jobs: examples/criteo_dlrm.yaml's model and optimizer, its data
# section replaced.
"$python" - "$work" "$data" "$slice" <<'PY'
import glob, sys, yaml
work, data, sl = sys.argv[1:]
base = yaml.safe_load(open("examples/criteo_dlrm.yaml"))
train = base["data"]["train"]
common = {k: train[k] for k in ("columns", "label", "dense_columns")}
stream = {"shard": "data", "prefetch_bytes": 4 << 20, "shuffle_buffer": 10000,
          "corrupt_records": "fail"}
def job(name, tr, ev):
    j = dict(base, name=name)
    j["data"] = dict(base["data"], train=tr, eval=ev)
    yaml.safe_dump(j, open(f"{work}/{name}.yaml", "w"), sort_keys=False)
tf = lambda pattern: dict(common, format="tfrecord", path=[pattern], stream=stream)
tsv = lambda files: dict(common, format="csv", path=files, delimiter="\t", header=False)
job("big-stream", tf(f"{data}/train-*.tfrecord"), tf(f"{data}/holdout-*.tfrecord"))
job("slice-stream", tf(f"{sl}/train-*.tfrecord"), tf(f"{sl}/holdout-*.tfrecord"))
# The in-memory loader takes file lists, not patterns (those are streaming's).
job("slice-memory", tsv(sorted(glob.glob(f"{sl}/train-*.tsv"))),
    tsv(sorted(glob.glob(f"{sl}/holdout-*.tsv"))))
PY

# run NAME: psctl local of $work/NAME.yaml; the result JSON in
# $work/NAME.json, worker memory samples (pid VmRSS_kB VmHWM_kB) in
# $work/NAME.rss.
run() {
  local name="$1"
  "$bin/client/psctl" local "$work/$name.yaml" --ps 2 --workers 2 --output json \
    --ps_server_bin="$bin/ps/ps_server" --worker_server_bin="$bin/worker/worker_server" \
    --coordinator_bin="$bin/coordinator/coordinator" > "$work/$name.json" 2> "$work/$name.err" &
  local pid=$! pids
  : > "$work/$name.rss"
  while kill -0 "$pid" 2>/dev/null; do
    pids="$(pgrep -f "$bin/worker/worker_server" || true)"
    for p in $pids; do
      awk -v p="$p" '/^VmRSS/ {r=$2} /^VmHWM/ {h=$2} END {if (r) print p, r, h}' \
        "/proc/$p/status" 2>/dev/null >> "$work/$name.rss" || true
    done
    sleep 1
  done
  wait "$pid" || {
    tail -30 "$work/$name.err" >&2
    "$python" -c "import json,sys; print(json.load(open(sys.argv[1])).get('error'))" \
      "$work/$name.json" >&2 || true
    echo "criteo_stream: $name failed" >&2
    exit 1
  }
}

echo "criteo_stream: load before: $(uptime)"
for ((r = 1; r <= rounds; ++r)); do
  for name in slice-memory slice-stream; do
    run "$name"
    cp "$work/$name.json" "$work/$name.$r.json"
    "$python" -c "import json,sys; r=json.load(open(sys.argv[1])); print('  round $r $name:', r['state'], '%.0f examples/s' % r['examples_per_sec'], 'AUC %.4f' % r['eval_auc'])" "$work/$name.json"
  done
done
date="$(date -u +%Y-%m-%d)"
if ((slice_only)); then
  echo "criteo_stream: load after: $(uptime)"
  "$python" - "$work" "$rounds" "$slice" "$date" <<'PY'
import json, statistics, sys
work, rounds, sl, date = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
runs = {n: [json.load(open(f"{work}/{n}.{r}.json")) for r in range(1, rounds + 1)]
        for n in ("slice-memory", "slice-stream")}
rate = {n: statistics.median(r["examples_per_sec"] for r in v) for n, v in runs.items()}
res = {"date": date, "slice": sl, "rounds": rounds,
       "examples_per_sec": {n: [r["examples_per_sec"] for r in v] for n, v in runs.items()},
       "eval_auc": {n: [r["eval_auc"] for r in v] for n, v in runs.items()},
       "memory_examples_per_sec": rate["slice-memory"],
       "stream_examples_per_sec": rate["slice-stream"],
       "ratio": rate["slice-stream"] / rate["slice-memory"]}
json.dump(res, open(f"bench/results/{date}-criteo-stream-slice.json", "w"), indent=1)
per = lambda n, k, f: ", ".join(f % x for x in res[k][n])
md = f"""# DLRM on a Criteo-layout slice: streaming TFRecord against in-memory TSV ({date})

{sl}, 2 PS x 2 workers, `psctl local`, {rounds} interleaved rounds
(`bench/criteo_stream.sh --slice_only`).

| path | examples/s per round | median | holdout AUC per round |
|---|---|---:|---|
| in-memory (TSV, loaded whole) | {per("slice-memory", "examples_per_sec", "%.0f")} | {rate["slice-memory"]:.0f} | {per("slice-memory", "eval_auc", "%.4f")} |
| streaming (TFRecord) | {per("slice-stream", "examples_per_sec", "%.0f")} | {rate["slice-stream"]:.0f} | {per("slice-stream", "eval_auc", "%.4f")} |

Streaming / in-memory: **{res["ratio"]:.2f}** (target >= 0.9).
"""
open(f"bench/results/{date}-criteo-stream-slice.md", "w").write(md)
print(md)
PY
  exit 0
fi
echo "criteo_stream: the big run ($rows rows), load: $(uptime)"
run big-stream
echo "criteo_stream: load after: $(uptime)"
"$python" - "$work" "$rounds" "$data" "$bytes" "$date" <<'PY'
import json, statistics, sys
work, rounds, data, nbytes, date = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
def load(name):
    return json.load(open(f"{work}/{name}.json"))
rate = {n: statistics.median(json.load(open(f"{work}/{n}.{r}.json"))["examples_per_sec"]
                             for r in range(1, rounds + 1))
        for n in ("slice-memory", "slice-stream")}
big = load("big-stream")
meta = json.load(open(f"{data}/meta.json"))
bayes = meta["bayes_auc"]
rss = [line.split() for line in open(f"{work}/big-stream.rss") if line.strip()]
max_rss_kb = max(int(x[1]) for x in rss)
max_hwm_kb = max(int(x[2]) for x in rss)
res = {
    "date": date, "data": data, "train_bytes": nbytes, "rows": big.get("examples"),
    "big": {"state": big["state"], "examples_per_sec": big["examples_per_sec"],
            "eval_auc": big["eval_auc"], "wall_seconds": big.get("wall_seconds"),
            "bayes_auc": bayes, "auc_gap": bayes - big["eval_auc"],
            "worker_max_rss_mib": max_rss_kb / 1024, "worker_max_hwm_mib": max_hwm_kb / 1024,
            "rss_samples": len(rss)},
    "slice": {"memory_examples_per_sec": rate["slice-memory"],
              "stream_examples_per_sec": rate["slice-stream"],
              "ratio": rate["slice-stream"] / rate["slice-memory"], "rounds": rounds},
}
json.dump(res, open(f"bench/results/{date}-criteo-stream.json", "w"), indent=1)
b, s = res["big"], res["slice"]
md = f"""# DLRM streaming a {nbytes / 1e9:.1f} GB TFRecord set, 2 PS x 2 workers ({date})

| | value | target |
|---|---:|---|
| training TFRecord on disk | {nbytes / 1e9:.2f} GB ({nbytes / 2**30:.2f} GiB) | >= 12 GB |
| job | {b['state']}, {b['wall_seconds'] or 0:.0f} s | |
| examples/s (big run) | {b['examples_per_sec']:.0f} | |
| every worker's peak RSS (VmHWM) | {b['worker_max_hwm_mib']:.0f} MiB | < 1024 MiB |
| holdout AUC / Bayes-optimal | {b['eval_auc']:.4f} / {bayes:.4f} (gap {b['auc_gap']:.4f}) | gap <= 0.01 |
| slice examples/s, streaming / in-memory | {s['stream_examples_per_sec']:.0f} / {s['memory_examples_per_sec']:.0f} = {s['ratio']:.2f} | >= 0.9 |
"""
open(f"bench/results/{date}-criteo-stream.md", "w").write(md)
print(md)
PY
