#include "worker/core/csv_dataset.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "worker/core/dataset.h"
#include "worker/core/features.h"

namespace pscluster {
namespace {

using Type = ColumnSpec::Type;

std::string WriteFile(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// A MovieLens-shaped source: label = rating >= 4.
DataSourceSpec MovieLensSource(const std::string& path) {
  DataSourceSpec s;
  s.format = "csv";
  s.path = path;
  s.columns = {{"userId", Type::kInt},     {"movieId", Type::kInt}, {"rating", Type::kFloat},
               {"timestamp", Type::kInt},  {"year", Type::kInt},    {"genres", Type::kString}};
  s.label_column = "rating";
  s.has_label_threshold = true;
  s.label_threshold = 4;
  return s;
}

ModelSpec MovieLensModel(int64_t users) {
  ModelSpec m;
  CategoricalFeatureSpec user;
  user.name = "user";
  user.column = "userId";
  user.vocab_size = users;
  CategoricalFeatureSpec movie;
  movie.name = "movie";
  movie.column = "movieId";
  movie.hashed = true;
  CategoricalFeatureSpec genres;
  genres.name = "genres";
  genres.hashed = true;
  genres.separator = "|";
  CategoricalFeatureSpec decade;
  decade.name = "decade";
  decade.column = "year";
  decade.vocab_size = 300;
  decade.bucket_width = 10;
  m.categorical = {user, movie, genres, decade};
  m.loss = "sigmoid_cross_entropy";
  return m;
}

const char kSmall[] =
    "\"userId\",\"movieId\",\"rating\",\"timestamp\",\"year\",\"genres\"\n"
    "1,31,2.5,1260759144,1995,\"Drama\"\n"
    "1,1029,4,1260759179,1941,\"Animation|Children|Drama|Musical\"\n"
    "2,108583,NA,1435472609,NA,\"Comedy\"\n"
    "3,162376,4.5,1474255532,NA,\"\"\n";

TEST(LoadCsvDatasetTest, LabelsDenseAndCategoricalColumns) {
  DataSourceSpec src = MovieLensSource(WriteFile("small.csv", kSmall));
  src.dense_columns = {"timestamp", "year"};
  CsvLoadStats stats;
  auto d = LoadCsvDataset(src, MovieLensModel(10), &stats);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(stats.rows_read, 4);
  EXPECT_EQ(stats.missing_label, 1);
  ASSERT_EQ(d->count, 3);
  EXPECT_EQ(d->y, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(d->num_classes, 2);
  EXPECT_EQ(d->features, 2);
  ASSERT_EQ(d->x.size(), 6u);
  EXPECT_FLOAT_EQ(d->x[1], 1995.0f);
  EXPECT_FLOAT_EQ(d->x[5], 0.0f) << "a missing dense value is 0";

  ASSERT_EQ(d->categorical.size(), 4u);
  const CategoricalColumn& user = d->categorical[0];
  EXPECT_EQ(user.offsets, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(user.ids, (std::vector<uint64_t>{1, 1, 3}));
  EXPECT_EQ(d->categorical[1].ids, (std::vector<uint64_t>{31, 1029, 162376}));
  const CategoricalColumn& genres = d->categorical[2];
  EXPECT_EQ(genres.offsets, (std::vector<int64_t>{0, 1, 5, 5})) << "an empty string gives no id";
  EXPECT_EQ(genres.ids[0], HashStringValue(FeatureSeed("genres"), "Drama"));
  EXPECT_EQ(genres.ids[3], genres.ids[0]) << "Drama again, the same id";
  const CategoricalColumn& decade = d->categorical[3];
  EXPECT_EQ(decade.offsets, (std::vector<int64_t>{0, 1, 2, 2})) << "a missing year gives no id";
  EXPECT_EQ(decade.ids, (std::vector<uint64_t>{199, 194}));
}

TEST(LoadCsvDatasetTest, IdOutsideVocabularyNamesFileLineAndFeature) {
  const std::string path = WriteFile("oov.csv", kSmall);
  auto d = LoadCsvDataset(MovieLensSource(path), MovieLensModel(3));
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(d.status()));
  EXPECT_EQ(d.status().message(), path + ":5: feature 'user': an id outside its vocabulary [0, 3)");

  ModelSpec hashed = MovieLensModel(3);
  hashed.categorical[0].oov = OutOfVocabulary::kHash;
  d = LoadCsvDataset(MovieLensSource(path), hashed);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_LT(d->categorical[0].ids[2], 3u);
}

TEST(LoadCsvDatasetTest, ClassIndexLabels) {
  const std::string path = WriteFile("classes.csv", "f,label\n0.5,2\n1.5,0\n2.5,NA\n");
  DataSourceSpec src;
  src.format = "csv";
  src.path = path;
  src.columns = {{"f", Type::kFloat}, {"label", Type::kInt}};
  src.label_column = "label";
  src.dense_columns = {"f"};
  ModelSpec m;
  m.dense_inputs = 1;
  auto d = LoadCsvDataset(src, m);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->y, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(d->num_classes, 3);
  EXPECT_EQ(d->x, (std::vector<float>{0.5f, 1.5f}));
  EXPECT_TRUE(d->categorical.empty());

  src.path = WriteFile("badclass.csv", "f,label\n0.5,-1\n");
  d = LoadCsvDataset(src, m);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            src.path + ":2: label column 'label': expected a class index (0, 1, ...)");
}

TEST(LoadCsvDatasetTest, UnlabelledRowsLoadWithLabelZero) {
  // Rows to predict: no label column at all, every row kept.
  const std::string path = WriteFile("unlabelled.csv", "f\n0.5\n1.5\nNA\n");
  DataSourceSpec src;
  src.format = "csv";
  src.path = path;
  src.columns = {{"f", Type::kFloat}};
  src.labelled = false;
  src.dense_columns = {"f"};
  ModelSpec m;
  m.dense_inputs = 1;
  CsvLoadStats stats;
  auto d = LoadCsvDataset(src, m, &stats);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->y, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(d->x, (std::vector<float>{0.5f, 1.5f, 0.0f}));  // NA: a missing value is 0
  EXPECT_EQ(stats.missing_label, 0);
}

TEST(LoadCsvDatasetTest, HoldoutSplitPartsAreDisjointAndLimitComesAfter) {
  std::string content = "id,label\n";
  for (int i = 0; i < 2000; ++i) content += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  DataSourceSpec src;
  src.format = "csv";
  src.path = WriteFile("split.csv", content);
  src.columns = {{"id", Type::kInt}, {"label", Type::kInt}};
  src.label_column = "label";
  src.holdout_fraction = 0.25;
  src.holdout_seed = 11;
  ModelSpec m;
  CategoricalFeatureSpec id;
  id.name = "id";
  id.hashed = true;
  m.categorical = {id};

  auto train = LoadCsvDataset(src, m);
  src.holdout_part = true;
  auto holdout = LoadCsvDataset(src, m);
  ASSERT_TRUE(train.ok() && holdout.ok());
  EXPECT_EQ(train->count + holdout->count, 2000);
  EXPECT_NEAR(holdout->count, 500, 80);
  std::set<uint64_t> seen(train->categorical[0].ids.begin(), train->categorical[0].ids.end());
  for (uint64_t row : holdout->categorical[0].ids) {
    EXPECT_EQ(seen.count(row), 0u) << "row " << row << " is in both parts";
    EXPECT_TRUE(InHoldout(static_cast<int64_t>(row), 0.25, 11));
    seen.insert(row);
  }
  EXPECT_EQ(seen.size(), 2000u);

  src.limit = 10;
  auto limited = LoadCsvDataset(src, m);
  ASSERT_TRUE(limited.ok());
  ASSERT_EQ(limited->count, 10);
  EXPECT_EQ(limited->categorical[0].ids,
            std::vector<uint64_t>(holdout->categorical[0].ids.begin(),
                                  holdout->categorical[0].ids.begin() + 10))
      << "limit takes the first examples of the part";
}

// Criteo-shaped: no header, tabs, empty fields missing; log1p counts, a
// cross and explicit boundaries.
TEST(LoadCsvDatasetTest, HeaderlessTsvWithTransformsCrossesAndBoundaries) {
  DataSourceSpec src;
  src.format = "csv";
  src.path = WriteFile("criteo.tsv",
                       "1\t3\t\t05db9164\t8947f767\n"
                       "0\t\t7\t68fd1e64\t\n"
                       "0\t-5\t0\t05db9164\t8947f767\n");
  src.delimiter = '\t';
  src.header = false;
  src.columns = {{"label", Type::kInt}, {"I1", Type::kInt}, {"I2", Type::kInt},
                 {"C1", Type::kString}, {"C2", Type::kString}};
  src.label_column = "label";
  src.dense_columns = {"I1", "I2"};
  src.dense_transforms = {DataSourceSpec::DenseTransform::kLog1p,
                          DataSourceSpec::DenseTransform::kNone};
  ModelSpec m;
  CategoricalFeatureSpec cross;
  cross.name = "c1_x_c2";
  cross.hashed = true;
  cross.cross = {"C1", "C2"};
  CategoricalFeatureSpec bucket;
  bucket.name = "i1_bucket";
  bucket.column = "I1";
  bucket.vocab_size = 9;
  bucket.boundaries = {0, 1, 2, 4, 8, 16, 64, 256};
  m.categorical = {cross, bucket};
  m.loss = "sigmoid_cross_entropy";
  CsvLoadStats stats;
  absl::StatusOr<Dataset> d = LoadCsvDataset(src, m, &stats);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(stats.rows_read, 3);
  ASSERT_EQ(d->count, 3);
  EXPECT_EQ(d->y, (std::vector<int32_t>{1, 0, 0}));
  // log(1 + max(x, 0)); a missing value is 0 (and log1p(0) = 0).
  ASSERT_EQ(d->x.size(), 6u);
  EXPECT_FLOAT_EQ(d->x[0], std::log1p(3.0f));
  EXPECT_FLOAT_EQ(d->x[1], 0.0f);
  EXPECT_FLOAT_EQ(d->x[2], 0.0f);
  EXPECT_FLOAT_EQ(d->x[3], 7.0f);
  EXPECT_FLOAT_EQ(d->x[4], 0.0f) << "a negative count clips to log1p(0)";
  EXPECT_FLOAT_EQ(d->x[5], 0.0f);
  // The cross: rows 0 and 2 share their values; row 1 misses C2.
  const CategoricalColumn& c = d->categorical[0];
  EXPECT_EQ(c.offsets, (std::vector<int64_t>{0, 1, 1, 2}));
  ASSERT_EQ(c.ids.size(), 2u);
  EXPECT_EQ(c.ids[0], c.ids[1]);
  std::vector<uint64_t> expected;
  ASSERT_TRUE(CategoricalEncoder(cross)
                  .AddCross({{Type::kString, 0, 0, "05db9164"}, {Type::kString, 0, 0, "8947f767"}},
                            &expected)
                  .ok());
  EXPECT_EQ(c.ids[0], expected[0]);
  // Boundaries: 3 -> 3 (three boundaries <= 3), missing -> none, -5 -> 0.
  const CategoricalColumn& b = d->categorical[1];
  EXPECT_EQ(b.offsets, (std::vector<int64_t>{0, 1, 1, 2}));
  EXPECT_EQ(b.ids, (std::vector<uint64_t>{3, 0}));

  // A crossed column the source does not declare.
  m.categorical[0].cross = {"C1", "C9"};
  d = LoadCsvDataset(src, m);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            src.path + ": feature 'c1_x_c2' reads column 'C9', which the data source does not "
            "declare");
}

// A list of files reads as their concatenation: the same examples, and the
// same holdout split, since rows are numbered on across files.
TEST(LoadCsvDatasetTest, FilesOfAListReadAsOne) {
  std::string first = "f,label\n", second = "f,label\n", whole = "f,label\n";
  for (int i = 0; i < 300; ++i) {
    const std::string row = std::to_string(i) + ".5," + std::to_string(i % 2) + "\n";
    (i < 120 ? first : second) += row;
    whole += row;
  }
  DataSourceSpec src;
  src.format = "csv";
  src.columns = {{"f", Type::kFloat}, {"label", Type::kInt}};
  src.label_column = "label";
  src.dense_columns = {"f"};
  src.holdout_fraction = 0.3;
  src.holdout_seed = 5;
  for (bool part : {false, true}) {
    src.holdout_part = part;
    src.path = WriteFile("whole.csv", whole);
    src.paths.clear();
    auto one = LoadCsvDataset(src, ModelSpec());
    src.paths = {WriteFile("first.csv", first), WriteFile("second.csv", second)};
    src.path = src.paths[0];
    CsvLoadStats stats;
    auto two = LoadCsvDataset(src, ModelSpec(), &stats);
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(stats.rows_read, 300);
    EXPECT_GT(two->count, 50);
    EXPECT_EQ(one->x, two->x);
    EXPECT_EQ(one->y, two->y);
  }
  // A bad second file is named.
  src.paths = {src.paths[0], WriteFile("bad.csv", "f,label\n1.5,x\n")};
  auto bad = LoadCsvDataset(src, ModelSpec());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind(src.paths[1] + ":2: column 'label'", 0), 0u)
      << bad.status();
}

TEST(LoadCsvDatasetTest, LoadDatasetDispatchesAndNamesMissingFiles) {
  DataSourceSpec src = MovieLensSource("/nonexistent/movielens.csv");
  auto d = LoadDataset(src, MovieLensModel(10));
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsNotFound(d.status()));
  EXPECT_EQ(d.status().message(),
            "cannot open data file '/nonexistent/movielens.csv': No such file or directory");

