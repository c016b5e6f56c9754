// sparse_bench: embedding-row throughput of a dynamic hash table (HASH_TABLE
// variable, Adagrad) with Zipf-distributed ids, at three depths, in one run:
//   table  - HashTable::Lookup / ApplyGradients directly, one thread: rows/s
//            per core of the core data structure;
//   store  - the PS's Pull (PullRequest.lookups) / Push in process (JobStores ->
//            VariableStore)
//            (PushRequest.sparse) in process: adds id decoding, validation
//            and the tensor encoding, still no RPC;
//   rpc    - the same two calls through RemotePsClient to a
//            ParameterServerService on 127.0.0.1:0, and next to it a dense
//            push + pull of the same number of bytes through the same server
//            (a rank-1 variable with the same optimizer), so the sparse GB/s
//            is read against the dense data plane's GB/s measured alongside.
// Row payload per RPC round trip is 2 * batch * dim * 4 bytes (rows pulled +
// gradient rows pushed; the 8-byte ids are not counted), 1 GB = 1e9 B.
//
// Ids: ranks drawn from Zipf(--zipf_exponent) over [0, --id_space) by
// worker/core's ZipfSampler, scrambled by a bijective 64-bit mix (as hashed
// features are), --batches_per_size distinct batches per size, each holding
// `batch` distinct ids (a worker dedupes ids before it pulls). Every batch is
// looked up once before timing, so timed calls find their rows resident: this
// is the steady state of a warm table, not row creation.
//
// Points are interleaved (repeat -> dim -> batch -> path); each cell is the
// median over repeats. Exit codes: 0 success, 1 a call failed, 2 bad flags.
#include <prometheus/registry.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "common/row_ids.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "ps/core/hash_table.h"
#include "ps/core/optimizer.h"
#include "ps/core/job_stores.h"
#include "ps/core/variable_store.h"
#include "ps/service/remote_ps_client.h"
#include "ps/service/ps_service.h"
#include "common/checkpoint_file.h"
#include "rpc/rpc_util.h"
#include "worker/core/synthetic_ctr.h"

ABSL_FLAG(std::vector<std::string>, dims, std::vector<std::string>({"16", "64", "256"}),
          "Row widths.");
ABSL_FLAG(std::vector<std::string>, batches,
          std::vector<std::string>({"512", "2048", "4096", "16384"}), "Distinct ids per call.");
ABSL_FLAG(int64_t, id_space, 10000000, "Zipf ranks are drawn from [0, id_space).");
ABSL_FLAG(double, zipf_exponent, 1.05, "Zipf exponent of the id distribution.");
ABSL_FLAG(int, batches_per_size, 4, "Distinct batches per batch size, used in turn.");
ABSL_FLAG(int, repeats, 3, "Interleaved repeats per point; each cell is their median.");
ABSL_FLAG(double, seconds_per_point, 0.25, "Time each (repeat, dim, batch, path) runs for.");
ABSL_FLAG(bool, rpc, true,
          "false: only the table and store paths, no server (for profiling under callgrind, "
          "where gRPC cannot connect in time).");
ABSL_FLAG(std::string, output_json, "", "If set, the results are also written here as JSON.");

