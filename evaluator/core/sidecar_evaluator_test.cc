// SidecarEvaluator on a real checkpoint directory, listed by the
// coordinator's own CheckpointManager::List, with an injected clock and wait
// (no sleeps) and a recording evaluation callback (the real restore + eval is
// evaluator/checkpoint_eval_test.cc's).
#include "evaluator/core/sidecar_evaluator.h"

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_file.h"
#include "common/tfrecord.h"
#include "coordinator/core/checkpoint_manager.h"
#include "evaluator/core/best_checkpoint.h"
#include "evaluator/core/evaluator_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protos/tensorboard_event.pb.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Writes a data file of `bytes` bytes into ckpt-<id>/ and, if `commit`, the
// MANIFEST naming it, as CheckpointManager::Save lays a checkpoint out.
void WriteCheckpoint(const std::string& dir, int64_t id, int64_t step, bool commit = true,
                     int64_t bytes = 100) {
  const std::string ckpt = absl::StrCat(dir, "/ckpt-", id);
  fs::create_directories(ckpt);
  {
    std::ofstream data(ckpt + "/ps-0.data", std::ios::binary);
    data << std::string(static_cast<size_t>(bytes), 'x');
  }
  if (!commit) return;
  CheckpointManifest m;
  m.set_format_version(1);
  m.set_job_id("job-1");
  m.set_checkpoint_id(id);
  m.set_global_step(step);
  m.set_num_ps(1);
  CheckpointFile* f = m.add_files();
  f->set_name("ps-0.data");
  f->set_bytes(100);
  ASSERT_TRUE(WriteFileAtomically(ckpt + "/MANIFEST", m.SerializeAsString()).ok());
}

// A fake clock advanced only by the evaluator's waits.
struct Harness {
  explicit Harness(const std::string& name) : dir(FreshDir(name)) {}

  SidecarEvaluator::Options Options() {
    SidecarEvaluator::Options o;
    o.checkpoint_dir = dir;
    o.list = [this] { return CheckpointManager(dir, 1, "").List(); };
    o.evaluate = [this](const CheckpointManifest& m) -> absl::StatusOr<EvalMetrics> {
      evaluated.push_back(m.checkpoint_id());
      if (on_evaluate) {
        absl::Status s = on_evaluate(m);
        if (!s.ok()) return s;
      }
      EvalMetrics metrics;
      metrics.examples = 1000;
      auto it = accuracy.find(m.checkpoint_id());
      metrics.accuracy = it != accuracy.end() ? it->second : 0.5;
      metrics.loss = 1 - metrics.accuracy;
      return metrics;
    };
    o.now = [this] { return now; };
    o.sleep = [this](absl::Duration d) {
      now += d;
      ++sleeps;
      if (on_sleep) on_sleep(sleeps);
    };
    o.poll_interval = absl::Seconds(2);
    return o;
  }

  std::unique_ptr<SidecarEvaluator> Make(SidecarEvaluator::Options o) {
    auto e = SidecarEvaluator::Create(std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }

  std::string dir;
  absl::Time now = absl::FromUnixSeconds(1700000000);
  int sleeps = 0;
  std::vector<int64_t> evaluated;
  std::map<int64_t, double> accuracy;
  std::function<absl::Status(const CheckpointManifest&)> on_evaluate;
  std::function<void(int)> on_sleep;
};

TEST(SidecarEvaluatorTest, NeverEvaluatesATornCheckpoint) {
  Harness h("torn");
  WriteCheckpoint(h.dir, 0, 10);
  // ckpt-1: its PS file written, the MANIFEST not yet (a save in progress),
  // and a MANIFEST's temporary file as the commit leaves it mid-write.
  WriteCheckpoint(h.dir, 1, 20, /*commit=*/false);
  {
    std::ofstream tmp(h.dir + "/ckpt-1/MANIFEST.tmp.123", std::ios::binary);
    tmp << "partial";
  }
  // ckpt-2: a MANIFEST that does not parse (torn bytes).
  WriteCheckpoint(h.dir, 2, 30, /*commit=*/false);
  {
    std::ofstream bad(h.dir + "/ckpt-2/MANIFEST", std::ios::binary);
    bad << "\xff\xff\xff garbage";
  }
  auto e = h.Make(h.Options());
  auto r = e->PollOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, SidecarEvaluator::Outcome::kEvaluated);
  EXPECT_EQ(r->checkpoint_id, 0);
  r = e->PollOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, SidecarEvaluator::Outcome::kIdle);
  EXPECT_THAT(h.evaluated, ElementsAre(0));
  // The save commits: now it is seen.
  WriteCheckpoint(h.dir, 1, 20);
  r = e->PollOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checkpoint_id, 1);
  EXPECT_THAT(h.evaluated, ElementsAre(0, 1));
}