  src.path = WriteFile("dispatch.csv", kSmall);
  src.limit = 2;
  d = LoadDataset(src, MovieLensModel(10));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 2);
}

// The real MovieLens export (./setup.sh writes data/movielens/movielens.csv).
// Bazel runs tests in a sandbox, so the path comes from the environment:
//   bazel test //worker/core:csv_dataset_test
//       --test_env=PSCLUSTER_MOVIELENS_CSV=$PWD/data/movielens/movielens.csv
TEST(LoadCsvDatasetTest, RealMovieLens) {
  const char* path = std::getenv("PSCLUSTER_MOVIELENS_CSV");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "PSCLUSTER_MOVIELENS_CSV is not set";
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " does not exist (run ./setup.sh)";
  const auto start = std::chrono::steady_clock::now();
  CsvLoadStats stats;
  auto d = LoadCsvDataset(MovieLensSource(path), MovieLensModel(672), &stats);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 100004);
  EXPECT_EQ(stats.missing_label, 0);
  int64_t positive = 0;
  for (int32_t y : d->y) positive += y;
  const double rate = static_cast<double>(positive) / d->count;
  EXPECT_NEAR(rate, 0.516, 0.001);  // 28,750 + 7,723 + 15,095 ratings >= 4
  std::set<uint64_t> users(d->categorical[0].ids.begin(), d->categorical[0].ids.end());
  std::set<uint64_t> movies(d->categorical[1].ids.begin(), d->categorical[1].ids.end());
  std::set<uint64_t> genres(d->categorical[2].ids.begin(), d->categorical[2].ids.end());
  EXPECT_EQ(users.size(), 671u);
  EXPECT_EQ(movies.size(), 9066u);
  EXPECT_EQ(genres.size(), 20u);
  EXPECT_LT(seconds, 1.0);
  std::printf("MovieLens: %lld examples in %.3f s, %.2f%% positive\n",
              static_cast<long long>(d->count), seconds, 100 * rate);
}

