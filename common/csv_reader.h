// A streaming reader for typed CSV files (RFC 4180), plain or gzip.
//
// Fields are separated by CsvOptions::delimiter (',' unless set, e.g. '\t'
// for Criteo's TSV) and records by LF or CRLF. A field may be quoted with
// '"'; a quoted field may hold delimiters, line breaks and doubled quotes
// ("" stands for one "). With CsvOptions::header (the default) the first
// record is the header: it must name exactly the declared columns, in order;
// without it every record is data and the columns are the declared ones, in
// file order. Each data field is typed as its column declares:
//   int     a decimal int64            (e.g. 42, -7)
//   float   a decimal double           (e.g. 2.5, 1e-3)
//   string  the field's text, unquoted
// R writes a missing value as an unquoted NA (write.csv), so an unquoted NA
// or an empty field is a missing value in every column type; a quoted "NA" or
// "" is the string NA or the empty string. Blank lines are skipped.
//
// The file is read through zlib's gzread in fixed-size blocks, once, so a
// gzip file (e.g. train.tsv.gz; concatenated gzip members too) is
// decompressed as it is read and any other file is read as it is; memory
// stays O(longest record).
//
// Thread-safety: a CsvReader is not thread-safe; use one per thread.
#ifndef PSCLUSTER_COMMON_CSV_READER_H_
#define PSCLUSTER_COMMON_CSV_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"

namespace pscluster {

// One typed field of the current record.
struct CsvField {
  bool missing = true;
  int64_t int_value = 0;     // kInt columns
  double float_value = 0;    // kFloat columns
  absl::string_view text;     // every column: the field's unquoted text
};

// How a file is laid out.
struct CsvOptions {
  // The field delimiter: one byte other than '"', CR or LF.
  char delimiter = ',';
  // Whether the first record is a header row naming the columns.
  bool header = true;
};

// Splits one line (no line break; no quoted fields) at `delimiter` into
// `fields`, typed as `columns` declare, the way CsvReader types a record
// (an empty field or NA is missing). For streaming input, which reads a
// text file one line per record (worker/core/stream_batches.h). The fields'
// text points into `line`. INVALID_ARGUMENT "column 'C' (field N): ..." or
// "expected N fields, found M", without a place (the caller names it).
absl::Status ParseCsvLine(absl::string_view line, const std::vector<ColumnSpec>& columns,
                          char delimiter, std::vector<CsvField>* fields);

class CsvReader {
 public:
  // Opens `path` and, with options.header, checks its header against
  // `columns`. REQUIRES: options.delimiter is valid (see CsvOptions).
  // Returns:
  //   NOT_FOUND         "cannot open data file 'PATH': <strerror>"
  //   INVALID_ARGUMENT  "PATH:1: the header row does not match ...", or an
  //                     empty file (with a header), or a read error
  //                     ("PATH:LINE: cannot read the file: gzip: ..." for a
  //                     corrupt or truncated gzip stream).
  static absl::StatusOr<std::unique_ptr<CsvReader>> Open(const std::string& path,
                                                         std::vector<ColumnSpec> columns,
                                                         CsvOptions options = CsvOptions());
  ~CsvReader();
  CsvReader(const CsvReader&) = delete;
  CsvReader& operator=(const CsvReader&) = delete;

  // Reads the next data record. Returns true when one was read, false at the
  // end of the file. INVALID_ARGUMENT "PATH:LINE: ..." for a record with the
  // wrong number of fields, a malformed quoted field, or a value that is not
  // of its column's type ("column 'x': 'abc' is not an int"), or a read
  // error. After an error the reader must not be used again.
  absl::StatusOr<bool> Next();

  // The current record's field for column `index` (in declared order).
  // REQUIRES: the last Next() returned true; 0 <= index < columns().size().
  // The text views stay valid until the next call to Next().
  const CsvField& field(int index) const { return fields_[index]; }
  // Every field of the current record, by column.
  const std::vector<CsvField>& fields() const { return fields_; }

  // The index of the column named `name`, or -1.
  int ColumnIndex(absl::string_view name) const;

  const std::vector<ColumnSpec>& columns() const { return columns_; }
  const std::string& path() const { return path_; }
  // 1-based line of the file on which the current record starts.
  int64_t line() const { return record_line_; }
  // 0-based index of the current data record (the header is not counted).
  int64_t row() const { return row_ - 1; }

  // "PATH:LINE: " for the current record, to prefix error messages.
  std::string Where() const;

 private:
  CsvReader(void* file, std::string path, std::vector<ColumnSpec> columns, CsvOptions options);

  // Reads one record's raw fields into record_/ends_/quoted_. Returns false
  // at the end of the file (no record).
  absl::StatusOr<bool> ReadRecord();
  // The next byte, or -1 at the end of the file (or on a read error, which
  // is kept in read_error_).
  int Get();
  int Peek();
  void Fill();

  void* file_;  // a gzFile (zlib.h stays out of this header)
  std::string path_;
  std::vector<ColumnSpec> columns_;
  CsvOptions options_;

  std::vector<char> buffer_;
  size_t pos_ = 0;
  size_t size_ = 0;
  bool eof_ = false;
  std::string read_error_;  // non-empty after a read error

  int64_t line_ = 1;          // line of the next byte
  int64_t record_line_ = 0;
  int64_t row_ = 0;

  std::string record_;         // the current record's unquoted fields, back to back
  std::vector<size_t> ends_;   // end offset of each field in record_
  std::vector<bool> quoted_;   // whether each field was quoted
  std::vector<CsvField> fields_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_CSV_READER_H_