TEST(SidecarEvaluatorTest, ACheckpointWhoseFileIsShortIsPassedOverNotEvaluated) {
  Harness h("short");
  WriteCheckpoint(h.dir, 0, 10);
  fs::resize_file(h.dir + "/ckpt-0/ps-0.data", 40);  // not what the manifest says
  auto e = h.Make(h.Options());
  auto r = e->PollOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, SidecarEvaluator::Outcome::kDamaged);
  EXPECT_THAT(r->problem, HasSubstr("holds 40 bytes, the manifest says 100"));
  EXPECT_TRUE(h.evaluated.empty());
  EXPECT_EQ(e->state().last_evaluated, 0);  // not tried again
  EXPECT_EQ(e->state().evaluations, 0);
  EXPECT_EQ(e->PollOnce()->outcome, SidecarEvaluator::Outcome::kIdle);
}

TEST(SidecarEvaluatorTest, TakesTheNewestAndResumesAfterARestart) {
  Harness h("resume");
  WriteCheckpoint(h.dir, 0, 10);
  WriteCheckpoint(h.dir, 1, 20);
  WriteCheckpoint(h.dir, 2, 30);
  {
    auto e = h.Make(h.Options());
    auto r = e->PollOnce();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->checkpoint_id, 2);  // as TF: straight to the newest
    EXPECT_EQ(r->passed_over, 2);
    EXPECT_EQ(e->state().last_evaluated, 2);
  }  // "killed"
  auto state = LoadEvaluatorState(EvaluatorStatePath(h.dir));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->last_evaluated, 2);
  EXPECT_EQ(state->evaluations, 1);
  // Two more while it was down.
  WriteCheckpoint(h.dir, 3, 40);
  WriteCheckpoint(h.dir, 4, 50);
  auto e = h.Make(h.Options());
  EXPECT_EQ(e->state().last_evaluated, 2);
  auto r = e->PollOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checkpoint_id, 4);
  EXPECT_EQ(r->passed_over, 1);
  EXPECT_EQ(e->PollOnce()->outcome, SidecarEvaluator::Outcome::kIdle);
  EXPECT_THAT(h.evaluated, ElementsAre(2, 4));  // none twice
  EXPECT_EQ(e->state().evaluations, 2);
}

TEST(SidecarEvaluatorTest, KeepsTheBestCheckpointAtomically) {
  Harness h("best");
  h.accuracy = {{0, 0.6}, {1, 0.8}, {2, 0.7}};
  SidecarEvaluator::Options o = h.Options();
  o.eval.keep_best = true;
  o.eval.metric = EvalSpec::Metric::kAccuracy;
  o.eval.maximize = true;
  auto e = h.Make(o);
  {
    std::ofstream log(h.dir + "/joblog", std::ios::binary);
    log << "the job log";
  }
  for (int64_t id = 0; id < 3; ++id) {
    WriteCheckpoint(h.dir, id, 10 * (id + 1));
    auto r = e->PollOnce();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->new_best, id != 2) << id;
    auto record = ReadBestRecord(h.dir);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_EQ(record->checkpoint_id, id == 0 ? 0 : 1);
  }
  auto record = ReadBestRecord(h.dir);
  EXPECT_EQ(record->metric, "accuracy");
  EXPECT_TRUE(record->maximize);
  EXPECT_DOUBLE_EQ(record->value, 0.8);
  EXPECT_EQ(record->step, 20);
  EXPECT_EQ(e->state().best_checkpoint, 1);
  EXPECT_DOUBLE_EQ(e->state().best_value, 0.8);
  // best/ is a checkpoint directory of its own: the coordinator's listing
  // reads it, its data file is a hard link of the job's.
  std::vector<CheckpointManifest> best = CheckpointManager(BestDir(h.dir), 1, "").List();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].checkpoint_id(), 1);
  EXPECT_FALSE(fs::exists(BestDir(h.dir) + "/ckpt-0"));
  EXPECT_TRUE(fs::exists(BestDir(h.dir) + "/joblog"));
  EXPECT_EQ(fs::hard_link_count(BestDir(h.dir) + "/ckpt-1/ps-0.data"), 2u);
  EXPECT_FALSE(fs::exists(h.dir + "/.best.tmp"));
  // The job prunes ckpt-1: the best copy survives.
  fs::remove_all(h.dir + "/ckpt-1");
  EXPECT_EQ(fs::file_size(BestDir(h.dir) + "/ckpt-1/ps-0.data"), 100u);
  // A restarted evaluator keeps the best it had.
  auto again = h.Make(o);
  EXPECT_EQ(again->state().best_checkpoint, 1);
  // The coordinator's listing of the job's directory ignores best/.
  std::vector<CheckpointManifest> job = CheckpointManager(h.dir, 1, "").List();
  ASSERT_EQ(job.size(), 2u);
}

