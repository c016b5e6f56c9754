#include "worker/core/record_stream.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string WriteGzip(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  gzFile gz = gzopen(path.c_str(), "wb");
  gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(gz);
  return path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every record of `path` with ReadRecordRange over the whole file.
std::vector<std::string> ReadAll(const std::string& path, RecordReaderOptions options,
                                 CorruptRecords* corrupt, absl::Status* status = nullptr) {
  std::vector<std::string> out;
  absl::StatusOr<RangeResult> r =
      ReadRecordRange({path, 0, -1}, options, corrupt, [&](int64_t, absl::string_view record) {
        out.emplace_back(record);
        return absl::OkStatus();
      });
  if (status != nullptr) *status = r.status();
  return out;
}

TEST(RecordFileReaderTest, LinesPlainAndGzipReadTheSame) {
  const std::string text = "a,1\r\nb,2\n\nc,3";  // CRLF, an empty line, no final newline
  for (const std::string& path :
       {WriteFile("lines.csv", text), WriteGzip("lines.csv.gz", text)}) {
    CorruptRecords corrupt(CorruptRecordPolicy::kFail);
    EXPECT_EQ(ReadAll(path, {}, &corrupt), (std::vector<std::string>{"a,1", "b,2", "", "c,3"}))
        << path;
  }
}

TEST(RecordFileReaderTest, HeaderIsNotARecord) {
  RecordReaderOptions options;
  options.header = true;
  CorruptRecords corrupt(CorruptRecordPolicy::kFail);
  EXPECT_EQ(ReadAll(WriteFile("header.csv", "x,y\n1,2\n"), options, &corrupt),
            std::vector<std::string>{"1,2"});
}

TEST(RecordFileReaderTest, EmptyAndMissingFiles) {
  RecordFileReader empty(WriteFile("empty.csv", ""), {});
  std::string record;
  EXPECT_TRUE(absl::IsOutOfRange(empty.Next(&record)));
  RecordFileReader empty_gz(WriteGzip("empty.csv.gz", ""), {});
  EXPECT_TRUE(absl::IsOutOfRange(empty_gz.Next(&record)));
  for (RecordFormat format : {RecordFormat::kLines, RecordFormat::kTfRecord}) {
    RecordReaderOptions options;
    options.format = format;
    RecordFileReader missing("/nonexistent/part-0", options);
    absl::Status s = missing.Next(&record);
    EXPECT_TRUE(absl::IsNotFound(s)) << s;
    EXPECT_NE(s.message().find("/nonexistent/part-0"), absl::string_view::npos) << s;
  }
}

TEST(RecordFileReaderTest, OverlongLineIsSkippedAndNamed) {
  RecordReaderOptions options;
  options.max_record_bytes = 10;
  const std::string path =
      WriteGzip("long.csv.gz", "short\n" + std::string(200000, 'x') + "\nafter\n");
  CorruptRecords skip(CorruptRecordPolicy::kSkip);
  EXPECT_EQ(ReadAll(path, options, &skip), (std::vector<std::string>{"short", "after"}));
  ASSERT_EQ(skip.skipped(), 1);
  EXPECT_NE(skip.messages()[0].find("line 2: longer than the limit of 10 bytes"),
            std::string::npos)
      << skip.messages()[0];

  CorruptRecords fail(CorruptRecordPolicy::kFail);
  absl::Status s;
  ReadAll(path, options, &fail, &s);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("long.csv.gz, line 2"), absl::string_view::npos) << s;
}

