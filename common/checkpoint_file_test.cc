#include "common/checkpoint_file.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

absl::StatusOr<std::vector<std::string>> ReadRecords(const std::string& path) {
  auto reader = CheckpointFileReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::vector<std::string> out;
  std::string record;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&record);
    if (!more.ok()) return more.status();
    if (!*more) return out;
    out.push_back(record);
  }
}

CheckpointFile WriteRecords(const std::string& path, const std::vector<std::string>& records) {
  auto writer = CheckpointFileWriter::Create(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const std::string& r : records) EXPECT_TRUE((*writer)->Append(r).ok());
  auto file = (*writer)->Commit();
  EXPECT_TRUE(file.ok()) << file.status();
  return *file;
}

TEST(CheckpointFileTest, RoundTripWithFramingSizeAndChecksum) {
  const std::string path = TempPath("roundtrip.data");
  const std::vector<std::string> records = {"first", "", std::string(100000, 'x'),
                                            std::string("\0\1\2", 3)};
  const CheckpointFile file = WriteRecords(path, records);
  EXPECT_EQ(file.name(), path);
  EXPECT_EQ(file.bytes(), 8 * 4 + 5 + 0 + 100000 + 3);
  EXPECT_EQ(file.checksum().size(), 16u);
  EXPECT_FALSE(Exists(absl::StrCat(path, ".tmp.", ::getpid())));

  // Frames are [uint64 little-endian length][bytes].
  const std::string bytes = ReadAll(path);
  EXPECT_EQ(bytes.substr(0, 13), std::string("\5\0\0\0\0\0\0\0first", 13));

  EXPECT_TRUE(VerifyCheckpointFile(file.name(), file).ok());
  auto read = ReadRecords(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, records);
}

TEST(CheckpointFileTest, UncommittedWriterLeavesNoFile) {
  const std::string path = TempPath("abandoned.data");
  {
    auto writer = CheckpointFileWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("half").ok());
  }
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(absl::StrCat(path, ".tmp.", ::getpid())));
}

TEST(CheckpointFileTest, MissingDirectoryFailsAtCreate) {
  auto writer = CheckpointFileWriter::Create(TempPath("no/such/dir/ps-0.data"));
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointFileTest, FlippedByteIsDataLossNamingTheFile) {
  const std::string path = TempPath("flipped.data");
  const CheckpointFile file = WriteRecords(path, {"header", std::string(1000, 'a')});
  const std::string good = ReadAll(path);
  for (size_t at : {size_t{0}, size_t{9}, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x01;
    WriteAll(path, bad);
    absl::Status s = VerifyCheckpointFile(file.name(), file);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << at;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path));
    EXPECT_THAT(std::string(s.message()), HasSubstr("checksum"));
  }
}

TEST(CheckpointFileTest, TruncatedFileNeverLoads) {
  const std::string path = TempPath("truncated.data");
  const CheckpointFile file = WriteRecords(path, {"header", std::string(1000, 'a'), "tail"});
  const std::string good = ReadAll(path);
  for (size_t keep : {size_t{0}, size_t{3}, size_t{8}, size_t{14}, size_t{20}, good.size() - 5,
                      good.size() - 1}) {
    WriteAll(path, good.substr(0, keep));
    absl::Status s = VerifyCheckpointFile(file.name(), file);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "kept " << keep;
    EXPECT_THAT(std::string(s.message()), HasSubstr("size"));
    // The reader on its own never crashes: a torn frame is DATA_LOSS (a cut
    // exactly between frames simply has fewer records).
    auto read = ReadRecords(path);
    if (keep == 0 || keep == 14) {
      EXPECT_TRUE(read.ok()) << keep;
    } else {
      EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << "kept " << keep;
    }
  }
}

TEST(CheckpointFileTest, HugeLengthIsDataLossNotAnAllocation) {
  const std::string path = TempPath("huge.data");
  WriteAll(path, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "xyz");
  auto read = ReadRecords(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("claims"));
}

TEST(CheckpointFileTest, MissingFileIsNotFound) {
  CheckpointFile file;
  file.set_name(TempPath("missing.data"));
  EXPECT_EQ(VerifyCheckpointFile(file.name(), file).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckpointFileReader::Open(file.name()).status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointFileTest, WriteFileAtomicallyWritesRawBytes) {
  const std::string path = TempPath("MANIFEST");
  auto file = WriteFileAtomically(path, "manifest bytes");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ReadAll(path), "manifest bytes");
  EXPECT_EQ(file->bytes(), 14);
  EXPECT_TRUE(VerifyCheckpointFile(file->name(), *file).ok());
  auto again = WriteFileAtomically(path, "other");
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->checksum(), file->checksum());
  EXPECT_EQ(ReadAll(path), "other");
}

}  // namespace
}  // namespace pscluster
