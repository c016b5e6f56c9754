// criteo_gen: writes a Criteo-layout click log with a known answer
// (datagen/criteo_synth.h) as sharded TSV (gzip or plain) and/or TFRecord
// files of tf.Example, at any size, and meta.json with the Bayes-optimal
// AUC of its held-out part.
//
//   criteo_gen --out DIR --rows N [--shards 8] [--holdout_rows 100000]
//              [--holdout_shards 1] [--format tsv|tfrecord|both]
//              [--compress gzip|none] [--gzip_level 1] [--seed 1]
//              [--ctr 0.25] [--vocab_scale 1] [--signal 1] [--threads T]
//
// Files: DIR/train-00000-of-00008.tsv.gz (or .tsv, .tfrecord), ...,
// DIR/holdout-00000-of-00001.*, DIR/meta.json. Each file is written under a
// temporary name and renamed when complete, so a file of the final name is
// never torn. The same flags give the same bytes.
//
// meta.json: the options, the model's bias, per-file rows and bytes, the
// train set's click rate, and for the holdout set the Bayes-optimal
// predictor's AUC and log loss on its drawn labels ("bayes_auc",
// "bayes_logloss") and the AUC it is expected to reach before labels are
// drawn ("expected_bayes_auc").
//
// Exit status: 0 written; 1 an error (a file that cannot be written, a full
// disk), named on stderr; 2 bad flags.
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "common/tfrecord.h"
#include "datagen/criteo_synth.h"

namespace pscluster {
namespace {

struct GenOptions {
  std::string out;
  int64_t rows = 0;
  int shards = 8;
  int64_t holdout_rows = 100000;
  int holdout_shards = 1;
  std::string format = "tsv";
  std::string compress = "gzip";
  int gzip_level = 1;
  int threads = 0;
  CriteoSynthOptions synth;
};

// One output file, written whole under `path`.tmp and renamed.
class OutputFile {
 public:
  OutputFile(std::string path, bool gzip, int level) : path_(std::move(path)), gzip_(gzip) {
    tmp_ = path_ + ".tmp";
    if (gzip_) {
      gz_ = gzopen(tmp_.c_str(), absl::StrCat("wb", level).c_str());
      if (gz_ == nullptr) status_ = Error("cannot create");
    } else {
      file_ = std::fopen(tmp_.c_str(), "wbe");
      if (file_ == nullptr) status_ = Error("cannot create");
    }
    buffer_.reserve(kFlushBytes + 4096);
  }
  ~OutputFile() {
    if (gz_ != nullptr) gzclose(gz_);
    if (file_ != nullptr) std::fclose(file_);
    if (!closed_) std::remove(tmp_.c_str());
  }

  void Append(const std::string& bytes) {
    buffer_ += bytes;
    if (buffer_.size() >= kFlushBytes) Flush();
  }

  // Flushes, closes and renames; the file's size on disk in *bytes.
  absl::Status Close(int64_t* bytes) {
    Flush();
    if (gz_ != nullptr) {
      const int rc = gzclose(gz_);
      gz_ = nullptr;
      if (rc != Z_OK && status_.ok()) status_ = Error("gzip close failed");
    }
    if (file_ != nullptr) {
      const int rc = std::fclose(file_);
      file_ = nullptr;
      if (rc != 0 && status_.ok()) status_ = Error("close failed");
    }
    if (!status_.ok()) return status_;
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) return absl::InternalError(absl::StrCat(path_, ": rename: ", ec.message()));
    closed_ = true;
    *bytes = static_cast<int64_t>(std::filesystem::file_size(path_, ec));
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kFlushBytes = 1 << 20;

  absl::Status Error(const std::string& what) const {
    return absl::InternalError(absl::StrCat(tmp_, ": ", what, ": ", std::strerror(errno)));
  }

  void Flush() {
    if (buffer_.empty() || !status_.ok()) {
      buffer_.clear();
      return;
    }
    if (gz_ != nullptr) {
      if (gzwrite(gz_, buffer_.data(), static_cast<unsigned>(buffer_.size())) !=
          static_cast<int>(buffer_.size())) {
        status_ = Error("gzip write failed");
      }
    } else if (file_ != nullptr &&
               std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
      status_ = Error("write failed");
    }
    buffer_.clear();
  }

