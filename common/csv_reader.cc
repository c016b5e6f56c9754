#include "common/csv_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

constexpr size_t kBlockBytes = 1 << 20;

const char* TypeName(ColumnSpec::Type t) {
  switch (t) {
    case ColumnSpec::Type::kInt:
      return "an int";
    case ColumnSpec::Type::kFloat:
      return "a float";
    case ColumnSpec::Type::kString:
      return "a string";
  }
  return "?";
}

// Types field `f` (its text set) as `type`: false if it does not parse.
bool TypeField(ColumnSpec::Type type, bool quoted, CsvField* f) {
  f->missing = !quoted && (f->text.empty() || f->text == "NA");
  f->int_value = 0;
  f->float_value = 0;
  if (f->missing) return true;
  switch (type) {
    case ColumnSpec::Type::kInt:
      return absl::SimpleAtoi(f->text, &f->int_value);
    case ColumnSpec::Type::kFloat:
      return absl::SimpleAtod(f->text, &f->float_value);
    case ColumnSpec::Type::kString:
      break;
  }
  return true;
}

}  // namespace

absl::Status ParseCsvLine(absl::string_view line, const std::vector<ColumnSpec>& columns,
                          char delimiter, std::vector<CsvField>* fields) {
  fields->resize(columns.size());
  size_t begin = 0;
  for (size_t i = 0; i < columns.size(); ++i) {
    const size_t end = i + 1 < columns.size() ? line.find(delimiter, begin) : line.size();
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected ", columns.size(), " fields, found ", i + 1));
    }
    CsvField& f = (*fields)[i];
    f.text = line.substr(begin, end - begin);
    if (!f.text.empty() && f.text.front() == '"') {
      return absl::InvalidArgumentError(absl::StrCat(
          "column '", columns[i].name, "' (field ", i + 1, "): a quoted field (streaming "
          "input reads one line per record, without quotes)"));
    }
    if (i + 1 == columns.size() && f.text.find(delimiter) != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("expected ", columns.size(),
                                                     " fields, found more"));
    }
    if (!TypeField(columns[i].type, /*quoted=*/false, &f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column '", columns[i].name, "' (field ", i + 1, "): expected ",
          TypeName(columns[i].type), ", found ", f.text.size(), " bytes that are not"));
    }
    begin = end + 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CsvReader>> CsvReader::Open(const std::string& path,
                                                           std::vector<ColumnSpec> columns,
                                                           CsvOptions options) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open data file '", path, "': ",
                                            errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(file, kBlockBytes);
  std::unique_ptr<CsvReader> reader(new CsvReader(file, path, std::move(columns), options));
  if (!options.header) return reader;
  ASSIGN_OR_RETURN(bool got, reader->ReadRecord());
  if (!got) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the file is empty; expected a header row"));
  }
  std::vector<std::string> found;
  for (size_t i = 0; i < reader->ends_.size(); ++i) {
    const size_t begin = i == 0 ? 0 : reader->ends_[i - 1];
    std::string name = reader->record_.substr(begin, reader->ends_[i] - begin);
    // A UTF-8 byte order mark (spreadsheet exports) is not part of the name.
    if (i == 0 && name.rfind("\xEF\xBB\xBF", 0) == 0) name.erase(0, 3);
    found.push_back(std::move(name));
  }
  std::vector<std::string> expected;
  for (const ColumnSpec& c : reader->columns_) expected.push_back(c.name);
  if (found != expected) {
    // Which column differs, never what the file holds there: a job naming a
    // file that is not its data must not learn the file's first line.
    size_t differs = 0;
    while (differs < found.size() && differs < expected.size() &&
           found[differs] == expected[differs]) {
      ++differs;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", reader->record_line_, ": the header row does not match the data source's "
        "columns [", absl::StrJoin(expected, ", "), "] (names and order must match): ",
        differs < expected.size()
            ? absl::StrCat("column ", differs + 1, " is not '", expected[differs], "'")
            : absl::StrCat("it has ", found.size(), " columns, not ", expected.size())));
  }
  return reader;
}

CsvReader::CsvReader(void* file, std::string path, std::vector<ColumnSpec> columns,
                     CsvOptions options)
    : file_(file),
      path_(std::move(path)),
      columns_(std::move(columns)),
      options_(options),
      buffer_(kBlockBytes),
      fields_(columns_.size()) {}