// examples/movielens_ctr.yaml on the real file: its train and holdout parts
// are disjoint, cover every rating, and the holdout is about 20%.
TEST(LoadCsvDatasetTest, RealMovieLensThroughTheExampleSpec) {
  const char* path = std::getenv("PSCLUSTER_MOVIELENS_CSV");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "PSCLUSTER_MOVIELENS_CSV is not set";
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " does not exist (run ./setup.sh)";
  auto spec = LoadJobSpec("examples/movielens_ctr.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->data.train.path = path;
  spec->data.eval.path = path;
  auto train = LoadDataset(spec->data.train, spec->model);
  auto eval = LoadDataset(spec->data.eval, spec->model);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(train->count + eval->count, 100004);
  EXPECT_NEAR(static_cast<double>(eval->count) / 100004, 0.2, 0.005);
  int64_t positive = 0;
  for (int32_t y : eval->y) positive += y;
  EXPECT_NEAR(static_cast<double>(positive) / eval->count, 0.516, 0.015);
  std::printf("movielens_ctr.yaml: %lld train, %lld eval examples, eval %.2f%% positive\n",
              static_cast<long long>(train->count), static_cast<long long>(eval->count),
              100.0 * positive / eval->count);
}

// examples/criteo_synthetic.yaml on a criteo_gen train file (gzip TSV, no
// header), when PSCLUSTER_CRITEO_TSV_GZ names one: every row loads, each
// C column gives one id or none, the crosses fire only when both columns
// are present, and the load rate is printed.
TEST(LoadCsvDatasetTest, RealCriteoGenFileThroughTheExampleSpec) {
  const char* path = std::getenv("PSCLUSTER_CRITEO_TSV_GZ");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "PSCLUSTER_CRITEO_TSV_GZ is not set";
  auto spec = LoadJobSpec("examples/criteo_synthetic.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->data.train.path = path;
  const auto start = std::chrono::steady_clock::now();
  CsvLoadStats stats;
  auto d = LoadCsvDataset(spec->data.train, spec->model, &stats);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, stats.rows_read);
  EXPECT_EQ(d->features, 13);
  ASSERT_EQ(d->categorical.size(), 29u);
  int64_t c1_missing = 0;
  for (int64_t i = 0; i < d->count; ++i) {
    for (const CategoricalColumn& c : d->categorical) {
      ASSERT_LE(c.offsets[i + 1] - c.offsets[i], 1) << "single-valued columns";
    }
    const bool c1 = d->categorical[0].offsets[i + 1] > d->categorical[0].offsets[i];
    const bool c2 = d->categorical[1].offsets[i + 1] > d->categorical[1].offsets[i];
    const bool c1_x_c2 = d->categorical[26].offsets[i + 1] > d->categorical[26].offsets[i];
    ASSERT_EQ(c1_x_c2, c1 && c2) << "row " << i;
    c1_missing += !c1;
  }
  for (float x : d->x) ASSERT_GE(x, 0.0f) << "log1p of a clipped count";
  std::printf("criteo_gen file: %lld rows in %.3f s (%.0f rows/s), C1 missing in %.2f%%\n",
              static_cast<long long>(d->count), seconds, d->count / seconds,
              100.0 * c1_missing / d->count);
}

}  // namespace
}  // namespace pscluster