  const std::string path_;
  const bool gzip_;
  std::string tmp_;
  gzFile gz_ = nullptr;
  std::FILE* file_ = nullptr;
  std::string buffer_;
  absl::Status status_;
  bool closed_ = false;
};

struct ShardResult {
  std::vector<std::string> files;
  std::vector<int64_t> bytes;
  int64_t rows = 0;
  int64_t positives = 0;
  std::vector<double> probabilities;  // holdout only
  std::vector<int> labels;            // holdout only
  absl::Status status;
};

std::string ShardName(const std::string& split, int index, int count) {
  return absl::StrFormat("%s-%05d-of-%05d", split, index, count);
}

void WriteShard(const GenOptions& o, const CriteoModel& model, const std::string& split,
                uint64_t stream, int index, int count, int64_t rows, bool keep_probabilities,
                ShardResult* result) {
  const bool tsv = o.format != "tfrecord";
  const bool tfrecord = o.format != "tsv";
  const bool gzip = o.compress == "gzip";
  const std::string base = absl::StrCat(o.out, "/", ShardName(split, index, count));
  std::unique_ptr<OutputFile> tsv_file, tfrecord_file;
  if (tsv) {
    tsv_file = std::make_unique<OutputFile>(base + (gzip ? ".tsv.gz" : ".tsv"), gzip,
                                            o.gzip_level);
  }
  if (tfrecord) tfrecord_file = std::make_unique<OutputFile>(base + ".tfrecord", false, 0);
  CriteoSampler sampler(&model, stream, index);
  CriteoRow row;
  double p = 0;
  std::string serialized;
  for (int64_t i = 0; i < rows; ++i) {
    sampler.Next(&row, &p);
    result->positives += row.label;
    if (keep_probabilities) {
      result->probabilities.push_back(p);
      result->labels.push_back(row.label);
    }
    if (tsv_file) tsv_file->Append(CriteoTsvLine(row));
    if (tfrecord_file) {
      // Deterministic: the same flags give the same bytes (a map's order
      // is otherwise unspecified).
      serialized.clear();
      {
        google::protobuf::io::StringOutputStream stream(&serialized);
        google::protobuf::io::CodedOutputStream coded(&stream);
        coded.SetSerializationDeterministic(true);
        CriteoExample(row).SerializeToCodedStream(&coded);
      }
      tfrecord_file->Append(FrameTfRecord(serialized));
    }
  }
  result->rows = rows;
  for (auto* f : {&tsv_file, &tfrecord_file}) {
    if (!*f) continue;
    int64_t bytes = 0;
    absl::Status s = (*f)->Close(&bytes);
    if (!s.ok()) {
      result->status = s;
      return;
    }
    result->bytes.push_back(bytes);
  }
  if (tsv) result->files.push_back(base + (gzip ? ".tsv.gz" : ".tsv"));
  if (tfrecord) result->files.push_back(base + ".tfrecord");
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

int Run(const GenOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) {
    std::fprintf(stderr, "criteo_gen: cannot create %s: %s\n", o.out.c_str(),
                 ec.message().c_str());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  const CriteoModel model(o.synth);
  struct Task {
    std::string split;
    uint64_t stream;
    int index, count;
    int64_t rows;
  };
  std::vector<Task> tasks;
  for (int i = 0; i < o.shards; ++i) {
    tasks.push_back({"train", 0, i, o.shards, o.rows / o.shards + (i < o.rows % o.shards)});
  }
  for (int i = 0; i < o.holdout_shards; ++i) {
    tasks.push_back({"holdout", 1, i, o.holdout_shards,
                     o.holdout_rows / o.holdout_shards + (i < o.holdout_rows % o.holdout_shards)});
  }
  std::vector<ShardResult> results(tasks.size());
  std::atomic<size_t> next{0};
  const int threads = o.threads > 0 ? o.threads
                                    : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < tasks.size(); i = next.fetch_add(1)) {
        const Task& task = tasks[i];
        WriteShard(o, model, task.split, task.stream, task.index, task.count, task.rows,
                   task.split == "holdout", &results[i]);
      }
    });
  }
  for (std::thread& t : pool) t.join();

  int64_t train_rows = 0, train_positives = 0, total_bytes = 0;
  std::vector<double> p;
  std::vector<int> labels;
  std::vector<std::string> file_entries;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ShardResult& r = results[i];
    if (!r.status.ok()) {
      std::fprintf(stderr, "criteo_gen: %s\n", std::string(r.status.message()).c_str());
      return 1;
    }
    if (tasks[i].split == "train") {
      train_rows += r.rows;
      train_positives += r.positives;
    }
    p.insert(p.end(), r.probabilities.begin(), r.probabilities.end());
    labels.insert(labels.end(), r.labels.begin(), r.labels.end());
    for (size_t f = 0; f < r.files.size(); ++f) {
      total_bytes += r.bytes[f];
      file_entries.push_back(absl::StrCat(
          "{\"path\": ", JsonString(std::filesystem::path(r.files[f]).filename().string()),
          ", \"split\": \"", tasks[i].split, "\", \"rows\": ", r.rows, ", \"bytes\": ",
          r.bytes[f], "}"));
    }
  }
  double logloss = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp(p[i], 1e-15, 1 - 1e-15);
    logloss -= labels[i] ? std::log(q) : std::log(1 - q);
  }
  const auto number = [](double v) {
    return std::isfinite(v) ? absl::StrFormat("%.6f", v) : std::string("null");
  };
  const double bayes_auc = Auc(p, labels);
  const double expected_auc = ExpectedBayesAuc(p);
  const std::string meta = absl::StrCat(
      "{\n  \"generator\": \"pscluster criteo_gen (datagen/criteo_synth.h)\",\n",
      "  \"layout\": \"label, I1..I13 (int), C1..C26 (8 hex digits); empty = missing\",\n",
      "  \"seed\": ", o.synth.seed, ",\n  \"ctr\": ", number(o.synth.ctr),
      ",\n  \"vocab_scale\": ", number(o.synth.vocab_scale), ",\n  \"signal\": ",
      number(o.synth.signal), ",\n  \"bias\": ", number(model.bias()),
      ",\n  \"train_rows\": ", train_rows, ",\n  \"train_click_rate\": ",
      number(train_rows > 0 ? static_cast<double>(train_positives) / train_rows : NAN),
      ",\n  \"holdout_rows\": ", p.size(), ",\n  \"bayes_auc\": ", number(bayes_auc),
      ",\n  \"expected_bayes_auc\": ", number(expected_auc), ",\n  \"bayes_logloss\": ",
      number(p.empty() ? NAN : logloss / p.size()), ",\n  \"bytes\": ", total_bytes,
      ",\n  \"files\": [\n    ", absl::StrJoin(file_entries, ",\n    "), "\n  ]\n}\n");
  OutputFile meta_file(o.out + "/meta.json", false, 0);
  meta_file.Append(meta);
  int64_t meta_bytes = 0;
  if (absl::Status s = meta_file.Close(&meta_bytes); !s.ok()) {
    std::fprintf(stderr, "criteo_gen: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "criteo_gen: %lld train + %zu holdout rows, %zu files, %.1f MB in %.1f s (%.1f MB/s); "
      "holdout Bayes AUC %s (expected %s)\n",
      static_cast<long long>(train_rows), p.size(), file_entries.size(), total_bytes / 1e6,
      seconds, total_bytes / 1e6 / std::max(seconds, 1e-9), number(bayes_auc).c_str(),
      number(expected_auc).c_str());
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  pscluster::GenOptions o;
  CLI::App app{"Writes a Criteo-layout click log with a known Bayes-optimal AUC."};
  app.add_option("--out", o.out, "output directory")->required();
  app.add_option("--rows", o.rows, "train rows")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--shards", o.shards, "train files")->check(CLI::Range(1, 100000));
  app.add_option("--holdout_rows", o.holdout_rows, "held-out rows (kept in memory for the AUC)")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  app.add_option("--holdout_shards", o.holdout_shards, "held-out files")
      ->check(CLI::Range(1, 100000));
  app.add_option("--format", o.format, "tsv, tfrecord or both")
      ->check(CLI::IsMember({"tsv", "tfrecord", "both"}));
  app.add_option("--compress", o.compress, "TSV compression: gzip or none")
      ->check(CLI::IsMember({"gzip", "none"}));
  app.add_option("--gzip_level", o.gzip_level, "zlib level")->check(CLI::Range(1, 9));
  app.add_option("--seed", o.synth.seed, "the model's and the data's seed");
  app.add_option("--ctr", o.synth.ctr, "mean click probability")->check(CLI::Range(0.001, 0.999));
  app.add_option("--vocab_scale", o.synth.vocab_scale, "multiplies each column's vocabulary")
      ->check(CLI::Range(1e-6, 1e3));
  app.add_option("--signal", o.synth.signal, "multiplies every weight of the model")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--threads", o.threads, "writer threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return pscluster::Run(o);
}
