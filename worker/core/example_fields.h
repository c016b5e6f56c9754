// ExampleFields: the columns of a job's source read out of a serialized
// tf.Example (protos/example.proto, wire-compatible with TF's) without
// building the message: one pass over its bytes with protobuf's
// CodedInputStream, the features looked up by name in a table made once.
// Parsing the message instead costs a map node, a key string and a Feature
// per feature of every record (about 200 allocations for a Criteo row),
// which made streaming TFRecord slower than the in-memory path.
//
// The values read are as a parsed Example gives them: a feature absent, or
// with no values, is missing; an int64_list or float_list column takes its
// first value; a bytes_list column its values joined by '|' (one value:
// itself); a feature named twice takes its last entry (a proto3 map). A
// feature whose kind does not fit its column's type is INVALID_ARGUMENT
// naming it; bytes that are not an Example are INVALID_ARGUMENT.
//
// Thread-safety: thread-compatible; one per closure's reading thread.
#ifndef PSCLUSTER_WORKER_CORE_EXAMPLE_FIELDS_H_
#define PSCLUSTER_WORKER_CORE_EXAMPLE_FIELDS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/csv_reader.h"
#include "common/job_spec.h"

namespace pscluster {

class ExampleFields {
 public:
  // `columns` must outlive this.
  explicit ExampleFields(const std::vector<ColumnSpec>& columns);

  // Fills (*fields)[i] for columns[i] from `record`. A field's text points
  // into `record` or into this object's storage: valid until the next Read
  // and while `record` lives.
  absl::Status Read(absl::string_view record, std::vector<CsvField>* fields);

 private:
  // A feature's value as found in the record (its last entry wins).
  struct Found {
    int kind = 0;  // Feature's oneof field number: 1 bytes, 2 float, 3 int64; 0 none
    absl::string_view list;  // the list message's bytes
  };

  const std::vector<ColumnSpec>& columns_;
  absl::flat_hash_map<std::string, int> index_;  // feature name -> column
  std::vector<Found> found_;
  std::vector<std::string> joined_;  // bytes_list values joined, per column
  std::vector<std::string> numbers_;  // a number read into a string column
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_EXAMPLE_FIELDS_H_
