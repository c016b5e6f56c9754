// Tests for the IDX reader: tiny gzipped and plain files written to
// TEST_TMPDIR, plus the real Fashion-MNIST test set when it is installed.
#include "common/idx_reader.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void AppendBigEndian32(std::vector<uint8_t>* out, uint32_t v) {
  out->push_back(static_cast<uint8_t>(v >> 24));
  out->push_back(static_cast<uint8_t>(v >> 16));
  out->push_back(static_cast<uint8_t>(v >> 8));
  out->push_back(static_cast<uint8_t>(v));
}

std::vector<uint8_t> ImagesFile(uint32_t count, uint32_t rows, uint32_t cols,
                                const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out;
  AppendBigEndian32(&out, 0x00000803);
  AppendBigEndian32(&out, count);
  AppendBigEndian32(&out, rows);
  AppendBigEndian32(&out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

std::vector<uint8_t> LabelsFile(uint32_t count, const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  AppendBigEndian32(&out, 0x00000801);
  AppendBigEndian32(&out, count);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

// Writes `bytes` to TEST_TMPDIR/name, gzipped, and returns the path.
std::string WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TmpPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return path;
  if (!bytes.empty()) {
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  EXPECT_EQ(gzclose(f), Z_OK);
  return path;
}

std::string WritePlain(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TmpPath(name);
  FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return path;
  EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  return path;
}

// Three 2x3 images whose pixel (i, r, c) is 10 * i + 3 * r + c.
std::vector<uint8_t> ThreeImagePixels() {
  std::vector<uint8_t> p;
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) p.push_back(static_cast<uint8_t>(10 * i + 3 * r + c));
  return p;
}

TEST(IdxReaderTest, ReadsGzippedImages) {
  const std::string path = WriteGz("images.gz", ImagesFile(3, 2, 3, ThreeImagePixels()));
  auto images = ReadIdxImages(path, 0);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 3);
  EXPECT_EQ(images->rows, 2);
  EXPECT_EQ(images->cols, 3);
  EXPECT_EQ(images->pixels, ThreeImagePixels());
  // Image 2, row 1, col 2.
  EXPECT_EQ(images->pixels[(2 * 2 + 1) * 3 + 2], 25);
}

TEST(IdxReaderTest, ReadsPlainFiles) {
  const std::string images_path =
      WritePlain("images.idx", ImagesFile(3, 2, 3, ThreeImagePixels()));
  auto images = ReadIdxImages(images_path, 0);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->pixels, ThreeImagePixels());

  const std::string labels_path = WritePlain("labels.idx", LabelsFile(4, {9, 0, 3, 7}));
  auto labels = ReadIdxLabels(labels_path, 0);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(*labels, ElementsAre(9, 0, 3, 7));
}

TEST(IdxReaderTest, ReadsGzippedLabels) {
  const std::string path = WriteGz("labels.gz", LabelsFile(4, {9, 0, 3, 7}));
  auto labels = ReadIdxLabels(path, 0);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(*labels, ElementsAre(9, 0, 3, 7));
}

TEST(IdxReaderTest, LimitReadsAPrefix) {
  const std::string images_path =
      WriteGz("limit_images.gz", ImagesFile(3, 2, 3, ThreeImagePixels()));
  auto images = ReadIdxImages(images_path, 2);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 2);
  const std::vector<uint8_t> all = ThreeImagePixels();
  EXPECT_EQ(images->pixels, std::vector<uint8_t>(all.begin(), all.begin() + 12));

  const std::string labels_path = WriteGz("limit_labels.gz", LabelsFile(4, {9, 0, 3, 7}));
  auto labels = ReadIdxLabels(labels_path, 1);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(*labels, ElementsAre(9));
}

TEST(IdxReaderTest, LimitAboveCountReadsEverything) {
  const std::string path = WriteGz("big_limit.gz", LabelsFile(4, {9, 0, 3, 7}));
  auto labels = ReadIdxLabels(path, 1000);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->size(), 4u);
}

TEST(IdxReaderTest, NegativeLimitIsInvalid) {
  const std::string path = WriteGz("neg_limit.gz", LabelsFile(4, {9, 0, 3, 7}));
  auto labels = ReadIdxLabels(path, -1);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  const std::string path = TmpPath("no_such_file.gz");
  auto images = ReadIdxImages(path, 0);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(images.status().message()),
              HasSubstr("cannot open data file '" + path + "': No such file or directory"));
  auto labels = ReadIdxLabels(path, 0);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kNotFound);
}

