#include "worker/core/features.h"

#include <xxhash.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

CategoricalFeatureSpec Fixed(const char* name, int64_t vocab, OutOfVocabulary oov) {
  CategoricalFeatureSpec f;
  f.name = name;
  f.column = name;
  f.vocab_size = vocab;
  f.oov = oov;
  return f;
}

CategoricalFeatureSpec Hashed(const char* name) {
  CategoricalFeatureSpec f;
  f.name = name;
  f.column = name;
  f.hashed = true;
  return f;
}

TEST(FeatureHashTest, IsXxh3SeededByTheFeatureName) {
  // Pinned values: ids are keys in PS hash tables and must not change between
  // builds. XXH3_64bits("") is xxhash's published test vector.
  EXPECT_EQ(FeatureSeed(""), 0x2D06800538D394C2ull);
  const uint64_t seed = FeatureSeed("genre");
  EXPECT_EQ(HashStringValue(seed, "Drama"), HashStringValue(FeatureSeed("genre"), "Drama"));
  EXPECT_NE(HashStringValue(seed, "Drama"), HashStringValue(FeatureSeed("genre2"), "Drama"));
  EXPECT_NE(HashIntValue(seed, 1), HashIntValue(seed, 2));
}

TEST(CategoricalEncoderTest, FixedVocabularyErrorAndHash) {
  std::vector<uint64_t> ids;
  CategoricalEncoder strict(Fixed("user", 672, OutOfVocabulary::kError));
  ASSERT_TRUE(strict.AddInt(671, &ids).ok());
  ASSERT_TRUE(strict.AddInt(0, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint64_t>{671, 0}));
  absl::Status s = strict.AddInt(9001, &ids);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message(), "feature 'user': an id outside its vocabulary [0, 672)");
  EXPECT_FALSE(strict.AddInt(-1, &ids).ok());
  EXPECT_EQ(ids.size(), 2u) << "a rejected id adds nothing";

  CategoricalEncoder lenient(Fixed("user", 672, OutOfVocabulary::kHash));
  ids.clear();
  ASSERT_TRUE(lenient.AddInt(9001, &ids).ok());
  ASSERT_TRUE(lenient.AddInt(-5, &ids).ok());
  ASSERT_TRUE(lenient.AddInt(7, &ids).ok());
  EXPECT_EQ(ids[0], HashIntValue(FeatureSeed("user"), 9001) % 672);
  EXPECT_EQ(ids[1], HashIntValue(FeatureSeed("user"), -5) % 672);
  EXPECT_EQ(ids[2], 7u) << "in-vocabulary ids are kept as they are";
}

TEST(CategoricalEncoderTest, StringsAreSplitTrimmedAndHashed) {
  CategoricalFeatureSpec genres = Hashed("genres");
  genres.separator = "|";
  CategoricalEncoder enc(genres);
  std::vector<uint64_t> ids;
  enc.AddString("Action| Comedy ||Drama|", &ids);
  const uint64_t seed = FeatureSeed("genres");
  EXPECT_EQ(ids, (std::vector<uint64_t>{HashStringValue(seed, "Action"),
                                        HashStringValue(seed, "Comedy"),
                                        HashStringValue(seed, "Drama")}));
  ids.clear();
  enc.AddString("  ", &ids);
  EXPECT_TRUE(ids.empty());

  // Without a separator the whole (trimmed) field is one value; with a fixed
  // vocabulary a string is always hashed into it.
  CategoricalEncoder fixed(Fixed("genres", 50, OutOfVocabulary::kError));
  fixed.AddString("Action|Comedy", &ids);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], HashStringValue(seed, "Action|Comedy") % 50);
}

TEST(CategoricalEncoderTest, BucketsAndWholeNumbers) {
  CategoricalFeatureSpec decade = Fixed("decade", 300, OutOfVocabulary::kError);
  decade.bucket_width = 10;
  CategoricalEncoder enc(decade);
  std::vector<uint64_t> ids;
  ASSERT_TRUE(enc.AddInt(1995, &ids).ok());
  ASSERT_TRUE(enc.AddFloat(2009.9, &ids).ok());
  ASSERT_TRUE(enc.AddInt(0, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint64_t>{199, 200, 0}));
  EXPECT_FALSE(enc.AddInt(-1, &ids).ok()) << "floor(-0.1) = -1 is outside [0, 300)";

  CategoricalEncoder plain(Hashed("rating"));
  ids.clear();
  ASSERT_TRUE(plain.AddFloat(4.0, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint64_t>{4}));
  absl::Status s = plain.AddFloat(4.5, &ids);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("not a whole number"), std::string::npos) << s;
  EXPECT_FALSE(plain.AddFloat(std::nan(""), &ids).ok());
  EXPECT_FALSE(plain.AddFloat(1e300, &ids).ok());

  // Hashed: non-negative ints are used as they are, negative ones hashed.
  ASSERT_TRUE(plain.AddInt(-3, &ids).ok());
  EXPECT_EQ(ids.back(), HashIntValue(FeatureSeed("rating"), -3));
}

TEST(InHoldoutTest, FractionOfRowsAndDeterminism) {
  int64_t in = 0;
  const int64_t kRows = 100000;
  for (int64_t r = 0; r < kRows; ++r) in += InHoldout(r, 0.2, 7);
  EXPECT_NEAR(static_cast<double>(in) / kRows, 0.2, 0.005);  // ~4 sigma
  int64_t differ = 0;
  for (int64_t r = 0; r < 1000; ++r) {
    EXPECT_EQ(InHoldout(r, 0.2, 7), InHoldout(r, 0.2, 7));
    differ += InHoldout(r, 0.2, 7) != InHoldout(r, 0.2, 8);
  }
  EXPECT_GT(differ, 100) << "the seed must change the split";
  EXPECT_FALSE(InHoldout(3, 0, 7));
  EXPECT_TRUE(InHoldout(3, 1, 7));
  // A larger fraction's holdout contains a smaller one's (same hash, higher bar).
  for (int64_t r = 0; r < 1000; ++r) {
    if (InHoldout(r, 0.1, 7)) {
      EXPECT_TRUE(InHoldout(r, 0.3, 7));
    }
  }
}

