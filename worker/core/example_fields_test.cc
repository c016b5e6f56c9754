#include "worker/core/example_fields.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protos/example.pb.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

ColumnSpec Column(const std::string& name, ColumnSpec::Type type) {
  ColumnSpec c;
  c.name = name;
  c.type = type;
  return c;
}

std::vector<ColumnSpec> Columns() {
  return {Column("label", ColumnSpec::Type::kInt), Column("I1", ColumnSpec::Type::kInt),
          Column("f", ColumnSpec::Type::kFloat), Column("C1", ColumnSpec::Type::kString),
          Column("tags", ColumnSpec::Type::kString), Column("n_as_text", ColumnSpec::Type::kString),
          Column("absent", ColumnSpec::Type::kInt), Column("empty", ColumnSpec::Type::kString)};
}

tensorflow::Example Sample() {
  tensorflow::Example e;
  auto& m = *e.mutable_features()->mutable_feature();
  m["label"].mutable_int64_list()->add_value(1);
  m["I1"].mutable_int64_list()->add_value(-7);  // negative: a ten-byte varint
  m["I1"].mutable_int64_list()->add_value(99);
  m["f"].mutable_float_list()->add_value(2.5f);
  m["C1"].mutable_bytes_list()->add_value("68fd1e64");
  m["tags"].mutable_bytes_list()->add_value("a");
  m["tags"].mutable_bytes_list()->add_value("b");
  m["tags"].mutable_bytes_list()->add_value("c");
  m["n_as_text"].mutable_int64_list()->add_value(42);
  m["empty"].mutable_bytes_list();  // no values: missing
  m["not_a_column"].mutable_bytes_list()->add_value("ignored");
  return e;
}

TEST(ExampleFieldsTest, ReadsWhatAParsedExampleHolds) {
  const std::vector<ColumnSpec> columns = Columns();
  ExampleFields reader(columns);
  const std::string record = Sample().SerializeAsString();
  std::vector<CsvField> f;
  ASSERT_TRUE(reader.Read(record, &f).ok());
  ASSERT_EQ(f.size(), columns.size());
  EXPECT_FALSE(f[0].missing);
  EXPECT_EQ(f[0].int_value, 1);
  EXPECT_EQ(f[1].int_value, -7);  // the first value
  EXPECT_DOUBLE_EQ(f[1].float_value, -7.0);
  EXPECT_DOUBLE_EQ(f[2].float_value, 2.5);
  EXPECT_EQ(f[3].text, "68fd1e64");
  EXPECT_EQ(f[4].text, "a|b|c");
  EXPECT_EQ(f[5].text, "42");
  EXPECT_TRUE(f[6].missing);
  EXPECT_TRUE(f[7].missing);

  // The same reader again, on another record: nothing carried over.
  tensorflow::Example other;
  (*other.mutable_features()->mutable_feature())["C1"].mutable_bytes_list()->add_value("x");
  const std::string second = other.SerializeAsString();
  ASSERT_TRUE(reader.Read(second, &f).ok());
  EXPECT_TRUE(f[0].missing);
  EXPECT_TRUE(f[4].missing);
  EXPECT_EQ(f[3].text, "x");
}

TEST(ExampleFieldsTest, UnpackedListsAndRepeatedEntriesParseAsProtobufDoes) {
  const std::vector<ColumnSpec> columns = Columns();
  ExampleFields reader(columns);
  // Int64List { value: 5 } unpacked (tag 0x08), and a FloatList unpacked
  // (tag 0x0d, fixed32): old writers emit these; protobuf accepts both.
  std::string int_list = std::string("\x08\x05", 2);
  std::string float_list = "\x0d" + std::string("\x00\x00\x20\x40", 4);  // 2.5f
  tensorflow::Feature fi, ff;
  ASSERT_TRUE(fi.mutable_int64_list()->ParseFromString(int_list));
  ASSERT_TRUE(ff.mutable_float_list()->ParseFromString(float_list));
  auto entry = [](const std::string& key, const std::string& feature) {
    std::string e = "\x0a" + std::string(1, static_cast<char>(key.size())) + key + "\x12" +
                    std::string(1, static_cast<char>(feature.size())) + feature;
    return "\x0a" + std::string(1, static_cast<char>(e.size())) + e;
  };
  const std::string feature_i = "\x1a" + std::string(1, static_cast<char>(int_list.size())) +
                                int_list;  // Feature.int64_list
  const std::string feature_f = "\x12" + std::string(1, static_cast<char>(float_list.size())) +
                                float_list;
  tensorflow::Feature later;
  later.mutable_int64_list()->add_value(8);
  // "I1" twice: the later entry wins, as in a proto3 map.
  const std::string features =
      entry("I1", feature_i) + entry("f", feature_f) + entry("I1", later.SerializeAsString());
  const std::string record = "\x0a" + std::string(1, static_cast<char>(features.size())) + features;
  tensorflow::Example parsed;
  ASSERT_TRUE(parsed.ParseFromString(record));
  ASSERT_EQ(parsed.features().feature().at("I1").int64_list().value(0), 8);

  std::vector<CsvField> f;
  ASSERT_TRUE(reader.Read(record, &f).ok());
  EXPECT_EQ(f[1].int_value, 8);
  EXPECT_DOUBLE_EQ(f[2].float_value, 2.5);
}

TEST(ExampleFieldsTest, RefusesWhatIsNotAnExampleOrDoesNotFitItsColumn) {
  const std::vector<ColumnSpec> columns = Columns();
  ExampleFields reader(columns);
  std::vector<CsvField> f;
  const std::string record = Sample().SerializeAsString();
  // Truncated anywhere inside: never a crash, an error naming the problem.
  for (size_t n = 1; n < record.size(); ++n) {
    const absl::Status s = reader.Read(absl::string_view(record.data(), n), &f);
    tensorflow::Example e;
    if (e.ParseFromArray(record.data(), static_cast<int>(n))) continue;  // a valid prefix
    EXPECT_FALSE(s.ok()) << "prefix of " << n << " bytes";
  }
  const absl::Status garbage = reader.Read("\xff\xff\xff", &f);
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.message(), HasSubstr("not a tf.Example"));

  std::vector<ColumnSpec> wrong = {Column("f", ColumnSpec::Type::kInt),
                                   Column("C1", ColumnSpec::Type::kFloat)};
  ExampleFields mistyped(wrong);
  const absl::Status s = mistyped.Read(record, &f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("feature 'f' is a float_list but its column is int"));
  std::vector<ColumnSpec> bytes_numeric = {Column("C1", ColumnSpec::Type::kFloat)};
  ExampleFields numeric(bytes_numeric);
  EXPECT_THAT(numeric.Read(record, &f).message(),
              HasSubstr("feature 'C1' is a bytes_list but its column is numeric"));
}

}  // namespace
}  // namespace pscluster