TEST(SidecarEvaluatorTest, ACheckpointPrunedMidEvalIsSkippedAndTheNextTaken) {
  Harness h("vanish");
  WriteCheckpoint(h.dir, 0, 10);
  WriteCheckpoint(h.dir, 1, 20);
  auto e = h.Make(h.Options());
  // While ckpt-1 is evaluated the job commits ckpt-2 and prunes ckpt-1 (keep 1).
  h.on_evaluate = [&](const CheckpointManifest& m) -> absl::Status {
    if (m.checkpoint_id() != 1) return absl::OkStatus();
    WriteCheckpoint(h.dir, 2, 30);
    fs::remove_all(h.dir + "/ckpt-1");
    return absl::NotFoundError("restoring checkpoint 1 on PS 0: no file ckpt-1/ps-0.data");
  };
  auto r = e->PollOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, SidecarEvaluator::Outcome::kVanished);
  EXPECT_EQ(r->checkpoint_id, 1);
  EXPECT_EQ(e->state().last_evaluated, -1);  // not recorded
  r = e->PollOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, SidecarEvaluator::Outcome::kEvaluated);
  EXPECT_EQ(r->checkpoint_id, 2);
  EXPECT_EQ(e->state().last_evaluated, 2);
}

TEST(SidecarEvaluatorTest, ATransientErrorIsRetriedAtTheNextPoll) {
  Harness h("transient");
  WriteCheckpoint(h.dir, 0, 10);
  int failures = 1;
  h.on_evaluate = [&](const CheckpointManifest&) -> absl::Status {
    if (failures-- > 0) return absl::UnavailableError("disk went away");
    return absl::OkStatus();
  };
  auto e = h.Make(h.Options());
  EXPECT_TRUE(absl::IsUnavailable(e->PollOnce().status()));
  EXPECT_EQ(e->state().last_evaluated, -1);
  EXPECT_EQ(e->PollOnce()->outcome, SidecarEvaluator::Outcome::kEvaluated);
}

TEST(SidecarEvaluatorTest, AStateThatCannotBeWrittenLeavesTheCheckpointUnevaluated) {
  Harness h("state_write");
  WriteCheckpoint(h.dir, 0, 10);
  auto e = h.Make(h.Options());
  // evaluator/ becomes a file: the state cannot be written.
  { std::ofstream blocker(h.dir + "/evaluator"); }
  auto r = e->PollOnce();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(e->state().last_evaluated, -1);  // in memory as on disk
  fs::remove(h.dir + "/evaluator");
  r = e->PollOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checkpoint_id, 0);  // evaluated again
  EXPECT_THAT(h.evaluated, ElementsAre(0, 0));
  EXPECT_EQ(LoadEvaluatorState(EvaluatorStatePath(h.dir))->last_evaluated, 0);
}

TEST(SidecarEvaluatorTest, ABestCopyThatFailsIsSaidAndTheEvaluationStillRecorded) {
  Harness h("best_fails");
  h.accuracy = {{0, 0.5}, {1, 0.9}};
  SidecarEvaluator::Options o = h.Options();
  o.eval.keep_best = true;
  o.eval.metric = EvalSpec::Metric::kAccuracy;
  o.eval.maximize = true;
  auto e = h.Make(o);
  WriteCheckpoint(h.dir, 0, 10);
  ASSERT_TRUE(e->PollOnce().ok());
  // ckpt-1's data file goes after its evaluation, its MANIFEST stays.
  h.on_evaluate = [&](const CheckpointManifest& m) {
    fs::remove(absl::StrCat(h.dir, "/ckpt-", m.checkpoint_id(), "/ps-0.data"));
    return absl::OkStatus();
  };
  WriteCheckpoint(h.dir, 1, 20);
  auto r = e->PollOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, SidecarEvaluator::Outcome::kEvaluated);
  EXPECT_FALSE(r->new_best);
  EXPECT_THAT(r->problem, HasSubstr("best/ not updated"));
  EXPECT_EQ(e->state().last_evaluated, 1);
  EXPECT_EQ(e->state().best_checkpoint, 0);
  EXPECT_EQ(ReadBestRecord(h.dir)->checkpoint_id, 0);
  EXPECT_FALSE(fs::exists(h.dir + "/.best.tmp"));
}