TEST(IdxReaderTest, BadMagicIsInvalidArgument) {
  // A label file handed to the image reader and vice versa.
  const std::string labels_path = WriteGz("swapped_labels.gz", LabelsFile(4, {9, 0, 3, 7}));
  auto images = ReadIdxImages(labels_path, 0);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(images.status().message()), HasSubstr(labels_path));
  EXPECT_THAT(std::string(images.status().message()), HasSubstr("images and labels swapped"));

  const std::string images_path =
      WriteGz("swapped_images.gz", ImagesFile(3, 2, 3, ThreeImagePixels()));
  auto labels = ReadIdxLabels(images_path, 0);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(labels.status().message()), HasSubstr(images_path));

  const std::string text_path = WritePlain("text.txt", {'h', 'e', 'l', 'l', 'o', '!', '\n'});
  EXPECT_EQ(ReadIdxLabels(text_path, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Issue 12: a job pointing at a file that is not its data (/etc/shadow)
// learns nothing of what the file holds: the error names the file, where
// and what was expected, never the bytes found (not even as a hex number).
TEST(IdxReaderTest, ErrorsNeverQuoteTheFilesBytes) {
  const std::string secret = "root:$6$SECRETHASH:19000:0:99999:7:::\n";
  const std::string path = WritePlain("shadow", std::vector<uint8_t>(secret.begin(), secret.end()));
  for (const absl::Status& s : {ReadIdxImages(path, 0).status(), ReadIdxLabels(path, 0).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    const std::string message(s.message());
    EXPECT_THAT(message, HasSubstr(path));
    EXPECT_THAT(message, HasSubstr("bytes 0..3"));
    for (const char* leak : {"root:", "SECRET", "726f6f74", "726F6F74", "1919905652"}) {
      EXPECT_THAT(message, Not(HasSubstr(leak))) << message;
    }
  }
  // Past a good magic number, header fields are named by offset, not value.
  const std::string absurd = WriteGz("absurd_rows.gz", ImagesFile(1, 0x7365637au, 28, {}));
  const std::string message(ReadIdxImages(absurd, 0).status().message());
  EXPECT_THAT(message, HasSubstr("row count (header bytes 8..11"));
  EXPECT_THAT(message, Not(HasSubstr(std::to_string(0x7365637au))));
}

TEST(IdxReaderTest, TruncatedDataIsInvalidArgument) {
  std::vector<uint8_t> pixels = ThreeImagePixels();
  pixels.resize(pixels.size() - 1);
  const std::string path = WriteGz("short_images.gz", ImagesFile(3, 2, 3, pixels));
  auto images = ReadIdxImages(path, 0);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(images.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(images.status().message()), HasSubstr("truncated"));
  // The first two images are complete, so a limit of 2 succeeds.
  EXPECT_TRUE(ReadIdxImages(path, 2).ok());

  const std::string labels_path = WriteGz("short_labels.gz", LabelsFile(5, {1, 2}));
  auto labels = ReadIdxLabels(labels_path, 0);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(labels.status().message()), HasSubstr("truncated"));
}

TEST(IdxReaderTest, HeaderClaimingGigabytesOfATinyFileAllocatesLittle) {
  // 64 images of 2^14 x 2^14 pixels: 16 GiB, within the reader's bounds,
  // in a file of 16 bytes (found by fuzz/idx_reader_fuzzer). The reader used
  // to allocate (and zero) all 16 GiB before finding the file truncated; it
  // now grows its buffer as bytes arrive and fails at once.
  const std::string path =
      WritePlain("claims_16gib", ImagesFile(64, 1u << 14, 1u << 14, {}));
  auto images = ReadIdxImages(path, 0);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(images.status().message()), HasSubstr("truncated"));
  const std::string labels_path = WritePlain("claims_many_labels", LabelsFile(1u << 28, {}));
  auto labels = ReadIdxLabels(labels_path, 0);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(labels.status().message()), HasSubstr("truncated"));
}

TEST(IdxReaderTest, TruncatedHeaderIsInvalidArgument) {
  const std::string path = WriteGz("short_header.gz", {0, 0, 8, 3, 0, 0});
  auto images = ReadIdxImages(path, 0);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string empty = WriteGz("empty.gz", {});
  EXPECT_EQ(ReadIdxLabels(empty, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IdxReaderTest, AbsurdDimensionsAreInvalidArgument) {
  // 2^31 images of 28x28 must be rejected before allocating anything.
  const std::string huge = WriteGz("huge.gz", ImagesFile(0x80000000u, 28, 28, {}));
  auto images = ReadIdxImages(huge, 0);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(images.status().message()), HasSubstr(huge));

  const std::string zero_rows = WriteGz("zero_rows.gz", ImagesFile(1, 0, 28, {}));
  EXPECT_EQ(ReadIdxImages(zero_rows, 0).status().code(), absl::StatusCode::kInvalidArgument);

  const std::string wide = WriteGz("wide.gz", ImagesFile(1, 1, 0xFFFFFFFFu, {}));
  EXPECT_EQ(ReadIdxImages(wide, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IdxReaderTest, ReadsRealFashionMnistTestSetIfInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string images_path = dir + "t10k-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "t10k-labels-idx1-ubyte.gz";
  FILE* probe = std::fopen(images_path.c_str(), "rb");
  if (probe == nullptr) GTEST_SKIP() << "Fashion-MNIST not installed at " << dir;
  std::fclose(probe);

  auto images = ReadIdxImages(images_path, 0);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 10000);
  EXPECT_EQ(images->rows, 28);
  EXPECT_EQ(images->cols, 28);
  EXPECT_EQ(images->pixels.size(), 10000u * 28 * 28);

  auto labels = ReadIdxLabels(labels_path, 0);
  ASSERT_TRUE(labels.ok()) << labels.status();
  ASSERT_EQ(labels->size(), 10000u);
  std::vector<int> per_class(10, 0);
  for (uint8_t l : *labels) {
    ASSERT_LT(l, 10);
    ++per_class[l];
  }
  // The Fashion-MNIST test set is balanced: 1000 of each class.
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 1000) << "class " << c;
}

}  // namespace
}  // namespace pscluster