CsvReader::~CsvReader() { gzclose(static_cast<gzFile>(file_)); }

int CsvReader::ColumnIndex(absl::string_view name) const {
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string CsvReader::Where() const { return absl::StrCat(path_, ":", record_line_, ": "); }

void CsvReader::Fill() {
  pos_ = 0;
  gzFile file = static_cast<gzFile>(file_);
  errno = 0;
  const int n = gzread(file, buffer_.data(), static_cast<unsigned>(buffer_.size()));
  size_ = n > 0 ? static_cast<size_t>(n) : 0;
  if (n <= 0) {
    eof_ = true;
    // A truncated gzip stream ends with Z_BUF_ERROR, a corrupt one with
    // Z_DATA_ERROR; both are read errors, not the end of the data.
    int code = Z_OK;
    const char* message = gzerror(file, &code);
    if (code == Z_ERRNO) {
      read_error_ = std::strerror(errno != 0 ? errno : EIO);
    } else if (code != Z_OK) {
      read_error_ = absl::StrCat("gzip: ", message != nullptr ? message : "read error");
    }
  }
}

inline int CsvReader::Peek() {
  if (pos_ == size_) {
    if (eof_) return -1;
    Fill();
    if (eof_) return -1;
  }
  return static_cast<unsigned char>(buffer_[pos_]);
}

inline int CsvReader::Get() {
  const int c = Peek();
  if (c != -1) {
    ++pos_;
    if (c == '\n') ++line_;
  }
  return c;
}

absl::StatusOr<bool> CsvReader::ReadRecord() {
  const int delimiter = static_cast<unsigned char>(options_.delimiter);
  while (true) {
    record_.clear();
    ends_.clear();
    quoted_.clear();
    record_line_ = line_;
    int c = Get();
    if (c == -1) break;
    while (true) {
      bool quoted = false;
      if (c == '"') {
        quoted = true;
        while (true) {
          c = Get();
          if (c == -1) {
            if (!read_error_.empty()) break;
            return absl::InvalidArgumentError(absl::StrCat(
                Where(), "a quoted field is not closed before the end of the file"));
          }
          if (c == '"') {
            if (Peek() != '"') {
              c = Get();
              break;
            }
            Get();
          }
          record_.push_back(static_cast<char>(c));
        }
        if (c == '\r' && Peek() == '\n') c = Get();
        if (c != delimiter && c != '\n' && c != -1) {
          return absl::InvalidArgumentError(absl::StrCat(
              path_, ":", line_, ": unexpected character after a closing quote (expected the "
              "delimiter or the end of the line; a quote inside a quoted field is written \"\")"));
        }
      } else {
        while (c != delimiter && c != '\n' && c != -1) {
          if (c == '\r' && Peek() == '\n') {
            c = Get();
            break;
          }
          record_.push_back(static_cast<char>(c));
          c = Get();
        }
      }
      ends_.push_back(record_.size());
      quoted_.push_back(quoted);
      if (c != delimiter) break;
      c = Get();
    }
    if (!read_error_.empty()) break;
    const bool blank = ends_.size() == 1 && !quoted_[0] && record_.empty();
    if (!blank) return true;
  }
  if (!read_error_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ":", line_, ": cannot read the file: ", read_error_));
  }
  return false;
}

absl::StatusOr<bool> CsvReader::Next() {
  ASSIGN_OR_RETURN(bool got, ReadRecord());
  if (!got) return false;
  ++row_;
  if (ends_.size() != columns_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), "expected ", columns_.size(),
                                                   " fields, found ", ends_.size()));
  }
  size_t begin = 0;
  for (size_t i = 0; i < columns_.size(); ++i) {
    CsvField& f = fields_[i];
    f.text = absl::string_view(record_).substr(begin, ends_[i] - begin);
    begin = ends_[i];
    if (!TypeField(columns_[i].type, quoted_[i], &f)) {
      // The value itself is not quoted (see Open).
      return absl::InvalidArgumentError(absl::StrCat(Where(), "column '", columns_[i].name,
                                                     "' (field ", i + 1, "): expected ",
                                                     TypeName(columns_[i].type), ", found ",
                                                     f.text.size(), " bytes that are not"));
    }
  }
  return true;
}

}  // namespace pscluster