namespace pscluster {
namespace {

using bench::JsonNumbers;
using bench::JsonString;
using bench::Median;

constexpr int kExitBadFlags = 2;

// NaN for a path that did not run (--rpc=false).
double MedianOrNan(const std::vector<double>& v) { return v.empty() ? std::nan("") : Median(v); }
constexpr int kTargetDim = 64;
constexpr int64_t kTargetBatch = 4096;
constexpr double kTargetLookupRowsPerSec = 10e6;
constexpr double kTargetSparseOverDense = 0.6;

// What one path reports per repeat. `a` and `b` are its two figures (rows/s
// of lookups and updates, or GB/s), filled by Measure.
enum Path { kTable, kStore, kRpcSparse, kRpcDense, kNumPaths };
constexpr const char* kPathNames[kNumPaths] = {"table", "store", "rpc_sparse", "rpc_dense"};

// One call of a path: a lookup-like half and an update-like half, timed
// separately. `i` picks the batch.
struct TwoHalves {
  std::function<absl::Status(int i)> first;
  std::function<absl::Status(int i)> second;
};

struct Timing {
  int64_t iterations = 0;
  double first_seconds = 0;
  double second_seconds = 0;
};

absl::StatusOr<Timing> Measure(const TwoHalves& path, int num_batches, double seconds) {
  using Clock = std::chrono::steady_clock;
  Timing t;
  double elapsed = 0;
  do {
    const int i = static_cast<int>(t.iterations % num_batches);
    const Clock::time_point t0 = Clock::now();
    if (absl::Status s = path.first(i); !s.ok()) return s;
    const Clock::time_point t1 = Clock::now();
    if (absl::Status s = path.second(i); !s.ok()) return s;
    const Clock::time_point t2 = Clock::now();
    t.first_seconds += std::chrono::duration<double>(t1 - t0).count();
    t.second_seconds += std::chrono::duration<double>(t2 - t1).count();
    elapsed = t.first_seconds + t.second_seconds;
    ++t.iterations;
  } while (elapsed < seconds);
  return t;
}

// Bijective 64-bit mix (splitmix64's finalizer): spreads Zipf ranks over the
// id space as a feature hash would.
uint64_t Scramble(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Batch {
  std::vector<uint64_t> ids;
  std::vector<float> grads;
  std::vector<float> out;  // lookup destination for the table path
  PullRequest lookup;      // store and rpc paths
  PushRequest update;
};

struct Point {
  int dim = 0;
  int64_t batch = 0;
  std::vector<Batch> batches;
  PullRequest dense_pull;
  PushRequest dense_push;
  // Per path, per repeat: [0] = first-half figure, [1] = second-half figure.
  std::vector<double> figures[kNumPaths][2];
  std::vector<double> sparse_gbps;
  std::vector<double> sparse_over_dense;
  int64_t payload_bytes() const { return batch * dim * 4; }
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Hash-table lookup and Adagrad update throughput, in process and over "
      "RPC, against the "
      "dense data plane.\n  sparse_bench [--dims=16,64,256] "
      "[--batches=512,...] "
      "[--repeats=3] [--seconds_per_point=0.25] [--output_json=PATH]");
  absl::ParseCommandLine(argc, argv);
  auto parse_list = [](const std::vector<std::string>& in, std::vector<int64_t>* out) {
    for (const std::string& s : in) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(s, &n) || n < 1 || n > (1 << 20)) return false;
      out->push_back(n);
    }
    return !out->empty();
  };
  std::vector<int64_t> dims, batch_sizes;
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const int per_size = absl::GetFlag(FLAGS_batches_per_size);
  const double seconds = absl::GetFlag(FLAGS_seconds_per_point);
  const int64_t id_space = absl::GetFlag(FLAGS_id_space);
  const double exponent = absl::GetFlag(FLAGS_zipf_exponent);
  if (!parse_list(absl::GetFlag(FLAGS_dims), &dims) ||
      !parse_list(absl::GetFlag(FLAGS_batches), &batch_sizes) || repeats < 1 || per_size < 1 ||
      seconds < 0 || exponent <= 0) {
    std::cerr << "sparse_bench: need --dims and --batches in [1, 2^20], "
                 "--repeats >= 1, "
                 "--batches_per_size >= 1, --seconds_per_point >= 0, "
                 "--zipf_exponent > 0\n";
    return kExitBadFlags;
  }
  for (int64_t b : batch_sizes) {
    if (b * 4 > id_space) {
      std::cerr << "sparse_bench: --id_space must be at least 4x the largest batch\n";
      return kExitBadFlags;
    }
  }

  OptimizerProto adagrad;
  adagrad.set_type("adagrad");
  adagrad.set_learning_rate(0.05f);
  adagrad.set_initial_accumulator_value(0.1f);
  adagrad.set_epsilon(1e-7f);
  InitializerProto init;
  init.set_type("random_normal");
  init.set_stddev(0.01f);
  auto optimizer = Optimizer::Create(adagrad);
  if (!optimizer.ok()) {
    std::cerr << "sparse_bench: " << optimizer.status() << "\n";
    return 1;
  }

  // The server, wired as ps/main.cc wires a ps_server.
  auto registry = std::make_shared<prometheus::Registry>();
  VariableStore::Options store_options;
  store_options.registry = registry;
  // The PS's job namespaces; every request here addresses the "" job.
  JobStores store(store_options);
  ParameterServerService ps_service(&store, registry);
  const bool rpc = absl::GetFlag(FLAGS_rpc);
  const int num_paths = rpc ? kNumPaths : kRpcSparse;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      rpc ? StartServer(ServerOptions(), {&ps_service}, registry) : nullptr;
  if (!server.ok()) {
    std::cerr << "sparse_bench: ps server: " << server.status() << "\n";
    return 1;
  }
  RemotePsClient::Options client_options;
  client_options.target = absl::StrCat("127.0.0.1:", rpc ? (*server)->port() : 1);
  client_options.call_timeout = std::chrono::minutes(5);
  RemotePsClient client(client_options);

