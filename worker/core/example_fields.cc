#include "worker/core/example_fields.h"

#include <google/protobuf/io/coded_stream.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

using google::protobuf::io::CodedInputStream;

// Wire types (the protobuf encoding's).
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kDelimited = 2;
constexpr int kFixed32 = 5;

// A cursor over one message's bytes.
class Reader {
 public:
  explicit Reader(absl::string_view bytes)
      : bytes_(bytes),
        in_(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size())) {}

  // The next field's number and wire type; false at the end, or at a bad
  // tag (then ok() is false).
  bool Next(int* field, int* wire_type) {
    if (!ok_ || in_.CurrentPosition() >= static_cast<int>(bytes_.size())) return false;
    const uint32_t tag = in_.ReadTag();
    if ((tag >> 3) == 0) return Fail();  // a bad varint, or field number 0

    *field = static_cast<int>(tag >> 3);
    *wire_type = static_cast<int>(tag & 7);
    return true;
  }
  // A length-delimited field's bytes (views into the record).
  bool Delimited(absl::string_view* out) {
    uint32_t size;
    if (!in_.ReadVarint32(&size)) return Fail();
    const size_t at = static_cast<size_t>(in_.CurrentPosition());
    if (size > bytes_.size() - at) return Fail();
    *out = bytes_.substr(at, size);
    return in_.Skip(static_cast<int>(size)) || Fail();
  }
  bool Varint(uint64_t* v) { return in_.ReadVarint64(v) || Fail(); }
  bool Fixed32(uint32_t* v) { return in_.ReadLittleEndian32(v) || Fail(); }
  // Skips a field of another number; groups (wire types 3, 4) are not
  // Example's and fail.
  bool Skip(int wire_type) {
    uint64_t v;
    uint32_t f;
    absl::string_view d;
    switch (wire_type) {
      case kVarint: return Varint(&v);
      case kFixed64: return in_.Skip(8) || Fail();
      case kDelimited: return Delimited(&d);
      case kFixed32: return Fixed32(&f);
      default: return Fail();
    }
  }
  bool ok() const { return ok_; }

 private:
  bool Fail() {
    ok_ = false;
    return false;
  }

  absl::string_view bytes_;
  CodedInputStream in_;
  bool ok_ = true;
};

// The first value of an Int64List / FloatList (packed or not, in any number
// of runs): false when the list has none.
bool FirstInt64(absl::string_view list, int64_t* value, bool* ok) {
  Reader r(list);
  int field, wt;
  while (r.Next(&field, &wt)) {
    if (field == 1 && wt == kVarint) {
      uint64_t v;
      if (!r.Varint(&v)) break;
      *value = static_cast<int64_t>(v);
      return true;
    }
    if (field == 1 && wt == kDelimited) {
      absl::string_view packed;
      if (!r.Delimited(&packed)) break;
      if (packed.empty()) continue;
      uint64_t v;
      CodedInputStream in(reinterpret_cast<const uint8_t*>(packed.data()),
                          static_cast<int>(packed.size()));
      if (!in.ReadVarint64(&v)) break;
      *value = static_cast<int64_t>(v);
      return true;
    }
    if (!r.Skip(wt)) break;
  }
  *ok = *ok && r.ok();
  return false;
}

bool FirstFloat(absl::string_view list, float* value, bool* ok) {
  Reader r(list);
  int field, wt;
  while (r.Next(&field, &wt)) {
    uint32_t bits;
    if (field == 1 && wt == kFixed32) {
      if (!r.Fixed32(&bits)) break;
      std::memcpy(value, &bits, sizeof(bits));
      return true;
    }
    if (field == 1 && wt == kDelimited) {
      absl::string_view packed;
      if (!r.Delimited(&packed)) break;
      if (packed.empty()) continue;
      if (packed.size() % 4 != 0) {
        *ok = false;
        return false;
      }
      std::memcpy(&bits, packed.data(), sizeof(bits));  // little-endian on the wire
      std::memcpy(value, &bits, sizeof(bits));
      return true;
    }
    if (!r.Skip(wt)) break;
  }
  *ok = *ok && r.ok();
  return false;
}

}  // namespace

ExampleFields::ExampleFields(const std::vector<ColumnSpec>& columns)
    : columns_(columns),
      found_(columns.size()),
      joined_(columns.size()),
      numbers_(columns.size()) {
  for (size_t i = 0; i < columns.size(); ++i) index_[columns[i].name] = static_cast<int>(i);
}

