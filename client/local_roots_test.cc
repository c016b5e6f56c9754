#include "client/local_roots.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

class LocalRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/local-roots-XXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    base_ = fs::canonical(dir).string();
    fs::create_directories(base_ + "/data/real");
    std::ofstream(base_ + "/data/real/train.gz") << "x";
    std::ofstream(base_ + "/data/real/eval.gz") << "x";
    fs::create_symlink(base_ + "/data/real/train.gz", base_ + "/data/link.gz");
    old_cwd_ = fs::current_path();
    fs::create_directories(base_ + "/cwd");
    fs::current_path(base_ + "/cwd");
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    fs::remove_all(base_);
  }
  JobSpec Spec(const std::string& checkpoint_dir) const {
    JobSpec spec;
    spec.data.train.images = base_ + "/data/link.gz";  // a symlink: its target's directory
    spec.data.train.labels = base_ + "/data/real/train.gz";
    spec.data.eval.images = "../data/real/eval.gz";  // relative to the working directory
    spec.data.eval.labels = base_ + "/data/real/eval.gz";
    spec.checkpoint.dir = checkpoint_dir;
    return spec;
  }
  std::string base_;
  fs::path old_cwd_;
};

TEST_F(LocalRootsTest, RootsHoldTheJobsOwnFiles) {
  absl::StatusOr<LocalRoots> roots = LocalRootsFor(Spec(base_ + "/runs/ckpt"), base_ + "/run");
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_EQ(roots->checkpoint_root, base_ + "/runs");
  EXPECT_TRUE(fs::is_directory(base_ + "/runs"));
  EXPECT_THAT(roots->data_roots, ElementsAre(base_ + "/data/real"));

  roots = LocalRootsFor(Spec("./ckpt"), base_ + "/run");  // relative: the working directory
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_EQ(roots->checkpoint_root, base_ + "/cwd");

  roots = LocalRootsFor(Spec(""), base_ + "/run");  // none: the run directory's
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_EQ(roots->checkpoint_root, base_ + "/run/checkpoints");
}

TEST_F(LocalRootsTest, ARelativeDirLeavingTheWorkingDirectoryAsksForAnAbsoluteOne) {
  absl::StatusOr<LocalRoots> roots = LocalRootsFor(Spec("../ckpt"), base_ + "/run");
  ASSERT_FALSE(roots.ok());
  EXPECT_EQ(roots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(roots.status().message()), ::testing::HasSubstr("absolute path"));
}

TEST_F(LocalRootsTest, SummariesLogdirLiesUnderTheCheckpointRoot) {
  JobSpec spec = Spec(base_ + "/runs/ckpt");
  spec.summaries.logdir = base_ + "/runs/tb";
  EXPECT_TRUE(LocalRootsFor(spec, base_ + "/run").ok());
  spec.summaries.logdir = "tb";  // relative: under the root, base_/runs
  EXPECT_TRUE(LocalRootsFor(spec, base_ + "/run").ok());
  spec.summaries.logdir = base_ + "/elsewhere/tb";
  absl::StatusOr<LocalRoots> roots = LocalRootsFor(spec, base_ + "/run");
  ASSERT_FALSE(roots.ok());
  EXPECT_EQ(roots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(roots.status().message()), ::testing::HasSubstr("summaries.logdir"));
  spec = Spec("");
  spec.summaries.logdir = base_ + "/runs/tb";
  roots = LocalRootsFor(spec, base_ + "/run");
  ASSERT_FALSE(roots.ok());
  EXPECT_THAT(std::string(roots.status().message()), ::testing::HasSubstr("needs a checkpoint.dir"));
}

}  // namespace
}  // namespace pscluster