TEST(CategoricalEncoderTest, BoundariesCountTheBoundariesAtOrBelowTheValue) {
  CategoricalFeatureSpec f = Fixed("i1_bucket", 9, OutOfVocabulary::kError);
  f.boundaries = {0, 1, 2, 4, 8, 16, 64, 256};
  CategoricalEncoder e(f);
  std::vector<uint64_t> ids;
  // TF's Bucketized column: (-inf, 0) -> 0, [0, 1) -> 1, ..., [256, inf) -> 8.
  for (double v : {-3.0, 0.0, 0.5, 1.0, 3.0, 4.0, 63.9, 64.0, 255.0, 256.0, 1e9}) {
    ASSERT_TRUE(e.AddFloat(v, &ids).ok()) << v;
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{0, 1, 1, 2, 3, 4, 6, 7, 7, 8, 8}));
  ids.clear();
  ASSERT_TRUE(e.AddInt(-1, &ids).ok());
  ASSERT_TRUE(e.AddInt(16, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint64_t>{0, 6})) << "an int is bucketized the same way";
  absl::Status s = e.AddFloat(std::nan(""), &ids);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message(), "feature 'i1_bucket': a value that is not a number");
  EXPECT_EQ(ids.size(), 2u);
}

CategoricalFeatureSpec Cross(const char* name, std::vector<std::string> columns) {
  CategoricalFeatureSpec f = Hashed(name);
  f.column.clear();
  f.cross = std::move(columns);
  return f;
}

CategoricalEncoder::CrossValue Str(absl::string_view text) {
  CategoricalEncoder::CrossValue v;
  v.type = ColumnSpec::Type::kString;
  v.text = text;
  return v;
}

CategoricalEncoder::CrossValue Int(int64_t n) {
  CategoricalEncoder::CrossValue v;
  v.type = ColumnSpec::Type::kInt;
  v.int_value = n;
  return v;
}

uint64_t Token(int64_t n) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(static_cast<uint64_t>(n) >> (8 * i));
  return XXH3_64bits(b, 8);
}

TEST(CategoricalEncoderTest, CrossIsTheDocumentedHashOfTheValuesTogether) {
  CategoricalEncoder e(Cross("user_x_movie", {"userId", "movieId"}));
  std::vector<uint64_t> ids;
  ASSERT_TRUE(e.AddCross({Str(" ab "), Int(7)}, &ids).ok());
  // features.h: XXH3_withSeed(le64(XXH3("ab")) || le64(XXH3(le64(7))), FeatureSeed(name)).
  unsigned char bytes[16];
  const uint64_t t[2] = {XXH3_64bits("ab", 2), Token(7)};
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < 8; ++i) bytes[8 * k + i] = static_cast<unsigned char>(t[k] >> (8 * i));
  }
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], XXH3_64bits_withSeed(bytes, 16, FeatureSeed("user_x_movie")));
  // Order, feature name and each value matter.
  ASSERT_TRUE(e.AddCross({Str("ab"), Int(8)}, &ids).ok());
  ASSERT_TRUE(e.AddCross({Str("ac"), Int(7)}, &ids).ok());
  CategoricalEncoder other(Cross("other", {"userId", "movieId"}));
  ASSERT_TRUE(other.AddCross({Str("ab"), Int(7)}, &ids).ok());
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 4u);
  // A string empty after trimming is a missing value: no id.
  ids.clear();
  ASSERT_TRUE(e.AddCross({Str("  "), Int(7)}, &ids).ok());
  EXPECT_TRUE(ids.empty());
}

TEST(CategoricalEncoderTest, CrossBucketizesNumbersAndTakesTheVocabulary) {
  // C4 x bucket(I1), bucket(v) = floor(log2(1 + v)): boundaries 2^k - 1.
  CategoricalFeatureSpec f = Cross("c4_x_i1", {"C4", "I1"});
  f.boundaries = {1, 3, 7, 15};
  CategoricalEncoder e(f);
  std::vector<uint64_t> ids;
  for (int64_t v : {3, 6, 7}) ASSERT_TRUE(e.AddCross({Str("a1"), Int(v)}, &ids).ok());
  EXPECT_EQ(ids[0], ids[1]) << "3 and 6 share bucket 2";
  EXPECT_NE(ids[1], ids[2]) << "7 is in bucket 3";

  CategoricalFeatureSpec fixed = Cross("small", {"a", "b"});
  fixed.hashed = false;
  fixed.vocab_size = 10;
  CategoricalEncoder small(fixed);
  CategoricalEncoder hashed(Cross("small", {"a", "b"}));
  ids.clear();
  ASSERT_TRUE(small.AddCross({Int(1), Int(2)}, &ids).ok());
  ASSERT_TRUE(hashed.AddCross({Int(1), Int(2)}, &ids).ok());
  EXPECT_LT(ids[0], 10u);
  EXPECT_EQ(ids[0], ids[1] % 10);

  // An unbucketized float must be a whole number.
  CategoricalEncoder::CrossValue half;
  half.type = ColumnSpec::Type::kFloat;
  half.float_value = 1.5;
  absl::Status s = hashed.AddCross({Int(1), half}, &ids);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(ids.size(), 2u);
}

}  // namespace
}  // namespace pscluster
