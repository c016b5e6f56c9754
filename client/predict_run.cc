#include "client/predict_run.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/child_process.h"
#include "client/exit_codes.h"
#include "client/local_cluster.h"
#include "client/local_roots.h"
#include "client/local_setup.h"
#include "client/predict_spec.h"
#include "common/termination_signals.h"
#include "protos/coordinator.grpc.pb.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

constexpr absl::Duration kStopGrace = absl::Seconds(5);
constexpr int kLogTailLines = 20;

// Errors of what the user asked for, as opposed to of the run.
bool IsBadInput(const absl::Status& s) {
  return absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsFailedPrecondition(s) ||
         absl::IsPermissionDenied(s) || absl::IsOutOfRange(s);
}

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "psctl: %s\n", message.c_str());
  return code;
}

// The CSV being written: a temporary file beside the target, renamed into
// place by Commit(), removed otherwise.
class CsvFile {
 public:
  static absl::StatusOr<std::unique_ptr<CsvFile>> Open(const std::string& path) {
    const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write -o ", path, ": ", std::strerror(errno)));
    }
    return std::unique_ptr<CsvFile>(new CsvFile(path, tmp, fd));
  }
  ~CsvFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  absl::Status Write(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Error("writing");
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
  // fsync, close, rename over the target.
  absl::Status Commit() {
    if (::fsync(fd_) != 0) return Error("syncing");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Error("closing");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) return Error("renaming into place");
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  CsvFile(std::string path, std::string tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  absl::Status Error(const char* what) const {
    return absl::DataLossError(absl::StrCat(what, " ", tmp_, ": ", std::strerror(errno)));
  }
  const std::string path_;
  const std::string tmp_;
  int fd_;
  bool committed_ = false;
};

// What the Predict stream brought.
struct StreamResult {
  absl::Status status;
  std::optional<PredictSummary> summary;
  int64_t rows_written = 0;
};

// Reads the Predict stream into `csv` (on its own thread): progress lines on
// stderr, the rows in order, the summary.
void ReadStream(grpc::ClientReader<PredictResponse>* reader, const JobSpec& spec, CsvFile* csv,
                StreamResult* out) {
  PredictResponse r;
  std::string lines;
  int64_t printed_done = 0, printed_retries = 0;
  while (reader->Read(&r)) {
    if (r.has_progress()) {
      const PredictProgressProto& p = r.progress();
      // About a hundred lines a run: the first, every 1 % of the closures,
      // each retry, and the last.
      const int64_t step = std::max<int64_t>(1, p.closures() / 100);
      const bool due = p.closures_done() == 0 || p.closures_done() == p.closures() ||
                       p.closures_done() >= printed_done + step || p.retries() != printed_retries;
      if (!due) continue;
      printed_done = p.closures_done();
      printed_retries = p.retries();
      std::fprintf(stderr, "psctl: predict: %lld/%lld closures, %lld/%lld rows, %lld retried\n",
                   static_cast<long long>(p.closures_done()), static_cast<long long>(p.closures()),
                   static_cast<long long>(p.rows_done()), static_cast<long long>(p.rows()),
                   static_cast<long long>(p.retries()));
      std::fflush(stderr);
    } else if (r.has_rows()) {
      if (!out->status.ok()) continue;
      const PredictRows& rows = r.rows();
      const TensorProto& t = rows.values();
      if (t.shape_size() != 2 || t.shape(1) < 1 || rows.first_row() != out->rows_written ||
          t.data().size() != static_cast<size_t>(t.shape(0) * t.shape(1)) * sizeof(float)) {
        out->status = absl::InternalError(
            absl::StrCat("the coordinator sent rows from ", rows.first_row(), " where row ",
                         out->rows_written, " was due, or a malformed block"));
        continue;
      }
      const int64_t outputs = t.shape(1);
      lines.clear();
      if (out->rows_written == 0) lines = PredictCsvHeader(spec, outputs);
      std::vector<float> v(static_cast<size_t>(t.shape(0) * outputs));
      std::memcpy(v.data(), t.data().data(), t.data().size());
      for (int64_t i = 0; i < t.shape(0); ++i) {
        AppendPredictCsvRow(spec, rows.first_row() + i, v.data() + i * outputs, outputs, &lines);
      }
      out->rows_written += t.shape(0);
      if (absl::Status s = csv->Write(lines); !s.ok()) out->status = s;
    } else if (r.has_summary()) {
      out->summary = r.summary();
    }
  }
  absl::Status s = FromGrpcStatus(reader->Finish());
  if (out->status.ok()) out->status = s;
}

}  // namespace

