#include "worker/core/stream_batches.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"
#include "gtest/gtest.h"
#include "protos/example.pb.h"

namespace pscluster {
namespace {

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Rows "label<TAB>x<TAB>c" with x = i, label = i % 2.
std::string Rows(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i % 2, "\t", i, "\tv", i % 5, "\n");
  return out;
}

struct Fixture {
  DataSourceSpec source;
  ModelSpec model;
  Fixture(const std::string& format, bool skip) {
    source.format = format;
    source.header = false;
    source.delimiter = '\t';
    source.columns = {{"label", ColumnSpec::Type::kInt},
                      {"x", ColumnSpec::Type::kFloat},
                      {"c", ColumnSpec::Type::kString}};
    source.label_column = "label";
    source.dense_columns = {"x"};
    source.stream.enabled = true;
    source.stream.skip_corrupt = skip;
    source.stream.shuffle_buffer = 8;
    source.stream.prefetch_bytes = 64;
    CategoricalFeatureSpec c;
    c.name = "c";
    c.column = "c";
    c.hashed = true;
    model.categorical = {c};
    model.dense_inputs = 1;
  }
};

DataSplit Split(const std::string& path, int64_t begin, int64_t end, int64_t offset = 0) {
  DataSplit s;
  s.set_epoch(2);
  s.set_path(path);
  s.set_begin(begin);
  s.set_end(end);
  s.set_byte_offset(offset);
  return s;
}

// Every example's x (its record number), reading `batch` at a time.
std::vector<int> ReadXs(const Fixture& f, const DataSplit& split, bool shuffle, int64_t batch,
                        absl::Status* status = nullptr, int64_t* corrupt = nullptr,
                        std::string* first = nullptr) {
  absl::StatusOr<RowEncoder> encoder = RowEncoder::Create(f.source, f.model, "test");
  EXPECT_TRUE(encoder.ok()) << encoder.status();
  StreamBatches stream(f.source, &*encoder, split, /*seed=*/7, shuffle);
  std::vector<int> xs;
  absl::Status s;
  for (;;) {
    Dataset d;
    s = stream.Next(batch, &d);
    if (!s.ok()) break;
    EXPECT_EQ(d.categorical.size(), 1u);
    for (int64_t i = 0; i < d.count; ++i) {
      xs.push_back(static_cast<int>(d.x[i]));
      EXPECT_EQ(d.y[i], static_cast<int>(d.x[i]) % 2);
    }
    if (d.count < batch) {
      s = stream.Finish();
      break;
    }
  }
  if (status != nullptr) *status = s;
  if (corrupt != nullptr) *corrupt = stream.corrupt();
  if (first != nullptr) *first = stream.first_corrupt();
  return xs;
}

TEST(StreamBatchesTest, ARangeReadsExactlyItsRecordsTheSameOnARetry) {
  Fixture f("csv", /*skip=*/false);
  const std::string rows = Rows(50);
  const std::string path = WriteFile("rows.tsv", rows);
  // Records [10, 30), seeking to record 10's byte offset.
  const int64_t offset = static_cast<int64_t>(rows.find("0\t10\t"));
  std::vector<int> in_order = ReadXs(f, Split(path, 10, 30, offset), /*shuffle=*/false, 6);
  std::vector<int> want(20);
  for (int i = 0; i < 20; ++i) want[i] = 10 + i;
  EXPECT_EQ(in_order, want);
  // Without the offset the reader reads from the start and drops the rest.
  EXPECT_EQ(ReadXs(f, Split(path, 10, 30), false, 6), want);

  std::vector<int> shuffled = ReadXs(f, Split(path, 10, 30, offset), /*shuffle=*/true, 6);
  EXPECT_NE(shuffled, want);
  EXPECT_EQ(ReadXs(f, Split(path, 10, 30, offset), true, 6), shuffled);  // a retry
  std::sort(shuffled.begin(), shuffled.end());
  EXPECT_EQ(shuffled, want);
}

TEST(StreamBatchesTest, TfRecordExamplesRoundTrip) {
  Fixture f("tfrecord", /*skip=*/false);
  std::string bytes;
  std::vector<int64_t> offsets;
  for (int i = 0; i < 12; ++i) {
    offsets.push_back(static_cast<int64_t>(bytes.size()));
    tensorflow::Example e;
    auto& m = *e.mutable_features()->mutable_feature();
    m["label"].mutable_int64_list()->add_value(i % 2);
    m["x"].mutable_float_list()->add_value(static_cast<float>(i));
    if (i % 3 != 0) m["c"].mutable_bytes_list()->add_value(absl::StrCat("v", i));
    bytes += FrameTfRecord(e.SerializeAsString());
  }
  const std::string path = WriteFile("rows.tfrecord", bytes);
  EXPECT_EQ(ReadXs(f, Split(path, 4, 9, offsets[4]), false, 4),
            (std::vector<int>{4, 5, 6, 7, 8}));
}

TEST(StreamBatchesTest, CorruptRecordsAreSkippedAndCountedOrFailNamingThem) {
  std::string rows = Rows(10);
  // Line 4 (record 3): x is not a float; line 8 (record 7): a field short.
  rows.replace(rows.find("1\t3\t"), 4, "1\tx3\t");
  rows.replace(rows.find("1\t7\tv2"), 6, "1\t7");
  const std::string path = WriteFile("corrupt.tsv", rows);

  Fixture skip("csv", /*skip=*/true);
  absl::Status status;
  int64_t corrupt = 0;
  std::string first;
  EXPECT_EQ(ReadXs(skip, Split(path, 0, 10), false, 4, &status, &corrupt, &first),
            (std::vector<int>{0, 1, 2, 4, 5, 6, 8, 9}));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(corrupt, 2);
  EXPECT_NE(first.find(absl::StrCat("file ", path, ", line 4")), std::string::npos) << first;

  Fixture fail("csv", /*skip=*/false);
  ReadXs(fail, Split(path, 0, 10), false, 4, &status);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find(absl::StrCat("file ", path, ", line 4")), std::string::npos)
      << status;
}

