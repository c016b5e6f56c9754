#include "common/csv_reader.h"

#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Type = ColumnSpec::Type;

std::string WriteFile(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::vector<ColumnSpec> Columns(std::vector<std::pair<std::string, Type>> cols) {
  std::vector<ColumnSpec> out;
  for (auto& [name, type] : cols) out.push_back(ColumnSpec{name, type});
  return out;
}

TEST(CsvReaderTest, TypedFieldsQuotesAndCrlf) {
  const std::string path = WriteFile(
      "typed.csv",
      "\"id\",\"score\",\"title\"\r\n"
      "1,2.5,\"Hello, \"\"world\"\"\"\r\n"
      "-7,1e-3,plain\r\n"
      "3,4,\"two\r\nlines\"\r\n");
  auto r = CsvReader::Open(path, Columns({{"id", Type::kInt}, {"score", Type::kFloat},
                                          {"title", Type::kString}}));
  ASSERT_TRUE(r.ok()) << r.status();
  CsvReader& csv = **r;
  ASSERT_TRUE(*csv.Next());
  EXPECT_EQ(csv.row(), 0);
  EXPECT_EQ(csv.line(), 2);
  EXPECT_EQ(csv.field(0).int_value, 1);
  EXPECT_DOUBLE_EQ(csv.field(1).float_value, 2.5);
  EXPECT_EQ(csv.field(2).text, "Hello, \"world\"");
  ASSERT_TRUE(*csv.Next());
  EXPECT_EQ(csv.field(0).int_value, -7);
  EXPECT_DOUBLE_EQ(csv.field(1).float_value, 1e-3);
  EXPECT_EQ(csv.field(2).text, "plain");
  ASSERT_TRUE(*csv.Next());
  EXPECT_EQ(csv.line(), 4);
  EXPECT_EQ(csv.field(2).text, "two\r\nlines");
  EXPECT_FALSE(*csv.Next());
  EXPECT_EQ(csv.ColumnIndex("score"), 1);
  EXPECT_EQ(csv.ColumnIndex("nope"), -1);
}

TEST(CsvReaderTest, NaAndEmptyAreMissingButQuotedNaIsAString) {
  const std::string path = WriteFile("na.csv",
                                     "a,b,s\n"
                                     "NA,,NA\n"
                                     "1,2,\"NA\"\n"
                                     "\n"
                                     ",NA,\n"
                                     "5,6,\"\"");  // no final newline
  auto r = CsvReader::Open(path, Columns({{"a", Type::kInt}, {"b", Type::kFloat}, {"s", Type::kString}}));
  ASSERT_TRUE(r.ok()) << r.status();
  CsvReader& csv = **r;
  ASSERT_TRUE(*csv.Next());
  EXPECT_TRUE(csv.field(0).missing);
  EXPECT_TRUE(csv.field(1).missing);
  EXPECT_TRUE(csv.field(2).missing);
  ASSERT_TRUE(*csv.Next());
  EXPECT_FALSE(csv.field(0).missing);
  EXPECT_FALSE(csv.field(2).missing);
  EXPECT_EQ(csv.field(2).text, "NA");
  ASSERT_TRUE(*csv.Next()) << "the blank line is skipped";
  EXPECT_EQ(csv.row(), 2);
  EXPECT_EQ(csv.line(), 5);
  EXPECT_TRUE(csv.field(0).missing);
  EXPECT_TRUE(csv.field(2).missing);
  ASSERT_TRUE(*csv.Next());
  EXPECT_EQ(csv.field(0).int_value, 5);
  EXPECT_FALSE(csv.field(2).missing);
  EXPECT_EQ(csv.field(2).text, "");
  EXPECT_FALSE(*csv.Next());
}

TEST(CsvReaderTest, MalformedValueNamesFileLineAndColumn) {
  const std::string path = WriteFile("bad.csv", "a,b\n1,2\n3,abc\n");
  auto r = CsvReader::Open(path, Columns({{"a", Type::kInt}, {"b", Type::kInt}}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(*(*r)->Next());
  auto s = (*r)->Next();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_EQ(s.status().message(),
            path + ":3: column 'b' (field 2): expected an int, found 3 bytes that are not");

  const std::string floats = WriteFile("badf.csv", "x\n2.5.1\n");
  r = CsvReader::Open(floats, Columns({{"x", Type::kFloat}}));
  ASSERT_TRUE(r.ok());
  s = (*r)->Next();
  EXPECT_EQ(s.status().message(),
            floats + ":2: column 'x' (field 1): expected a float, found 5 bytes that are not");

  const std::string ints = WriteFile("badi.csv", "x\n2.5\n");
  r = CsvReader::Open(ints, Columns({{"x", Type::kInt}}));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)->Next().ok()) << "2.5 is not an int";
}

TEST(CsvReaderTest, WrongFieldCountAndBadQuotes) {
  const std::string path = WriteFile("count.csv", "a,b\n1,2,3\n");
  auto r = CsvReader::Open(path, Columns({{"a", Type::kInt}, {"b", Type::kInt}}));
  ASSERT_TRUE(r.ok());
  auto s = (*r)->Next();
  EXPECT_EQ(s.status().message(), path + ":2: expected 2 fields, found 3");

  const std::string unclosed = WriteFile("unclosed.csv", "a\n\"abc\n");
  r = CsvReader::Open(unclosed, Columns({{"a", Type::kString}}));
  ASSERT_TRUE(r.ok());
  s = (*r)->Next();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not closed"), std::string::npos) << s.status();

  const std::string trailing = WriteFile("trailing.csv", "a\n\"abc\"x\n");
  r = CsvReader::Open(trailing, Columns({{"a", Type::kString}}));
  ASSERT_TRUE(r.ok());
  s = (*r)->Next();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(trailing + ":2: unexpected character after a closing quote"),
            std::string::npos)
      << s.status();
}

