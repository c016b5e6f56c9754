// Fuzz target for the CSV reader (common/csv_reader.h) on a file holding the
// input.
//
// Input: [byte 0: bits 0-1 the number of columns - 1; bit 2 set: tab
//        delimited; bit 3 set: no header row] [byte 1: the column types, two
//        bits each: 0 int, 1 float, 2 or 3 string] [the file's bytes, read
//        as gzip when they start with gzip's magic bytes]
// The columns are named a, b, c, d. Any file must give records or
// INVALID_ARGUMENT "PATH:..." — never a crash or a sanitizer report. Every
// record has its declared fields, each typed value agrees with its text,
// rows count up from 0 and lines never go back; and a file read to its end
// round-trips: written back with every present field quoted, it reads as the
// same records.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/csv_reader.h"
#include "common/job_spec.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/memfd_file.h"

namespace pscluster {
namespace {

constexpr int kMaxRecords = 4096;

struct Field {
  bool missing;
  std::string text;
  // A missing field's text (empty or NA) is not part of its value.
  bool operator==(const Field& o) const {
    return missing == o.missing && (missing || text == o.text);
  }
};
using Record = std::vector<Field>;

// Reads every record of `path`; false (and the records before it) on error.
bool ReadAll(const std::string& path, const std::vector<ColumnSpec>& columns,
             const CsvOptions& options, std::vector<Record>* records) {
  absl::StatusOr<std::unique_ptr<CsvReader>> reader = CsvReader::Open(path, columns, options);
  if (!reader.ok()) {
    FUZZ_CHECK(reader.status().code() == absl::StatusCode::kInvalidArgument,
               reader.status().ToString());
    FUZZ_CHECK(reader.status().message().rfind(path, 0) == 0, reader.status().ToString());
    return false;
  }
  CsvReader& csv = **reader;
  int64_t last_line = options.header ? 1 : 0;
  while (records->size() < kMaxRecords) {
    absl::StatusOr<bool> next = csv.Next();
    if (!next.ok()) {
      FUZZ_CHECK(next.status().code() == absl::StatusCode::kInvalidArgument,
                 next.status().ToString());
      FUZZ_CHECK(next.status().message().rfind(path, 0) == 0, next.status().ToString());
      return false;
    }
    if (!*next) return true;
    FUZZ_CHECK(csv.row() == static_cast<int64_t>(records->size()),
               absl::StrCat("row ", csv.row(), " after ", records->size(), " records"));
    FUZZ_CHECK(csv.line() > last_line, absl::StrCat("line ", csv.line(), " after ", last_line));
    last_line = csv.line();
    Record record;
    for (size_t i = 0; i < columns.size(); ++i) {
      const CsvField& f = csv.field(static_cast<int>(i));
      record.push_back({f.missing, std::string(f.text)});
      if (f.missing) continue;
      if (columns[i].type == ColumnSpec::Type::kInt) {
        int64_t v = 0;
        FUZZ_CHECK(absl::SimpleAtoi(f.text, &v) && v == f.int_value,
                   absl::StrCat("int field '", f.text, "' read as ", f.int_value));
      } else if (columns[i].type == ColumnSpec::Type::kFloat) {
        double v = 0;
        FUZZ_CHECK(absl::SimpleAtod(f.text, &v) &&
                       (v == f.float_value || (std::isnan(v) && std::isnan(f.float_value))),
                   absl::StrCat("float field '", f.text, "' read as ", f.float_value));
      }
    }
    records->push_back(std::move(record));
  }
  return false;  // too many records for a round trip; not an error
}

std::string Quote(const std::string& text) {
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

// The records as a CSV file: present fields quoted, missing ones an unquoted
// NA (not empty: a record of one missing field would be a blank line).
std::string Write(const std::vector<ColumnSpec>& columns, const CsvOptions& options,
                  const std::vector<Record>& records) {
  const std::string delimiter(1, options.delimiter);
  std::string out;
  if (options.header) {
    for (size_t i = 0; i < columns.size(); ++i) {
      absl::StrAppend(&out, i ? delimiter : "", columns[i].name);
    }
    out += "\r\n";
  }
  for (const Record& record : records) {
    for (size_t i = 0; i < record.size(); ++i) {
      absl::StrAppend(&out, i ? delimiter : "", record[i].missing ? "NA" : Quote(record[i].text));
    }
    out += "\n";
  }
  return out;
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;  // NOLINT(build/namespaces): a fuzz entry point
  if (size < 2) return 0;
  std::vector<ColumnSpec> columns(1 + data[0] % 4);
  CsvOptions options;
  if (data[0] & 4) options.delimiter = '\t';
  options.header = (data[0] & 8) == 0;
  for (size_t i = 0; i < columns.size(); ++i) {
    columns[i].name = std::string(1, static_cast<char>('a' + i));
    const int type = (data[1] >> (2 * i)) & 3;
    columns[i].type = type == 0   ? ColumnSpec::Type::kInt
                      : type == 1 ? ColumnSpec::Type::kFloat
                                  : ColumnSpec::Type::kString;
  }
  fuzz::MemFile mem(data + 2, size - 2);
  std::vector<Record> records;
  if (!ReadAll(mem.path(), columns, options, &records)) return 0;

  const std::string text = Write(columns, options, records);
  fuzz::MemFile again_file(text.data(), text.size());
  std::vector<Record> again;
  FUZZ_CHECK(ReadAll(again_file.path(), columns, options, &again),
             absl::StrCat("the records written back do not read:\n", text));
  FUZZ_CHECK(again == records, absl::StrCat("the records changed in a round trip:\n", text));
  return 0;
}