  // One HashTable and one HASH_TABLE variable per dim; one dense variable per
  // (dim, batch); every request built before timing.
  std::cerr << "generating ids and variables\n";
  SplitMix64 rng(17);
  const ZipfSampler zipf(id_space, exponent);
  std::vector<std::unique_ptr<HashTable>> tables;
  std::vector<Point> points;
  CreateVariablesRequest create;
  for (int64_t dim : dims) {
    HashTable::Options table_options;
    table_options.name = absl::StrCat("table_d", dim);
    table_options.dim = dim;
    table_options.initializer = init;
    table_options.optimizer = optimizer->get();
    auto table = HashTable::Create(table_options);
    if (!table.ok()) {
      std::cerr << "sparse_bench: " << table.status() << "\n";
      return 1;
    }
    tables.push_back(std::move(*table));
    const std::string emb = absl::StrCat("emb_d", dim);
    VariableSpecProto* spec = create.add_variables();
    spec->set_name(emb);
    spec->set_dtype(DT_FLOAT32);
    spec->set_kind(HASH_TABLE);
    spec->add_shape(dim);
    *spec->mutable_initializer() = init;
    *spec->mutable_optimizer() = adagrad;
    for (int64_t n : batch_sizes) {
      Point p;
      p.dim = static_cast<int>(dim);
      p.batch = n;
      for (int k = 0; k < per_size; ++k) {
        Batch b;
        absl::flat_hash_set<uint64_t> seen;
        while (static_cast<int64_t>(b.ids.size()) < n) {
          const uint64_t id = Scramble(static_cast<uint64_t>(zipf.Sample(rng)));
          if (seen.insert(id).second) b.ids.push_back(id);
        }
        b.grads.assign(static_cast<size_t>(n * dim), 1e-3f);
        b.out.resize(b.grads.size());
        const std::string ids = EncodeRowIds(absl::MakeConstSpan(b.ids));
        b.lookup.set_job("bench");
        b.update.set_job("bench");
        RowIds* lookup = b.lookup.add_lookups();
        lookup->set_name(emb);
        lookup->set_ids(ids);
        SparseGradient* g = b.update.add_sparse();
        g->set_name(emb);
        g->set_ids(ids);
        EncodeTensor(Shape{n, dim}, b.grads, g->mutable_rows());
        p.batches.push_back(std::move(b));
      }
      const std::string dense = absl::StrCat("dense_d", dim, "_n", n);
      VariableSpecProto* d = create.add_variables();
      d->set_name(dense);
      d->set_dtype(DT_FLOAT32);
      d->add_shape(n * dim);
      d->mutable_initializer()->set_type("zeros");
      *d->mutable_optimizer() = adagrad;
      p.dense_pull.set_job("bench");
      p.dense_push.set_job("bench");
      p.dense_pull.add_names(dense);
      NamedTensor* grad = p.dense_push.add_gradients();
      grad->set_name(dense);
      EncodeTensor(Shape{n * dim}, p.batches[0].grads, grad->mutable_tensor());
      points.push_back(std::move(p));
    }
  }
  create.set_job("bench");
  CreateVariablesResponse created;
  if (absl::Status s = store.CreateVariables(create, &created); !s.ok()) {
    std::cerr << "sparse_bench: CreateVariables: " << s << "\n";
    return 1;
  }

  std::vector<int64_t> steps(dims.size(),
                             0);  // per table: Adagrad's update count
  auto make_path = [&](Path path, Point& p, size_t table_index) -> TwoHalves {
    HashTable* table = tables[table_index].get();
    int64_t* step = &steps[table_index];
    const int64_t want = p.batch * p.dim * 4;
    auto check = [want](const PullResponse& r, bool rows) -> absl::Status {
      const auto& t = rows ? r.rows() : r.tensors();
      if (t.size() != 1 || static_cast<int64_t>(t[0].tensor().data().size()) != want) {
        return absl::InternalError("pull returned the wrong size");
      }
      return absl::OkStatus();
    };
    switch (path) {
      case kTable:
        return {[&p, table](int i) {
                  Batch& b = p.batches[i];
                  table->Lookup(b.ids, absl::MakeSpan(b.out));
                  return absl::OkStatus();
                },
                [&p, table, step](int i) {
                  Batch& b = p.batches[i];
                  table->ApplyGradients(++*step, b.ids, b.grads);
                  return absl::OkStatus();
                }};
      case kStore:
        return {[&p, &store, check](int i) {
                  PullResponse r;
                  absl::Status s = store.Pull(p.batches[i].lookup, &r);
                  return s.ok() ? check(r, true) : s;
                },
                [&p, &store](int i) {
                  PushResponse r;
                  return store.Push(p.batches[i].update, &r);
                }};
      case kRpcSparse:
        return {[&p, &client, check](int i) {
                  PullResponse r;
                  absl::Status s = client.Pull(p.batches[i].lookup, &r);
                  return s.ok() ? check(r, true) : s;
                },
                [&p, &client](int i) {
                  PushResponse r;
                  return client.Push(p.batches[i].update, &r);
                }};
      case kRpcDense:
      default:
        return {[&p, &client](int) {
                  PushResponse r;
                  return client.Push(p.dense_push, &r);
                },
                [&p, &client, check](int) {
                  PullResponse r;
                  absl::Status s = client.Pull(p.dense_pull, &r);
                  return s.ok() ? check(r, false) : s;
                }};
    }
  };

