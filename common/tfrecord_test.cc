#include "common/tfrecord.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

uint64_t LittleEndian(const std::string& bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) {
    v |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  }
  return v;
}

// TF's Unmask (tensorflow/core/lib/hash/crc32c.h), written out here so the
// test does not trust MaskCrc32c to check itself.
uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

TEST(Crc32cTest, KnownVectors) {
  // The CRC-32C check value, and RFC 3720 (iSCSI) B.4's 32 zero bytes and
  // 32 bytes 0x00..0x1f: ISA-L's seed and inversion convention is right.
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MaskIsTfRotationPlusConstant) {
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  // 0xE3069283 rotated right by 15 is 0x2507C60D; plus 0xa282ead8.
  EXPECT_EQ(MaskCrc32c(0xE3069283u), 0x2507C60Du + 0xa282ead8u);
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xffffffffu}) EXPECT_EQ(Unmask(MaskCrc32c(crc)), crc);
}

TEST(FrameTfRecordTest, LayoutAndChecksums) {
  const std::string data = "hello, tensorboard";
  const std::string frame = FrameTfRecord(data);
  ASSERT_EQ(frame.size(), kTfRecordOverheadBytes + data.size());
  EXPECT_EQ(LittleEndian(frame, 0, 8), data.size());
  EXPECT_EQ(Unmask(static_cast<uint32_t>(LittleEndian(frame, 8, 4))), Crc32c(frame.substr(0, 8)));
  EXPECT_EQ(frame.substr(12, data.size()), data);
  EXPECT_EQ(Unmask(static_cast<uint32_t>(LittleEndian(frame, 12 + data.size(), 4))),
            Crc32c(data));
}

TEST(FrameTfRecordTest, EmptyRecordBytes) {
  // An empty record: 8 zero length bytes, the masked CRC of those, and the
  // masked CRC of nothing (0 masked: 0xa282ead8, little-endian).
  const std::string frame = FrameTfRecord("");
  ASSERT_EQ(frame.size(), kTfRecordOverheadBytes);
  EXPECT_EQ(frame.substr(0, 8), std::string(8, '\0'));
  EXPECT_EQ(LittleEndian(frame, 8, 4), MaskCrc32c(Crc32c(std::string(8, '\0'))));
  EXPECT_EQ(frame.substr(12, 4), std::string("\xd8\xea\x82\xa2", 4));
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(TfRecordReaderTest, ReadsRecordsInOrderThenEnds) {
  const std::vector<std::string> records = {"first", "", std::string(100000, 'x'), "last"};
  std::string bytes;
  for (const std::string& r : records) bytes += FrameTfRecord(r);
  TfRecordReader reader(WriteFile("ok.tfrecord", bytes));
  std::string data;
  for (const std::string& r : records) {
    ASSERT_TRUE(reader.Next(&data).ok());
    EXPECT_EQ(data, r);
  }
  EXPECT_EQ(reader.offset(), bytes.size());
  EXPECT_TRUE(absl::IsOutOfRange(reader.Next(&data)));
}

TEST(TfRecordReaderTest, EmptyFileIsAnEnd) {
  TfRecordReader reader(WriteFile("empty.tfrecord", ""));
  std::string data;
  EXPECT_TRUE(absl::IsOutOfRange(reader.Next(&data)));
}

TEST(TfRecordReaderTest, MissingFileIsNotFound) {
  TfRecordReader reader("/nonexistent/pscluster.tfrecord");
  std::string data;
  absl::Status s = reader.Next(&data);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_NE(s.message().find("/nonexistent/pscluster.tfrecord"), absl::string_view::npos);
}

TEST(TfRecordReaderTest, BadDataCrcNamesTheOffsetAndSkipsTheRecord) {
  std::string bytes = FrameTfRecord("good") + FrameTfRecord("flipped") + FrameTfRecord("after");
  bytes[FrameTfRecord("good").size() + 12] ^= 1;  // the second record's first data byte
  TfRecordReader reader(WriteFile("crc.tfrecord", bytes));
  std::string data;
  ASSERT_TRUE(reader.Next(&data).ok());
  EXPECT_FALSE(reader.recoverable());
  absl::Status s = reader.Next(&data);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("record at byte 20: data CRC mismatch"), absl::string_view::npos)
      << s;
  // The length was good: the reader stepped over the record.
  EXPECT_TRUE(reader.recoverable());
  ASSERT_TRUE(reader.Next(&data).ok());
  EXPECT_EQ(data, "after");
  EXPECT_TRUE(absl::IsOutOfRange(reader.Next(&data)));
}

TEST(TfRecordReaderTest, BadLengthCrcAndOversizedLength) {
  std::string bytes = FrameTfRecord("abc");
  bytes[0] ^= 1;
  TfRecordReader reader(WriteFile("len.tfrecord", bytes));
  std::string data;
  absl::Status s = reader.Next(&data);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_NE(s.message().find("length CRC mismatch"), absl::string_view::npos) << s;
  EXPECT_FALSE(reader.recoverable());
  EXPECT_EQ(reader.Next(&data), s);  // framing lost: the reader stays failed

  TfRecordReader small(WriteFile("big.tfrecord", FrameTfRecord(std::string(1000, 'y'))), 999);
  s = small.Next(&data);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_NE(s.message().find("over the limit of 999 bytes"), absl::string_view::npos) << s;
}

TEST(TfRecordReaderTest, TruncatedFiles) {
  const std::string frame = FrameTfRecord("truncated record");
  for (size_t cut : {size_t{5}, size_t{12}, size_t{20}, frame.size() - 1}) {
    TfRecordReader reader(WriteFile("cut.tfrecord", FrameTfRecord("ok") + frame.substr(0, cut)));
    std::string data;
    ASSERT_TRUE(reader.Next(&data).ok());
    absl::Status s = reader.Next(&data);
    EXPECT_TRUE(absl::IsDataLoss(s)) << cut << ": " << s;
    EXPECT_NE(s.message().find("the file ends inside"), absl::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace pscluster