absl::Status ExampleFields::Read(absl::string_view record, std::vector<CsvField>* fields) {
  const auto not_example = [] {
    return absl::InvalidArgumentError("not a tf.Example (its protobuf does not parse)");
  };
  found_.assign(columns_.size(), Found());
  // Example { Features features = 1; }  Features { map<string, Feature>
  // feature = 1; }  (a message field met twice merges: entries accumulate.)
  Reader example(record);
  int field, wt;
  while (example.Next(&field, &wt)) {
    if (field != 1 || wt != kDelimited) {
      if (!example.Skip(wt)) break;
      continue;
    }
    absl::string_view features_bytes;
    if (!example.Delimited(&features_bytes)) break;
    Reader features(features_bytes);
    while (features.Next(&field, &wt)) {
      if (field != 1 || wt != kDelimited) {
        if (!features.Skip(wt)) break;
        continue;
      }
      absl::string_view entry_bytes;
      if (!features.Delimited(&entry_bytes)) break;
      // A map entry: key = 1, value = 2 (the last of each wins).
      absl::string_view key, value;
      Reader entry(entry_bytes);
      while (entry.Next(&field, &wt)) {
        if (field == 1 && wt == kDelimited) {
          if (!entry.Delimited(&key)) break;
        } else if (field == 2 && wt == kDelimited) {
          if (!entry.Delimited(&value)) break;
        } else if (!entry.Skip(wt)) {
          break;
        }
      }
      if (!entry.ok()) return not_example();
      auto it = index_.find(key);
      if (it == index_.end()) continue;
      // Feature { oneof kind { BytesList = 1; FloatList = 2; Int64List = 3 } }
      Found f;
      Reader feature(value);
      while (feature.Next(&field, &wt)) {
        if (field >= 1 && field <= 3 && wt == kDelimited) {
          absl::string_view list;
          if (!feature.Delimited(&list)) break;
          if (f.kind == field) {
            // The same list met twice in one Feature merges them: rare
            // enough (no writer does it) to refuse rather than join.
            return absl::InvalidArgumentError(absl::StrCat(
                "feature '", key, "' holds its list in two parts, which is not supported"));
          }
          f.kind = field;
          f.list = list;
        } else if (!feature.Skip(wt)) {
          break;
        }
      }
      if (!feature.ok()) return not_example();
      found_[it->second] = f;  // a later entry of the same name replaces it
    }
    if (!features.ok()) return not_example();
  }
  if (!example.ok()) return not_example();

  fields->assign(columns_.size(), CsvField());
  bool ok = true;
  for (size_t i = 0; i < columns_.size(); ++i) {
    const ColumnSpec& column = columns_[i];
    const Found& found = found_[i];
    CsvField& f = (*fields)[i];
    switch (found.kind) {
      case 3: {  // int64_list
        if (!FirstInt64(found.list, &f.int_value, &ok)) break;
        f.float_value = static_cast<double>(f.int_value);
        if (column.type == ColumnSpec::Type::kString) {
          numbers_[i] = absl::StrCat(f.int_value);
          f.text = numbers_[i];
        }
        f.missing = false;
        break;
      }
      case 2: {  // float_list
        float v;
        if (!FirstFloat(found.list, &v, &ok)) break;
        if (column.type == ColumnSpec::Type::kInt) {
          return absl::InvalidArgumentError(absl::StrCat(
              "feature '", column.name, "' is a float_list but its column is int"));
        }
        f.float_value = v;
        if (column.type == ColumnSpec::Type::kString) {
          numbers_[i] = absl::StrCat(f.float_value);
          f.text = numbers_[i];
        }
        f.missing = false;
        break;
      }
      case 1: {  // bytes_list: values joined by '|'
        Reader r(found.list);
        int n = 0;
        absl::string_view first;
        while (r.Next(&field, &wt)) {
          absl::string_view v;
          if (field == 1 && wt == kDelimited) {
            if (!r.Delimited(&v)) break;
            if (column.type != ColumnSpec::Type::kString) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "feature '", column.name, "' is a bytes_list but its column is numeric"));
            }
            if (n == 0) {
              first = v;
            } else {
              if (n == 1) joined_[i].assign(first.data(), first.size());
              absl::StrAppend(&joined_[i], "|", v);
            }
            ++n;
          } else if (!r.Skip(wt)) {
            break;
          }
        }
        ok = ok && r.ok();
        if (n == 0) break;
        f.text = n == 1 ? first : absl::string_view(joined_[i]);
        f.missing = false;
        break;
      }
      default:
        break;  // absent, or a Feature with no kind: missing
    }
  }
  if (!ok) return not_example();
  return absl::OkStatus();
}

}  // namespace pscluster