TEST(RecordFileReaderTest, TruncatedGzipLosesTheRestLoudly) {
  std::string text;
  for (int i = 0; i < 20000; ++i) absl::StrAppend(&text, "row ", i, ",", i * 7, "\n");
  const std::string whole = ReadBytes(WriteGzip("whole.csv.gz", text));
  const std::string path = WriteFile("cut.csv.gz", whole.substr(0, whole.size() / 2));
  CorruptRecords skip(CorruptRecordPolicy::kSkip);
  absl::Status s;
  const std::vector<std::string> got = ReadAll(path, {}, &skip, &s);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GT(got.size(), 0u);
  EXPECT_LT(got.size(), 20000u);
  EXPECT_EQ(got.front(), "row 0,0");
  EXPECT_EQ(skip.truncated_files(), 1);
  ASSERT_EQ(skip.messages().size(), 1u);
  EXPECT_NE(skip.messages()[0].find("truncated or corrupt"), std::string::npos)
      << skip.messages()[0];
  EXPECT_NE(skip.messages()[0].find("the rest of the file is lost"), std::string::npos);

  CorruptRecords fail(CorruptRecordPolicy::kFail);
  ReadAll(path, {}, &fail, &s);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("cut.csv.gz"), absl::string_view::npos) << s;
}

std::string TfRecords(int n, int corrupt_index = -1) {
  std::string bytes;
  for (int i = 0; i < n; ++i) {
    std::string frame = FrameTfRecord(absl::StrCat("record-", i));
    if (i == corrupt_index) frame[12] ^= 1;
    bytes += frame;
  }
  return bytes;
}

TEST(ReadRecordRangeTest, RangesCoverTheFileExactlyOnce) {
  RecordReaderOptions options;
  options.format = RecordFormat::kTfRecord;
  const std::string path = WriteFile("ranges.tfrecord", TfRecords(10));
  std::vector<int64_t> seen;
  bool last_end_of_file = false;
  for (RecordRange range : {RecordRange{path, 0, 3}, RecordRange{path, 3, 7},
                            RecordRange{path, 7, 12}}) {
    CorruptRecords corrupt(CorruptRecordPolicy::kFail);
    absl::StatusOr<RangeResult> r =
        ReadRecordRange(range, options, &corrupt, [&](int64_t number, absl::string_view data) {
          EXPECT_EQ(data, absl::StrCat("record-", number));
          seen.push_back(number);
          return absl::OkStatus();
        });
    ASSERT_TRUE(r.ok()) << r.status();
    last_end_of_file = r->end_of_file;
  }
  std::vector<int64_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  EXPECT_TRUE(last_end_of_file);  // [7, 12) ran past the file's 10 records
}

TEST(ReadRecordRangeTest, CorruptRecordIsCountedByTheRangeHoldingIt) {
  RecordReaderOptions options;
  options.format = RecordFormat::kTfRecord;
  const std::string path = WriteFile("corrupt.tfrecord", TfRecords(6, /*corrupt_index=*/4));
  const auto read = [&](RecordRange range, CorruptRecords* corrupt) {
    std::vector<int64_t> numbers;
    absl::StatusOr<RangeResult> r =
        ReadRecordRange(range, options, corrupt, [&](int64_t number, absl::string_view) {
          numbers.push_back(number);
          return absl::OkStatus();
        });
    EXPECT_TRUE(r.ok()) << r.status();
    return numbers;
  };
  CorruptRecords first(CorruptRecordPolicy::kSkip), second(CorruptRecordPolicy::kSkip);
  EXPECT_EQ(read({path, 0, 3}, &first), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(first.skipped(), 0);
  // Record 4 keeps its number: record 5 is still 5.
  EXPECT_EQ(read({path, 3, 6}, &second), (std::vector<int64_t>{3, 5}));
  ASSERT_EQ(second.skipped(), 1);
  // Record 4 starts after four records of 16 + 8 bytes.
  EXPECT_NE(second.messages()[0].find("record at byte 96: data CRC mismatch"),
            std::string::npos)
      << second.messages()[0];
}

TEST(ReadRecordRangeTest, ParserRefusalsFollowThePolicyAndNameTheLine) {
  const std::string path = WriteFile("parse.csv", "1\n2\nthree\n4\n");
  const auto parse = [](int64_t, absl::string_view record) {
    return record == "three" ? absl::InvalidArgumentError("column 1: 'three' is not a number")
                             : absl::OkStatus();
  };
  CorruptRecords skip(CorruptRecordPolicy::kSkip);
  absl::StatusOr<RangeResult> r = ReadRecordRange({path, 0, -1}, {}, &skip, parse);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 3);
  ASSERT_EQ(skip.skipped(), 1);
  EXPECT_EQ(skip.messages()[0], absl::StrCat("file ", path,
                                             ", line 3: column 1: 'three' is not a number"));
  CorruptRecords fail(CorruptRecordPolicy::kFail);
  r = ReadRecordRange({path, 0, -1}, {}, &fail, parse);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("line 3"), absl::string_view::npos);
}