  // Warm-up: every batch through every path once (rows created, channels up).
  std::cerr << "warm-up\n";
  for (size_t i = 0; i < points.size(); ++i) {
    for (int path = 0; path < num_paths; ++path) {
      const TwoHalves h = make_path(static_cast<Path>(path), points[i], i / batch_sizes.size());
      for (int k = 0; k < per_size; ++k) {
        absl::Status s = h.first(k);
        if (s.ok()) s = h.second(k);
        if (!s.ok()) {
          std::cerr << "sparse_bench: warm-up " << kPathNames[path] << ": " << s << "\n";
          return 1;
        }
      }
    }
  }

  for (int r = 0; r < repeats; ++r) {
    std::cerr << "repeat " << (r + 1) << "/" << repeats << "\n";
    for (size_t i = 0; i < points.size(); ++i) {
      Point& p = points[i];
      const double rows = static_cast<double>(p.batch);
      const double bytes = 2.0 * static_cast<double>(p.payload_bytes());
      for (int path = 0; path < num_paths; ++path) {
        const TwoHalves h = make_path(static_cast<Path>(path), p, i / batch_sizes.size());
        absl::StatusOr<Timing> t = Measure(h, per_size, seconds);
        if (!t.ok()) {
          std::cerr << "sparse_bench: " << kPathNames[path] << " dim " << p.dim << " batch "
                    << p.batch << ": " << t.status() << "\n";
          return 1;
        }
        const double n = static_cast<double>(t->iterations);
        // rows/s of each half; for rpc_sparse and rpc_dense also GB/s of
        // the round trip, kept in figures[path][1] for rpc_dense.
        double first = n * rows / t->first_seconds, second = n * rows / t->second_seconds;
        if (path == kRpcDense) {
          first = second = n * bytes / (t->first_seconds + t->second_seconds) / 1e9;
        }
        if (path == kRpcSparse) {
          p.sparse_gbps.push_back(n * bytes / (t->first_seconds + t->second_seconds) / 1e9);
        }
        p.figures[path][0].push_back(first);
        p.figures[path][1].push_back(second);
      }
      if (rpc) p.sparse_over_dense.push_back(p.sparse_gbps.back() / p.figures[kRpcDense][0].back());
    }
  }

