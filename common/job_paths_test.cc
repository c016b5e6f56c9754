#include "common/job_paths.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class JobPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(env != nullptr ? env : "/tmp") + "/job-paths-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    base_ = fs::canonical(tmpl).string();
    data_ = base_ + "/data";
    ckpt_ = base_ + "/ckpt";
    fs::create_directories(data_ + "/mnist");
    fs::create_directories(ckpt_);
    fs::create_directories(base_ + "/private");
    std::ofstream(base_ + "/private/shadow") << "root:$6$SECRETHASH:19000::::::\n";
    fs::create_symlink(base_ + "/private/shadow", data_ + "/mnist/link");
    fs::create_directory_symlink(base_ + "/private", ckpt_ + "/escape");
  }
  void TearDown() override { fs::remove_all(base_); }

  JobSpec Idx(const std::string& images) const {
    JobSpec spec;
    spec.data.train.images = images;
    spec.data.train.labels = data_ + "/mnist/train-labels";
    spec.data.eval.images = data_ + "/mnist/eval-images";
    spec.data.eval.labels = data_ + "/mnist/eval-labels";
    return spec;
  }

  std::string base_, data_, ckpt_;
};

TEST_F(JobPathsTest, DataFilesMustLieUnderADataRoot) {
  struct Case {
    std::string images;
    bool ok;
  };
  const Case cases[] = {
      {data_ + "/mnist/train-images", true},
      {data_ + "/mnist/../mnist/train-images", true},
      {"/etc/shadow", false},
      {base_ + "/private/shadow", false},
      {data_ + "/../private/shadow", false},
      {data_ + "/mnist/link", false},  // a symlink under the root pointing out
      {data_, false},                  // the root itself is no file
      {data_ + "x/file", false},       // a sibling sharing the prefix
  };
  for (const Case& c : cases) {
    absl::Status s = CheckDataFiles(Idx(c.images), {base_ + "/elsewhere", data_});
    EXPECT_EQ(s.ok(), c.ok) << c.images << ": " << s;
    if (!c.ok) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(s.message()), HasSubstr("data.train.images"));
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.images));
      EXPECT_THAT(std::string(s.message()), HasSubstr("--data_root"));
      EXPECT_THAT(std::string(s.message()), Not(HasSubstr("SECRETHASH")));
    }
  }
}

// A streaming source's pattern lies under the root, but what it matches
// need not: `..` after a wildcard, or a symlink out of the root. The files
// are checked one by one before the coordinator opens any.
TEST_F(JobPathsTest, ExpandedPatternsAreCheckedFileByFile) {
  std::ofstream(data_ + "/mnist/a.tfrecord") << "x";
  std::ofstream(data_ + "/mnist/b.tfrecord") << "x";
  absl::StatusOr<std::vector<std::string>> files =
      ExpandDataFiles("data.train", {data_ + "/mnist/*.tfrecord"}, {data_});
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 2u);

  const std::string dotdot = data_ + "/*/../../private/shadow";
  absl::StatusOr<std::vector<std::string>> escaped =
      ExpandDataFiles("data.train", {dotdot}, {data_});
  ASSERT_EQ(escaped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(escaped.status().message(), HasSubstr("not under a data root"));
  EXPECT_THAT(escaped.status().message(), HasSubstr("data.train"));

  absl::StatusOr<std::vector<std::string>> linked =
      ExpandDataFiles("data.eval", {data_ + "/mnist/l*"}, {data_});
  ASSERT_EQ(linked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(linked.status().message(), HasSubstr("/mnist/link"));

  EXPECT_EQ(ExpandDataFiles("data.train", {data_ + "/none-*.tfrecord"}, {data_}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobPathsTest, CsvPathsAreCheckedToo) {
  JobSpec spec = Idx(data_ + "/mnist/train-images");
  spec.data.eval.format = "csv";
  spec.data.eval.path = "/etc/passwd";
  absl::Status s = CheckDataFiles(spec, {data_});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("data.eval.path"));
  // No roots at all: nothing is allowed.
  EXPECT_FALSE(CheckDataFiles(Idx(data_ + "/mnist/train-images"), {}).ok());
}

TEST_F(JobPathsTest, CheckpointDirs) {
  struct Case {
    std::string dir;
    std::string real;  // empty: refused
    std::string prefix;
  };
  const Case cases[] = {
      {"job-a", ckpt_ + "/job-a", "job-a"},
      {"runs/job-a", ckpt_ + "/runs/job-a", "runs/job-a"},
      {ckpt_ + "/job-b", ckpt_ + "/job-b", "job-b"},
      {".", ckpt_, ""},
      {"/tmp/elsewhere", "", ""},
      {"../data", "", ""},
      {ckpt_ + "/escape/x", "", ""},
      {"with space", "", ""},  // not a valid checkpoint name for the PS
  };
  for (const Case& c : cases) {
    absl::StatusOr<CheckpointLocation> loc = ResolveCheckpointDir(ckpt_, c.dir);
    if (c.real.empty()) {
      ASSERT_FALSE(loc.ok()) << c.dir;
      EXPECT_EQ(loc.status().code(), absl::StatusCode::kInvalidArgument) << loc.status();
      EXPECT_THAT(std::string(loc.status().message()), HasSubstr("checkpoint.dir"));
      EXPECT_THAT(std::string(loc.status().message()), HasSubstr(c.dir));
    } else {
      ASSERT_TRUE(loc.ok()) << c.dir << ": " << loc.status();
      EXPECT_EQ(loc->dir, c.real);
      EXPECT_EQ(loc->name_prefix, c.prefix);
    }
  }
  const std::string outside[] = {"/tmp/elsewhere", ckpt_ + "/escape/x"};
  for (const std::string& dir : outside) {
    EXPECT_THAT(std::string(ResolveCheckpointDir(ckpt_, dir).status().message()),
                HasSubstr("--checkpoint_root"));
  }
}

TEST_F(JobPathsTest, NoCheckpointRootRefusesCheckpoints) {
  absl::StatusOr<CheckpointLocation> loc = ResolveCheckpointDir("", "job-a");
  ASSERT_FALSE(loc.ok());
  EXPECT_EQ(loc.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(loc.status().message()), HasSubstr("--checkpoint_root"));
}

TEST_F(JobPathsTest, SummaryLogdirIsConfinedLikeCheckpoints) {
  absl::StatusOr<std::string> relative = ResolveSummaryDir(ckpt_, "runs/tb");
  ASSERT_TRUE(relative.ok()) << relative.status();
  EXPECT_EQ(*relative, ckpt_ + "/runs/tb");
  absl::StatusOr<std::string> absolute = ResolveSummaryDir(ckpt_, ckpt_ + "/tb");
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_EQ(*absolute, ckpt_ + "/tb");
  for (const std::string& logdir :
       {std::string("/tmp/elsewhere"), std::string("../private"), ckpt_ + "/escape/tb"}) {
    absl::StatusOr<std::string> out = ResolveSummaryDir(ckpt_, logdir);
    ASSERT_FALSE(out.ok()) << logdir;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("summaries.logdir"));
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(logdir));
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("--checkpoint_root"));
  }
  absl::StatusOr<std::string> no_root = ResolveSummaryDir("", "tb");
  EXPECT_EQ(no_root.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_root.status().message()), HasSubstr("summaries.logdir"));
}

}  // namespace
}  // namespace pscluster