TEST(StreamBatchesTest, BadCrcIsCorruptAndNamedByItsByteOffset) {
  Fixture f("tfrecord", /*skip=*/true);
  std::string bytes;
  int64_t bad = 0;
  for (int i = 0; i < 4; ++i) {
    if (i == 2) bad = static_cast<int64_t>(bytes.size());
    tensorflow::Example e;
    auto& m = *e.mutable_features()->mutable_feature();
    m["label"].mutable_int64_list()->add_value(i % 2);
    m["x"].mutable_float_list()->add_value(static_cast<float>(i));
    bytes += FrameTfRecord(e.SerializeAsString());
  }
  bytes[bad + 14] ^= 0x40;  // a data byte of record 2
  const std::string path = WriteFile("badcrc.tfrecord", bytes);
  absl::Status status;
  int64_t corrupt = 0;
  std::string first;
  EXPECT_EQ(ReadXs(f, Split(path, 0, 4), false, 8, &status, &corrupt, &first),
            (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(corrupt, 1);
  EXPECT_NE(first.find(absl::StrCat("byte ", bad)), std::string::npos) << first;

  Fixture fail("tfrecord", /*skip=*/false);
  ReadXs(fail, Split(path, 0, 4), false, 8, &status);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_NE(status.message().find(absl::StrCat("byte ", bad)), std::string::npos) << status;
}

TEST(StreamBatchesTest, AMissingFileIsNotFound) {
  Fixture f("csv", false);
  absl::Status status;
  ReadXs(f, Split("/nonexistent/data.tsv", 0, 5), false, 4, &status);
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
}

TEST(StreamBatchesTest, RecordsLeftUnreadFailFinishAndTheParserStopsWithTheStream) {
  Fixture f("csv", /*skip=*/false);
  const std::string path = WriteFile("left.tsv", Rows(100));
  absl::StatusOr<RowEncoder> encoder = RowEncoder::Create(f.source, f.model, "test");
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  {
    StreamBatches stream(f.source, &*encoder, Split(path, 0, 100), /*seed=*/7, false);
    Dataset d;
    ASSERT_TRUE(stream.Next(10, &d).ok());
    EXPECT_EQ(d.count, 10);
    // Another batch size while a full batch is ready.
    EXPECT_EQ(stream.Next(3, &d).code(), absl::StatusCode::kFailedPrecondition);
    const absl::Status finish = stream.Finish();
    EXPECT_EQ(finish.code(), absl::StatusCode::kFailedPrecondition) << finish;
    EXPECT_NE(finish.message().find("left unread"), std::string::npos) << finish;
  }  // destroyed with the parser blocked on a full queue: joins, no hang
  {
    StreamBatches stream(f.source, &*encoder, Split(path, 0, 100), /*seed=*/7, false);
  }  // never read: no parser was started
}

TEST(StreamBatchesTest, AShortLastBatchMayAskForFewer) {
  Fixture f("csv", /*skip=*/false);
  const std::string path = WriteFile("short.tsv", Rows(25));
  absl::StatusOr<RowEncoder> encoder = RowEncoder::Create(f.source, f.model, "test");
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  StreamBatches stream(f.source, &*encoder, Split(path, 0, 25), /*seed=*/7, false);
  Dataset d;
  int64_t total = 0;
  for (int64_t left = 25; left > 0; left -= 10) {
    ASSERT_TRUE(stream.Next(std::min<int64_t>(10, left), &d).ok());
    EXPECT_EQ(d.count, std::min<int64_t>(10, left));
    total += d.count;
  }
  EXPECT_EQ(total, 25);
  ASSERT_TRUE(stream.Next(10, &d).ok());
  EXPECT_EQ(d.count, 0);
  EXPECT_TRUE(stream.Finish().ok());
  EXPECT_EQ(stream.corrupt(), 0);
}

}  // namespace
}  // namespace pscluster