// Issue 12: a job pointing at a file that is not its data learns nothing of
// what the file holds, whatever columns and types it declares.
TEST(CsvReaderTest, ErrorsNeverQuoteTheFilesContents) {
  const std::string path =
      WriteFile("shadow", "root:$6$SECRETHASH:19000:0:99999:7:::\ndaemon:*:SECRET2:0:99999:7:::\n");
  auto r = CsvReader::Open(path, Columns({{"userId", Type::kInt}}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(path + ":1:"));
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr("SECRET")));
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr("root:")));
  // A header guessed right: the rows' values are not quoted either.
  r = CsvReader::Open(path, Columns({{"root:$6$SECRETHASH:19000:0:99999:7:::", Type::kInt}}));
  ASSERT_TRUE(r.ok()) << r.status();
  auto s = (*r)->Next();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(path + ":2:"));
  EXPECT_THAT(std::string(s.status().message()), Not(HasSubstr("SECRET2")));
  EXPECT_THAT(std::string(s.status().message()), Not(HasSubstr("daemon")));
  const std::string quoted = WriteFile("quoted", "a\n\"x\"SECRET3\n");
  r = CsvReader::Open(quoted, Columns({{"a", Type::kString}}));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(std::string((*r)->Next().status().message()), Not(HasSubstr("SECRET3")));
}

TEST(CsvReaderTest, HeaderMismatchListsExpectedAndFound) {
  const std::string path = WriteFile("header.csv", "userId,movieId,rating\n1,2,3\n");
  auto r = CsvReader::Open(path, Columns({{"userId", Type::kInt}, {"rating", Type::kFloat},
                                          {"movieId", Type::kInt}}));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_EQ(r.status().message(),
            path + ":1: the header row does not match the data source's columns [userId, rating, "
                   "movieId] (names and order must match): column 2 is not 'rating'");

  const std::string empty = WriteFile("empty.csv", "");
  r = CsvReader::Open(empty, Columns({{"a", Type::kInt}}));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
}

TEST(CsvReaderTest, MissingFileIsNotFound) {
  auto r = CsvReader::Open("/nonexistent/x.csv", Columns({{"a", Type::kInt}}));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsNotFound(r.status()));
  EXPECT_EQ(r.status().message(),
            "cannot open data file '/nonexistent/x.csv': No such file or directory");
}

// Records straddle the 1 MiB read blocks; every one must come back intact.
TEST(CsvReaderTest, ManyRowsAcrossBlocksAreFast) {
  std::string content = "i,s\n";
  const int kRows = 200000;
  for (int i = 0; i < kRows; ++i) content += std::to_string(i) + ",\"v," + std::to_string(i) + "\"\n";
  const std::string path = WriteFile("many.csv", content);
  const auto start = std::chrono::steady_clock::now();
  auto r = CsvReader::Open(path, Columns({{"i", Type::kInt}, {"s", Type::kString}}));
  ASSERT_TRUE(r.ok());
  int n = 0;
  while (true) {
    auto got = (*r)->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) break;
    ASSERT_EQ((*r)->field(0).int_value, n);
    ASSERT_EQ((*r)->field(1).text, "v," + std::to_string(n));
    ++n;
  }
  EXPECT_EQ(n, kRows);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0) << "reading " << content.size() << " bytes";
}