  const std::string date = bench::UtcNow();
  const std::string cpu = bench::CpuModel();
  const unsigned cores = std::thread::hardware_concurrency();
  std::cout << absl::StrFormat(
      "Machine: %u CPUs, %s. Date: %s. Median of %d "
      "interleaved repeats, %.2f s per point.\n"
      "Hash table (Adagrad), Zipf(%.2f) ids over %d, "
      "rows resident. Mrows/s = 1e6 rows/s, one "
      "client thread; GB/s = 2 * batch * dim * 4 B "
      "per lookup+update round trip.\n\n",
      cores, cpu, date, repeats, seconds, exponent, id_space);
  std::cout << "| dim | batch | rows payload | table lookup Mrows/s | table "
               "Adagrad Mrows/s | "
               "store lookup Mrows/s | store Adagrad Mrows/s | RPC lookup "
               "Mrows/s | RPC Adagrad "
               "Mrows/s | RPC sparse GB/s | RPC dense GB/s | sparse/dense |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<std::string> json_points;
  double target_lookup = -1, target_ratio = -1;
  for (const Point& p : points) {
    double m[kNumPaths][2];
    for (int path = 0; path < kNumPaths; ++path) {
      for (int h = 0; h < 2; ++h) m[path][h] = MedianOrNan(p.figures[path][h]);
    }
    const double ratio = MedianOrNan(p.sparse_over_dense);
    const double sparse_gbps = MedianOrNan(p.sparse_gbps);
    std::cout << absl::StrFormat(
        "| %d | %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | "
        "%.3f | %.2f |\n",
        p.dim, p.batch, bench::SizeLabel(p.payload_bytes()), m[kTable][0] / 1e6, m[kTable][1] / 1e6,
        m[kStore][0] / 1e6, m[kStore][1] / 1e6, m[kRpcSparse][0] / 1e6, m[kRpcSparse][1] / 1e6,
        sparse_gbps, m[kRpcDense][0], ratio);
    if (p.dim == kTargetDim && p.batch == kTargetBatch) {
      target_lookup = m[kTable][0];
      target_ratio = ratio;
    }
    std::vector<std::string> f = {absl::StrCat("\"dim\": ", p.dim),
                                  absl::StrCat("\"batch\": ", p.batch),
                                  absl::StrCat("\"row_payload_bytes\": ", p.payload_bytes())};
    const char* halves[kNumPaths][2] = {{"table_lookup_rows_per_sec", "table_adagrad_rows_per_sec"},
                                        {"store_lookup_rows_per_sec", "store_adagrad_rows_per_sec"},
                                        {"rpc_lookup_rows_per_sec", "rpc_adagrad_rows_per_sec"},
                                        {"rpc_dense_gbps", nullptr}};
    for (int path = 0; path < kNumPaths; ++path) {
      for (int h = 0; h < 2; ++h) {
        if (halves[path][h] == nullptr) continue;
        f.push_back(absl::StrFormat("\"%s\": %.6g", halves[path][h], m[path][h]));
        f.push_back(absl::StrFormat("\"%s_repeats\": %s", halves[path][h],
                                    JsonNumbers(p.figures[path][h])));
      }
    }
    f.push_back(absl::StrFormat("\"rpc_sparse_gbps\": %.6g", sparse_gbps));
    f.push_back(absl::StrFormat("\"rpc_sparse_gbps_repeats\": %s", JsonNumbers(p.sparse_gbps)));
    f.push_back(absl::StrFormat("\"sparse_over_dense\": %.6g", ratio));
    f.push_back(
        absl::StrFormat("\"sparse_over_dense_repeats\": %s", JsonNumbers(p.sparse_over_dense)));
    json_points.push_back(absl::StrCat("    {", absl::StrJoin(f, ", "), "}"));
  }

  std::vector<std::string> targets;
  if (target_lookup >= 0) {
    const bool lookup_met = target_lookup >= kTargetLookupRowsPerSec;
    const bool ratio_met = target_ratio >= kTargetSparseOverDense;
    std::cout << absl::StrFormat(
        "\nTargets (dim %d, batch %d): in-process lookups %.2f Mrows/s per "
        "core (target >= 10): "
        "%s; RPC sparse / dense GB/s %.2f (target >= 0.60): %s\n",
        kTargetDim, kTargetBatch, target_lookup / 1e6, lookup_met ? "MET" : "MISSED", target_ratio,
        ratio_met ? "MET" : "MISSED");
    targets.push_back(
        absl::StrFormat("    {\"name\": \"in-process lookups, dim 64, batch "
                        "4096\", \"target\": \">= 10e6 "
                        "rows/s per core\", \"measured\": %.6g, \"met\": %s}",
                        target_lookup, lookup_met ? "true" : "false"));
    targets.push_back(
        absl::StrFormat("    {\"name\": \"RPC sparse GB/s over dense GB/s, dim "
                        "64, batch 4096\", \"target\": "
                        "\">= 0.6\", \"measured\": %.6g, \"met\": %s}",
                        target_ratio, ratio_met ? "true" : "false"));
  }

  const std::string json_path = absl::GetFlag(FLAGS_output_json);
  if (!json_path.empty()) {
    const std::string json = absl::StrCat(
        "{\n  \"benchmark\": \"sparse_bench\",\n  \"date\": ", JsonString(date),
        ",\n  \"nproc\": ", cores, ",\n  \"cpu_model\": ", JsonString(cpu),
        ",\n  \"repeats\": ", repeats, ",\n  \"seconds_per_point\": ", seconds,
        ",\n  \"id_space\": ", id_space, ",\n  \"zipf_exponent\": ", exponent,
        ",\n  \"optimizer\": \"adagrad\",\n  \"points\": [\n", absl::StrJoin(json_points, ",\n"),
        "\n  ],\n  \"targets\": [\n", absl::StrJoin(targets, ",\n"), "\n  ]\n}\n");
    if (absl::Status s = WriteFileAtomically(json_path, json).status(); !s.ok()) {
      std::cerr << "sparse_bench: --output_json: " << s << "\n";
      return 1;
    }
  }
  if (rpc) (*server)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