int RunPredict(const PredictRunOptions& options) {
  const sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const absl::Time start = absl::Now();

  absl::StatusOr<PredictSource> source = LoadPredictSource(options.source);
  if (!source.ok()) return Fail(std::string(source.status().message()), kExitUsage);
  absl::StatusOr<JobSpec> spec = PredictSpec(*source, options.data_path);
  if (!spec.ok()) return Fail(std::string(spec.status().message()), kExitUsage);
  for (const std::string& file : DataFiles(*spec)) {
    if (access(file.c_str(), F_OK) != 0) return Fail("data file not found: " + file, kExitUsage);
    if (access(file.c_str(), R_OK) != 0) {
      return Fail("data file not readable: " + file, kExitUsage);
    }
  }
  if (options.closure_rows < 1) return Fail("--closure_rows must be >= 1", kExitUsage);
  absl::StatusOr<std::unique_ptr<CsvFile>> csv = CsvFile::Open(options.output_path);
  if (!csv.ok()) return Fail(std::string(csv.status().message()), kExitUsage);

  const LocalRunOptions& o = options.cluster;
  absl::StatusOr<LocalClusterOptions> prepared =
      LocalClusterOptionsFor(o, o.num_ps, /*replicas_per_worker=*/1);
  if (!prepared.ok()) return Fail(std::string(prepared.status().message()), kExitUsage);
  LocalClusterOptions cluster_options = *std::move(prepared);
  // The run directory: given, or a fresh one removed after a success.
  absl::StatusOr<std::unique_ptr<RunDir>> run_dir_or = RunDir::Create(o.run_dir, o.keep_run_dir);
  if (!run_dir_or.ok()) {
    return Fail(std::string(run_dir_or.status().message()),
                absl::IsInvalidArgument(run_dir_or.status()) ? kExitUsage : kExitJobFailed);
  }
  std::unique_ptr<RunDir> run_dir_holder = *std::move(run_dir_or);
  const std::string run_dir = run_dir_holder->path();
  cluster_options.run_dir = run_dir;
  if (!o.log_level.empty()) {
    cluster_options.coordinator_flags.push_back("--log_level=" + o.log_level);
    cluster_options.worker_flags.push_back("--log_level=" + o.log_level);
  }
  absl::StatusOr<LocalRoots> roots = LocalRootsFor(*spec, run_dir);
  if (!roots.ok()) return Fail(std::string(roots.status().message()), kExitUsage);
  const std::string checkpoint_root = "--checkpoint_root=" + roots->checkpoint_root;
  cluster_options.ps_flags.push_back(checkpoint_root);
  cluster_options.coordinator_flags.push_back(checkpoint_root);
  if (!roots->data_roots.empty()) {
    const std::string data_root = "--data_root=" + absl::StrJoin(roots->data_roots, ",");
    cluster_options.coordinator_flags.push_back(data_root);
    cluster_options.worker_flags.push_back(data_root);
  }
  int signal_received = 0;
  cluster_options.interrupted = [&signal_received] {
    if (signal_received == 0) signal_received = TakePendingTerminationSignal();
    return signal_received != 0;
  };
  // A failed run keeps its logs; the directory goes (if temporary) once the
  // cluster has stopped (run_dir_holder outlives it).
  auto finish = [&](int code) {
    if (code != kExitOk && code != kExitUsage) {
      run_dir_holder->Keep();
      std::fprintf(stderr, "psctl: logs are kept in %s\n", run_dir.c_str());
    }
    return code;
  };

  absl::StatusOr<std::unique_ptr<LocalCluster>> started = LocalCluster::Start(cluster_options);
  if (!started.ok()) {
    if (signal_received != 0) return finish(Fail("interrupted", kExitInterrupted));
    return finish(Fail(absl::StrCat("local cluster did not start: ", started.status().message()),
                       kExitJobFailed));
  }
  std::unique_ptr<LocalCluster> cluster = std::move(*started);
  const ClusterPids pids = cluster->pids();
  std::fprintf(stderr,
               "psctl: cluster up: %d ps, %d workers (worker pids %s), "
               "coordinator %s; logs in %s\n",
               o.num_ps, o.num_workers, absl::StrJoin(pids.worker, ",").c_str(),
               cluster->coordinator_address().c_str(), run_dir.c_str());
  std::fflush(stderr);

  std::unique_ptr<Coordinator::Stub> stub =
      Coordinator::NewStub(MakeChannel(cluster->coordinator_address()));
  PredictRequest request;
  request.set_spec_yaml(spec->yaml);
  request.set_spec_path(options.source);
  request.set_checkpoint_dir(source->checkpoint_dir);
  request.set_closure_rows(options.closure_rows);
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<PredictResponse>> reader = stub->Predict(&ctx, request);
  StreamResult streamed;
  absl::Notification done;
  std::thread read_thread([&] {
    ReadStream(reader.get(), *spec, csv->get(), &streamed);
    done.Notify();
  });

  // Supervise: signals, children that die, the time limit.
  std::string psctl_error;
  int exit_code = kExitOk;
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    if (cluster_options.interrupted()) {
      psctl_error = absl::StrCat("interrupted by signal ", signal_received);
      exit_code = kExitInterrupted;
      ctx.TryCancel();
      break;
    }
    if (o.timeout_s > 0 && absl::Now() - start > absl::Seconds(o.timeout_s)) {
      psctl_error = absl::StrCat("timed out after ", o.timeout_s, " s (--timeout_s)");
      exit_code = kExitJobFailed;
      ctx.TryCancel();
      break;
    }
    for (const ChildEvent& event : cluster->Poll()) {
      if (event.kind == ChildEvent::Kind::kRestarted) {
        std::fprintf(stderr, "psctl: restarted %s (pid %d %s), now pid %d\n", event.name.c_str(),
                     static_cast<int>(event.pid), event.how.c_str(),
                     static_cast<int>(event.new_pid));
        continue;
      }
      std::fprintf(stderr,
                   "psctl: %s (pid %d) %s during the prediction, %s; last "
                   "lines of %s:\n%s\n",
                   event.name.c_str(), static_cast<int>(event.pid), event.how.c_str(),
                   event.reason.c_str(), event.log_path.c_str(),
                   TailFile(event.log_path, kLogTailLines).c_str());
      if (event.name == "coordinator") ctx.TryCancel();
    }
  }
  read_thread.join();
  cluster->Stop(kStopGrace);

  if (exit_code != kExitOk) return finish(Fail(psctl_error, exit_code));
  const absl::Status& s = streamed.status;
  if (!s.ok()) {
    return finish(Fail(absl::StrCat("predict failed: ", s.message()),
                       IsBadInput(s) ? kExitUsage : kExitJobFailed));
  }
  if (!streamed.summary.has_value() || streamed.rows_written != streamed.summary->rows()) {
    return finish(Fail(absl::StrCat("predict failed: ", streamed.rows_written,
                                    " rows received, the coordinator reported ",
                                    streamed.summary ? streamed.summary->rows() : -1),
                       kExitJobFailed));
  }
  if (streamed.rows_written == 0) {
    if (absl::Status w = (*csv)->Write("row,prediction\n"); !w.ok()) {
      return finish(Fail(std::string(w.message()), kExitJobFailed));
    }
  }
  if (absl::Status c = (*csv)->Commit(); !c.ok()) {
    return finish(Fail(std::string(c.message()), kExitJobFailed));
  }
  const PredictSummary& sum = *streamed.summary;
  const double rate = sum.predict_seconds() > 0 ? sum.rows() / sum.predict_seconds() : 0;
  std::printf(
      "predicted %lld rows (%lld outputs each) with checkpoint %lld (step "
      "%lld) of %s in "
      "%.2f s (%.0f rows/s, %s); %lld closures, %lld retried, %lld duplicate "
      "answers "
      "dropped; wrote %s\n",
      static_cast<long long>(sum.rows()), static_cast<long long>(sum.outputs()),
      static_cast<long long>(sum.checkpoint_id()), static_cast<long long>(sum.global_step()),
      source->checkpoint_dir.c_str(), sum.predict_seconds(), rate, sum.backend().c_str(),
      static_cast<long long>(sum.closures()), static_cast<long long>(sum.retries()),
      static_cast<long long>(sum.duplicates()), options.output_path.c_str());
  std::fflush(stdout);
  return finish(kExitOk);
}

}  // namespace pscluster
