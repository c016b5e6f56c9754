#include "evaluator/core/sidecar_evaluator.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "evaluator/core/best_checkpoint.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;

void Inc(prometheus::Counter* c, double by = 1) {
  if (c != nullptr) c->Increment(by);
}
void Set(prometheus::Gauge* g, double v) {
  if (g != nullptr) g->Set(v);
}

double MetricValue(const EvalMetrics& m, EvalSpec::Metric metric) {
  switch (metric) {
    case EvalSpec::Metric::kAccuracy:
      return m.accuracy;
    case EvalSpec::Metric::kAuc:
      return m.auc;
    case EvalSpec::Metric::kLoss:
      break;
  }
  return m.loss;
}

}  // namespace

const char* OutcomeName(SidecarOutcome outcome) {
  switch (outcome) {
    case SidecarEvaluator::Outcome::kIdle:
      return "idle";
    case SidecarEvaluator::Outcome::kEvaluated:
      return "evaluated";
    case SidecarEvaluator::Outcome::kVanished:
      return "vanished";
    case SidecarEvaluator::Outcome::kDamaged:
      return "damaged";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<SidecarEvaluator>> SidecarEvaluator::Create(Options options) {
  if (options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("the sidecar evaluator needs a checkpoint directory");
  }
  if (!options.list || !options.evaluate) {
    return absl::InvalidArgumentError("the sidecar evaluator needs list and evaluate callbacks");
  }
  absl::StatusOr<EvaluatorState> state =
      LoadEvaluatorState(EvaluatorStatePath(options.checkpoint_dir));
  if (!state.ok()) return state.status();
  return std::unique_ptr<SidecarEvaluator>(new SidecarEvaluator(std::move(options), *state));
}

SidecarEvaluator::SidecarEvaluator(Options options, EvaluatorState state)
    : options_(std::move(options)),
      state_path_(EvaluatorStatePath(options_.checkpoint_dir)),
      state_(state) {
  if (options_.registry == nullptr) return;
  prometheus::Registry& r = *options_.registry;
  auto& eval = prometheus::BuildGauge()
                   .Name("pscluster_evaluator_eval")
                   .Help(
                       "The sidecar evaluator's metrics of the last checkpoint it evaluated, "
                       "by metric (loss, accuracy, auc)")
                   .Register(r);
  eval_family_ = &eval;
  loss_gauge_ = &eval.Add({{"metric", "loss"}});
  accuracy_gauge_ = &eval.Add({{"metric", "accuracy"}});
  auto& checkpoint = prometheus::BuildGauge()
                         .Name("pscluster_evaluator_checkpoint")
                         .Help("The last checkpoint evaluated: its id and global step")
                         .Register(r);
  checkpoint_gauge_ = &checkpoint.Add({{"field", "id"}});
  step_gauge_ = &checkpoint.Add({{"field", "step"}});
  Set(checkpoint_gauge_, static_cast<double>(state_.last_evaluated));
  seconds_gauge_ = &prometheus::BuildGauge()
                        .Name("pscluster_evaluator_eval_seconds")
                        .Help("How long the last checkpoint's evaluation took (restore and eval)")
                        .Register(r)
                        .Add({});
  auto& best = prometheus::BuildGauge()
                   .Name("pscluster_evaluator_best")
                   .Help("The best checkpoint so far by eval.keep_best: its metric value and id")
                   .Register(r);
  best_gauge_ = &best.Add({{"field", "value"}});
  best_checkpoint_gauge_ = &best.Add({{"field", "id"}});
  if (state_.best_checkpoint >= 0) {
    Set(best_gauge_, state_.best_value);
    Set(best_checkpoint_gauge_, static_cast<double>(state_.best_checkpoint));
  }
  evaluations_ = &prometheus::BuildCounter()
                      .Name("pscluster_evaluator_evaluations_total")
                      .Help("Checkpoints evaluated by this evaluator process")
                      .Register(r)
                      .Add({});
  auto& skipped = prometheus::BuildCounter()
                      .Name("pscluster_evaluator_skipped_total")
                      .Help(
                          "Checkpoints not evaluated, by reason: superseded (a newer one "
                          "came first), vanished (pruned by the job), damaged")
                      .Register(r);
  superseded_ = &skipped.Add({{"reason", "superseded"}});
  vanished_ = &skipped.Add({{"reason", "vanished"}});
  damaged_ = &skipped.Add({{"reason", "damaged"}});
  // AUC only for binary models: its gauge is added with the first one.
}

SidecarEvaluator::~SidecarEvaluator() = default;

bool SidecarEvaluator::ManifestExists(int64_t id) const {
  std::error_code ec;
  return fs::exists(absl::StrCat(options_.checkpoint_dir, "/ckpt-", id, "/MANIFEST"), ec);
}

absl::Status SidecarEvaluator::CheckFiles(const CheckpointManifest& m) const {
  const std::string dir = absl::StrCat(options_.checkpoint_dir, "/ckpt-", m.checkpoint_id());
  if (m.files_size() == 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", m.checkpoint_id(), " names no file"));
  }
  for (const CheckpointFile& f : m.files()) {
    const std::string path = dir + "/" + fs::path(f.name()).filename().string();
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (!ManifestExists(m.checkpoint_id())) {
        return absl::NotFoundError(absl::StrCat("checkpoint ", m.checkpoint_id(), " vanished"));
      }
      return absl::DataLossError(
          absl::StrCat("checkpoint ", m.checkpoint_id(), ": ", path, " is missing"));
    }
    if (static_cast<int64_t>(st.st_size) != static_cast<int64_t>(f.bytes())) {
      return absl::DataLossError(absl::StrCat("checkpoint ", m.checkpoint_id(), ": ", path,
                                              " holds ", st.st_size, " bytes, the manifest says ",
                                              f.bytes()));
    }
  }
  return absl::OkStatus();
}

void SidecarEvaluator::WriteSummaries(const CheckpointManifest& m, const EvalMetrics& metrics) {
  if (options_.summary_dir.empty() || summaries_failed_) return;
  if (events_ == nullptr) {
    EventFileWriter::Options o;
    o.logdir = options_.summary_dir;
    o.now = options_.now();
    absl::StatusOr<std::unique_ptr<EventFileWriter>> w = EventFileWriter::Create(o);
    if (!w.ok()) {
      spdlog::error("no eval summaries from now on: {}", w.status().ToString());
      summaries_failed_ = true;
      return;
    }
    events_ = *std::move(w);
    spdlog::info("eval summaries in {}", events_->path());
  }
  std::vector<std::pair<std::string, double>> scalars = {
      {"eval/loss", metrics.loss},
      {"eval/accuracy", metrics.accuracy},
      {"eval/examples", static_cast<double>(metrics.examples)},
      {"eval/checkpoint_id", static_cast<double>(m.checkpoint_id())},
  };
  if (metrics.has_auc) scalars.push_back({"eval/auc", metrics.auc});
  if (absl::Status s = events_->WriteScalars(m.global_step(), options_.now(), scalars); !s.ok()) {
    spdlog::error("no eval summaries from now on: {}", s.ToString());
    summaries_failed_ = true;
  }
}

absl::StatusOr<bool> SidecarEvaluator::UpdateBest(const CheckpointManifest& m,
                                                  const EvalMetrics& metrics,
                                                  EvaluatorState* next) {
  const EvalSpec& e = options_.eval;
  if (!e.keep_best) return false;
  if (e.metric == EvalSpec::Metric::kAuc && !metrics.has_auc) {
    spdlog::warn("keep_best by auc, but checkpoint {} has no AUC (not a binary model)",
                 m.checkpoint_id());
    return false;
  }
  const double value = MetricValue(metrics, e.metric);
  if (next->best_checkpoint >= 0 && !IsBetter(value, next->best_value, e.maximize)) return false;
  BestRecord record;
  record.checkpoint_id = m.checkpoint_id();
  record.step = m.global_step();
  record.metric = EvalMetricName(e.metric);
  record.maximize = e.maximize;
  record.value = value;
  if (absl::Status s = KeepBestCheckpoint(options_.checkpoint_dir, m, record); !s.ok()) return s;
  next->best_checkpoint = m.checkpoint_id();
  next->best_value = value;
  next->best_step = m.global_step();
  return true;
}

absl::StatusOr<SidecarEvaluator::PollResult> SidecarEvaluator::PollOnce() {
  PollResult result;
  std::vector<CheckpointManifest> committed = options_.list();
  // Newest first: the first past last_evaluated is the one to take.
  const CheckpointManifest* newest = nullptr;
  for (const CheckpointManifest& m : committed) {
    if (m.checkpoint_id() <= state_.last_evaluated) break;
    if (newest == nullptr) {
      newest = &m;
    } else {
      ++result.passed_over;
    }
  }
  if (newest == nullptr) return result;
  const CheckpointManifest m = *newest;
  result.checkpoint_id = m.checkpoint_id();
  result.step = m.global_step();
  if (result.passed_over > 0) {
    spdlog::info("passing over {} older unevaluated checkpoint(s) for the newest, {}",
                 result.passed_over, m.checkpoint_id());
    Inc(superseded_, static_cast<double>(result.passed_over));
  }
  const absl::Time start = options_.now();
  absl::Status files = CheckFiles(m);
  absl::StatusOr<EvalMetrics> metrics =
      files.ok() ? options_.evaluate(m) : absl::StatusOr<EvalMetrics>(files);
  if (!metrics.ok()) {
    const absl::Status& s = metrics.status();
    const bool checkpoint_problem = absl::IsNotFound(s) || absl::IsDataLoss(s) ||
                                    absl::IsFailedPrecondition(s) || absl::IsInvalidArgument(s);
    if (!checkpoint_problem) return s;
    result.problem = std::string(s.message());
    if (!ManifestExists(m.checkpoint_id())) {
      // Pruned by the job before or while it was evaluated: the next poll
      // takes the newest again.
      result.outcome = Outcome::kVanished;
      spdlog::warn("checkpoint {} vanished while it was evaluated (pruned by the job): {}",
                   m.checkpoint_id(), result.problem);
      Inc(vanished_);
      return result;
    }
    result.outcome = Outcome::kDamaged;
    spdlog::error("checkpoint {} cannot be evaluated, passing over it: {}", m.checkpoint_id(),
                  s.ToString());
    Inc(damaged_);
    EvaluatorState next = state_;
    next.last_evaluated = m.checkpoint_id();
    if (absl::Status saved = SaveEvaluatorState(state_path_, next); !saved.ok()) return saved;
    state_ = next;
    return result;
  }
  result.metrics = *metrics;
  const double seconds = absl::ToDoubleSeconds(options_.now() - start);
  WriteSummaries(m, result.metrics);
  // The state is changed in a copy, committed once it is persisted: a
  // failed write leaves this checkpoint unevaluated, here as on disk.
  EvaluatorState next = state_;
  absl::StatusOr<bool> best = UpdateBest(m, result.metrics, &next);
  if (!best.ok()) {
    // Recorded as evaluated all the same (its metrics are out): best/ stays
    // as it was. Pruned before the copy, or the copy failed (e.g. disk
    // full): said, not retried.
    result.problem = absl::StrCat("best/ not updated: ", best.status().ToString());
    if (absl::IsNotFound(best.status()) && !ManifestExists(m.checkpoint_id())) {
      spdlog::warn("checkpoint {} vanished before best/ could copy it: {}", m.checkpoint_id(),
                   best.status().ToString());
    } else {
      spdlog::error("checkpoint {}: {}", m.checkpoint_id(), result.problem);
    }
  } else {
    result.new_best = *best;
  }
  // The metrics first: whoever sees the state also sees them.
  Inc(evaluations_);
  Set(loss_gauge_, result.metrics.loss);
  Set(accuracy_gauge_, result.metrics.accuracy);
  if (result.metrics.has_auc && eval_family_ != nullptr) {
    if (auc_gauge_ == nullptr) auc_gauge_ = &eval_family_->Add({{"metric", "auc"}});
    Set(auc_gauge_, result.metrics.auc);
  }
  Set(checkpoint_gauge_, static_cast<double>(m.checkpoint_id()));
  Set(step_gauge_, static_cast<double>(m.global_step()));
  Set(seconds_gauge_, seconds);
  if (result.new_best) {
    Set(best_gauge_, next.best_value);
    Set(best_checkpoint_gauge_, static_cast<double>(next.best_checkpoint));
  }
  next.last_evaluated = m.checkpoint_id();
  ++next.evaluations;
  if (absl::Status saved = SaveEvaluatorState(state_path_, next); !saved.ok()) return saved;
  state_ = next;
  result.outcome = Outcome::kEvaluated;
  return result;
}

absl::Status SidecarEvaluator::Run(const std::function<bool()>& done) {
  while (true) {
    const bool finishing = done();
    absl::StatusOr<PollResult> r = PollOnce();
    if (!r.ok()) {
      spdlog::error("evaluation failed, retrying at the next poll: {}", r.status().ToString());
    } else if (r->outcome != Outcome::kIdle) {
      if (options_.on_poll) options_.on_poll(*r);
      continue;  // something happened: look again at once
    } else if (finishing) {
      return absl::OkStatus();
    }
    if (done() && !r.ok()) return r.status();
    options_.sleep(options_.poll_interval);
  }
}

}  // namespace pscluster
