#include "common/confined_path.h"

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
using ::testing::HasSubstr;
using ::testing::Not;

// A fresh real directory: <tmp>/root (the root) beside <tmp>/outside.
class ConfinedPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(env != nullptr ? env : "/tmp") + "/confined-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    base_ = fs::canonical(tmpl).string();
    root_ = base_ + "/root";
    outside_ = base_ + "/outside";
    fs::create_directories(root_ + "/jobs/a");
    fs::create_directories(outside_);
    std::ofstream(outside_ + "/secret") << "x";
    fs::create_directory_symlink(outside_, root_ + "/escape");          // dir symlink out
    fs::create_symlink(outside_ + "/secret", root_ + "/jobs/leak");     // file symlink out
    fs::create_directory_symlink(root_ + "/jobs/a", root_ + "/alias");  // stays inside
    fs::create_symlink(base_ + "/nowhere", root_ + "/dangling");
    fs::create_symlink("loop", root_ + "/loop");
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string base_, root_, outside_;
};

TEST(ValidateCheckpointNameTest, Table) {
  struct Case {
    const char* name;
    bool ok;
    const char* why;
  };
  const std::string long_component(256, 'a');
  const std::string too_long = std::string(600, 'a') + "/" + std::string(600, 'b');
  const Case cases[] = {
      {"ckpt-3/ps-0.data", true, ""},
      {"jobs/job-1/ckpt-0/ps-12.data", true, ""},
      {"a.b_c-D9", true, ""},
      {"", false, "is empty"},
      {"/etc/passwd", false, "is absolute"},
      {"../x", false, "'..'"},
      {"a/../../x", false, "'..'"},
      {"a/./b", false, "'.'"},
      {".", false, "'.'"},
      {"a//b", false, "empty component"},
      {"a/", false, "empty component"},
      {"a b", false, "character"},
      {"a\\b", false, "character"},
      {"a\nb", false, "character"},
      {"caf\xc3\xa9", false, "character"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateCheckpointName(c.name);
    EXPECT_EQ(s.ok(), c.ok) << "'" << c.name << "': " << s;
    if (!c.ok) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.why)) << c.name;
    }
  }
  EXPECT_FALSE(ValidateCheckpointName(long_component).ok());
  EXPECT_FALSE(ValidateCheckpointName(too_long).ok());
}

TEST(IsUnderRootTest, ComponentWise) {
  EXPECT_TRUE(IsUnderRoot("/a/b", "/a/b"));
  EXPECT_TRUE(IsUnderRoot("/a/b/c", "/a/b"));
  EXPECT_FALSE(IsUnderRoot("/a/bc", "/a/b"));
  EXPECT_FALSE(IsUnderRoot("/a", "/a/b"));
  EXPECT_TRUE(IsUnderRoot("/anything", "/"));
}

TEST_F(ConfinedPathTest, CheckpointNames) {
  struct Case {
    std::string name;
    // Empty: refused with INVALID_ARGUMENT; else the expected path.
    std::string path;
  };
  const Case cases[] = {
      {"ckpt-0/ps-0.data", root_ + "/ckpt-0/ps-0.data"},  // missing parents: literal
      {"jobs/a/ps-0.data", root_ + "/jobs/a/ps-0.data"},
      {"alias/ps-0.data", root_ + "/jobs/a/ps-0.data"},  // a symlink that stays inside
      {"/etc/passwd", ""},
      {"../x", ""},
      {"a/../../x", ""},
      {"escape/secret", ""},    // a directory symlink inside the root pointing out
      {"escape/new/file", ""},  // ... also for files that do not exist yet
      {"jobs/leak", ""},        // a file symlink pointing out
      {"dangling", ""},         // a dangling symlink
      {"loop/x", ""},           // a symlink loop
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> path = ResolveCheckpointName(root_, "--checkpoint_root", c.name);
    if (c.path.empty()) {
      ASSERT_FALSE(path.ok()) << c.name << " -> " << *path;
      EXPECT_EQ(path.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_THAT(std::string(path.status().message()), HasSubstr(c.name));
      // Never the target of a symlink.
      EXPECT_THAT(std::string(path.status().message()), Not(HasSubstr(outside_))) << c.name;
    } else {
      ASSERT_TRUE(path.ok()) << c.name << ": " << path.status();
      EXPECT_EQ(*path, c.path);
    }
  }
}

TEST_F(ConfinedPathTest, RootThroughASymlinkStillConfines) {
  fs::create_directory_symlink(root_, base_ + "/root-link");
  absl::StatusOr<std::string> path =
      ResolveCheckpointName(base_ + "/root-link", "--checkpoint_root", "jobs/a/x");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, root_ + "/jobs/a/x");
  EXPECT_FALSE(ResolveCheckpointName(base_ + "/root-link", "--checkpoint_root", "escape/x").ok());
}

TEST_F(ConfinedPathTest, NoRootIsFailedPreconditionNamingTheFlag) {
  for (const std::string& root : {std::string(), base_ + "/missing", outside_ + "/secret"}) {
    absl::StatusOr<std::string> path = ResolveCheckpointName(root, "--checkpoint_root", "x");
    ASSERT_FALSE(path.ok());
    EXPECT_EQ(path.status().code(), absl::StatusCode::kFailedPrecondition) << root;
    EXPECT_THAT(std::string(path.status().message()), HasSubstr("--checkpoint_root"));
  }
}

TEST_F(ConfinedPathTest, PathsUnderRoot) {
  struct Case {
    std::string path;
    std::string resolved;  // empty: refused
  };
  const Case cases[] = {
      {"jobs/new", root_ + "/jobs/new"},  // relative: under the root
      {".", root_},
      {root_ + "/jobs/a", root_ + "/jobs/a"},  // absolute inside
      {root_ + "/alias/x", root_ + "/jobs/a/x"},
      {root_ + "/jobs/../jobs/a", root_ + "/jobs/a"},
      {"/tmp/elsewhere", ""},
      {"../outside", ""},
      {root_ + "/../outside", ""},
      {root_ + "/escape/ckpt", ""},
      {"escape", ""},
      {root_ + "x", ""},  // a sibling sharing the prefix
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> real = ResolveUnderRoot(root_, "--checkpoint_root", c.path);
    if (c.resolved.empty()) {
      ASSERT_FALSE(real.ok()) << c.path << " -> " << *real;
      EXPECT_EQ(real.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(real.status().message()), HasSubstr(c.path));
      EXPECT_THAT(std::string(real.status().message()), HasSubstr("--checkpoint_root"));
    } else {
      ASSERT_TRUE(real.ok()) << c.path << ": " << real.status();
      EXPECT_EQ(*real, c.resolved);
      EXPECT_EQ(RelativeToRoot(*real, root_),
                c.resolved.substr(std::min(c.resolved.size(), root_.size() + 1)));
    }
  }
}

TEST_F(ConfinedPathTest, RealPathOfExistingPrefix) {
  absl::StatusOr<std::string> p = RealPathOfExistingPrefix(root_ + "/escape/secret");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, outside_ + "/secret");
  p = RealPathOfExistingPrefix(root_ + "/missing/../escape/secret");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, outside_ + "/secret");  // ".." then a symlink: still resolved
  EXPECT_EQ(RealPathOfExistingPrefix(root_ + "/dangling").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