TEST(RecordPrefetcherTest, StreamsInOrderWithinItsByteBudget) {
  // 10,000 records of 1 KB (10 MB) through a 64 KiB budget.
  std::string bytes;
  for (int i = 0; i < 10000; ++i) {
    std::string data = absl::StrCat(i, ":");
    data.resize(1000, 'p');
    bytes += FrameTfRecord(data);
  }
  const std::string a = WriteFile("stream-a.tfrecord", bytes);
  const std::string b = WriteFile("stream-b.tfrecord", bytes);
  RecordReaderOptions options;
  options.format = RecordFormat::kTfRecord;
  RecordPrefetcher prefetcher({{a, 0, 6000}, {b, 4000, -1}}, options, CorruptRecordPolicy::kFail,
                              64 << 10);
  RecordPrefetcher::Record record;
  int64_t count = 0;
  absl::Status s;
  while ((s = prefetcher.Next(&record)).ok()) {
    const int64_t expect = count < 6000 ? count : count - 6000 + 4000;
    ASSERT_EQ(record.number, expect);
    ASSERT_EQ(record.range, count < 6000 ? 0 : 1);
    ASSERT_EQ(record.data.substr(0, record.data.find(':')), absl::StrCat(expect));
    ++count;
  }
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_EQ(count, 12000);
  EXPECT_LE(prefetcher.peak_bytes(), 64 << 10);
  EXPECT_GT(prefetcher.peak_bytes(), 0);
}

TEST(RecordPrefetcherTest, StopsWhenDroppedMidStream) {
  const std::string path = WriteFile("drop.tfrecord", TfRecords(5000));
  RecordReaderOptions options;
  options.format = RecordFormat::kTfRecord;
  RecordPrefetcher prefetcher({{path, 0, -1}}, options, CorruptRecordPolicy::kFail, 256);
  RecordPrefetcher::Record record;
  ASSERT_TRUE(prefetcher.Next(&record).ok());
  // The destructor must not hang on the reader blocked on a full queue.
}

TEST(RecordPrefetcherTest, RecordsBeforeAnErrorComeFirst) {
  RecordReaderOptions options;
  options.format = RecordFormat::kTfRecord;
  const std::string good = WriteFile("good.tfrecord", TfRecords(3));
  RecordPrefetcher prefetcher({{good, 0, -1}, {"/nonexistent/x.tfrecord", 0, -1}}, options,
                              CorruptRecordPolicy::kSkip, 1 << 20);
  RecordPrefetcher::Record record;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(prefetcher.Next(&record).ok());
  absl::Status s = prefetcher.Next(&record);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
}

TEST(ShuffleBufferTest, PermutesDeterministicallyPerSeed) {
  const auto shuffled = [](size_t capacity, uint64_t seed) {
    ShuffleBuffer<int> buffer(capacity, seed);
    std::vector<int> out;
    int v = 0;
    for (int i = 0; i < 1000; ++i) {
      if (buffer.Push(i, &v)) out.push_back(v);
    }
    while (buffer.Pop(&v)) out.push_back(v);
    return out;
  };
  std::vector<int> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  const std::vector<int> a = shuffled(100, 7);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
  EXPECT_EQ(a, shuffled(100, 7));
  EXPECT_NE(a, shuffled(100, 8));
  EXPECT_EQ(shuffled(0, 7), identity);
}

}  // namespace
}  // namespace pscluster