std::string Gzip(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())),
            static_cast<int>(content.size()));
  EXPECT_EQ(gzclose(f), Z_OK);
  return path;
}

// Criteo's layout: no header, tabs, empty fields missing, gzip.
TEST(CsvReaderTest, HeaderlessTabSeparatedGzip) {
  std::string content;
  const int kRows = 50000;  // past one read block once decompressed
  for (int i = 0; i < kRows; ++i) {
    content += std::to_string(i % 2) + "\t" + (i % 3 == 0 ? "" : std::to_string(i)) +
               "\t05db9164\t\n";
  }
  const std::string path = Gzip("criteo.tsv.gz", content);
  CsvOptions options;
  options.delimiter = '\t';
  options.header = false;
  auto r = CsvReader::Open(path,
                           Columns({{"label", Type::kInt}, {"I1", Type::kInt},
                                    {"C1", Type::kString}, {"C2", Type::kString}}),
                           options);
  ASSERT_TRUE(r.ok()) << r.status();
  int n = 0;
  while (true) {
    auto got = (*r)->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) break;
    ASSERT_EQ((*r)->row(), n);
    ASSERT_EQ((*r)->line(), n + 1) << "no header: the first record is line 1";
    ASSERT_EQ((*r)->field(0).int_value, n % 2);
    ASSERT_EQ((*r)->field(1).missing, n % 3 == 0);
    if (n % 3 != 0) {
      ASSERT_EQ((*r)->field(1).int_value, n);
    }
    ASSERT_EQ((*r)->field(2).text, "05db9164");
    ASSERT_TRUE((*r)->field(3).missing);
    ++n;
  }
  EXPECT_EQ(n, kRows);

  // Commas are data under a tab delimiter; a plain file reads the same way.
  const std::string plain = WriteFile("plain.tsv", "a,b\t1\n");
  auto p = CsvReader::Open(plain, Columns({{"s", Type::kString}, {"n", Type::kInt}}), options);
  ASSERT_TRUE(p.ok()) << p.status();
  auto got = (*p)->Next();
  ASSERT_TRUE(got.ok() && *got);
  EXPECT_EQ((*p)->field(0).text, "a,b");
  EXPECT_EQ((*p)->field(1).int_value, 1);
}

TEST(CsvReaderTest, GzipWithHeaderAndErrorsNameTheLine) {
  const std::string path = Gzip("typed.csv.gz", "a;b\n1;x\n2;3\n");
  CsvOptions options;
  options.delimiter = ';';
  auto r = CsvReader::Open(path, Columns({{"a", Type::kInt}, {"b", Type::kInt}}), options);
  ASSERT_TRUE(r.ok()) << r.status();
  auto got = (*r)->Next();
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr(path + ":2: column 'b' (field 2): expected an int"));
  // Without `header`, a header row is data: here a type error on line 1.
  options.header = false;
  r = CsvReader::Open(path, Columns({{"a", Type::kInt}, {"b", Type::kInt}}), options);
  ASSERT_TRUE(r.ok());
  got = (*r)->Next();
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(path + ":1: column 'a'"));
}

TEST(CsvReaderTest, TruncatedGzipIsAReadError) {
  std::string content;
  for (int i = 0; i < 20000; ++i) content += std::to_string(i * 7919) + "\n";
  const std::string whole = Gzip("whole.csv.gz", "n\n" + content);
  std::ifstream in(whole, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut = WriteFile("cut.csv.gz", bytes.substr(0, bytes.size() / 2));
  auto r = CsvReader::Open(cut, Columns({{"n", Type::kInt}}));
  ASSERT_TRUE(r.ok()) << r.status();
  absl::Status error;
  for (int i = 0; i <= 20000; ++i) {
    auto got = (*r)->Next();
    if (!got.ok()) {
      error = got.status();
      break;
    }
    ASSERT_TRUE(*got) << "a truncated file must not end cleanly";
  }
  EXPECT_TRUE(absl::IsInvalidArgument(error)) << error;
  EXPECT_THAT(std::string(error.message()), HasSubstr(": cannot read the file: gzip:"));
  EXPECT_EQ(error.message().rfind(cut + ":", 0), 0u) << "the message starts with the path";
}

}  // namespace
}  // namespace pscluster