TEST(SidecarEvaluatorTest, RunPollsOnTheInjectedClockUntilDoneAndEvaluatesTheLast) {
  Harness h("run");
  WriteCheckpoint(h.dir, 0, 10);
  bool ended = false;
  // Checkpoints appear during the evaluator's waits; the job ends right
  // after committing its final one (during the 3rd wait).
  h.on_sleep = [&](int n) {
    if (n == 1) WriteCheckpoint(h.dir, 1, 20);
    if (n == 3) {
      WriteCheckpoint(h.dir, 2, 30);
      ended = true;
    }
  };
  auto registry = std::make_shared<prometheus::Registry>();
  SidecarEvaluator::Options o = h.Options();
  o.registry = registry;
  const absl::Time start = h.now;
  auto e = h.Make(o);
  ASSERT_TRUE(e->Run([&] { return ended; }).ok());
  EXPECT_THAT(h.evaluated, ElementsAre(0, 1, 2));
  EXPECT_EQ(h.sleeps, 3);
  EXPECT_EQ(h.now - start, absl::Seconds(6));  // 3 polls that found nothing, 2 s each
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_THAT(text, HasSubstr("pscluster_evaluator_evaluations_total 3"));
  EXPECT_THAT(text, HasSubstr("pscluster_evaluator_checkpoint{field=\"id\"} 2"));
  EXPECT_THAT(text, HasSubstr("pscluster_evaluator_eval{metric=\"accuracy\"} 0.5"));
}

TEST(SidecarEvaluatorTest, WritesEvalSummariesAtTheCheckpointsStep) {
  Harness h("summaries");
  h.accuracy = {{0, 0.25}, {1, 0.75}};
  SidecarEvaluator::Options o = h.Options();
  o.summary_dir = h.dir + "/tb/eval";
  auto e = h.Make(o);
  WriteCheckpoint(h.dir, 0, 10);
  ASSERT_TRUE(e->PollOnce().ok());
  WriteCheckpoint(h.dir, 1, 20);
  ASSERT_TRUE(e->PollOnce().ok());
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(o.summary_dir)) {
    files.push_back(entry.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  TfRecordReader reader(files[0]);
  std::string record;
  std::map<int64_t, std::map<std::string, float>> points;
  while (reader.Next(&record).ok()) {
    tensorflow::Event event;
    ASSERT_TRUE(event.ParseFromString(record));
    for (const auto& v : event.summary().value()) points[event.step()][v.tag()] = v.simple_value();
  }
  ASSERT_EQ(points.size(), 2u);
  EXPECT_FLOAT_EQ(points[10]["eval/accuracy"], 0.25f);
  EXPECT_FLOAT_EQ(points[20]["eval/accuracy"], 0.75f);
  EXPECT_FLOAT_EQ(points[20]["eval/loss"], 0.25f);
  EXPECT_FLOAT_EQ(points[20]["eval/checkpoint_id"], 1.0f);
}

TEST(EvaluatorStateTest, RoundTripsAndNamesAMalformedFile) {
  const std::string dir = FreshDir("state");
  const std::string path = EvaluatorStatePath(dir);
  auto fresh = LoadEvaluatorState(path);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->last_evaluated, -1);
  EvaluatorState s;
  s.last_evaluated = 7;
  s.evaluations = 3;
  s.best_checkpoint = 5;
  s.best_value = 0.1 + 0.2;
  s.best_step = 900;
  ASSERT_TRUE(SaveEvaluatorState(path, s).ok());
  auto back = LoadEvaluatorState(path);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == s);
  {
    std::ofstream bad(path);
    bad << "last_evaluated seven\n";
  }
  auto broken = LoadEvaluatorState(path);
  EXPECT_TRUE(absl::IsDataLoss(broken.status()));
  EXPECT_THAT(std::string(broken.status().message()),
              HasSubstr(path + ":1: 'seven' is not a number"));
  {
    std::ofstream bad(path);
    bad << "last_evaluated 1\nnext 2\n";
  }
  EXPECT_THAT(std::string(LoadEvaluatorState(path).status().message()),
              HasSubstr(":2: unknown key 'next'"));
}

}  // namespace
}  // namespace pscluster
