#include "common/event_file_writer.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::filesystem::remove_all(path);
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t LittleEndian(const std::string& bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) {
    v |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  }
  return v;
}

// The events of a file, every record's framing and CRCs checked.
std::vector<tensorflow::Event> ReadEvents(const std::string& path) {
  const std::string bytes = ReadAll(path);
  std::vector<tensorflow::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, kTfRecordOverheadBytes) << "torn record at " << at;
    if (bytes.size() - at < kTfRecordOverheadBytes) break;
    const uint64_t length = LittleEndian(bytes, at, 8);
    EXPECT_EQ(LittleEndian(bytes, at + 8, 4), MaskCrc32c(Crc32c(bytes.substr(at, 8))));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(data.size(), length);
    EXPECT_EQ(LittleEndian(bytes, at + 12 + length, 4), MaskCrc32c(Crc32c(data)));
    tensorflow::Event event;
    EXPECT_TRUE(event.ParseFromString(data));
    events.push_back(event);
    at += kTfRecordOverheadBytes + length;
  }
  return events;
}

TEST(EventFileWriterTest, NamesTheFileAsTensorFlowAndStartsWithTheVersion) {
  const std::string logdir = TempDir("named") + "/run/a";  // parents created
  EventFileWriter::Options options;
  options.logdir = logdir;
  options.now = absl::FromUnixSeconds(1700000000);
  options.hostname = "host-1";
  auto writer = EventFileWriter::Create(options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path(),
            absl::StrCat(logdir, "/events.out.tfevents.1700000000.host-1.", getpid()));
  const std::vector<tensorflow::Event> events = ReadEvents((*writer)->path());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1700000000.0);
}

TEST(EventFileWriterTest, ScalarsRoundTrip) {
  EventFileWriter::Options options;
  options.logdir = TempDir("scalars");
  auto writer = EventFileWriter::Create(options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const absl::Time t = absl::FromUnixMillis(1700000000250);
  ASSERT_TRUE((*writer)->WriteScalars(42, t, {{"train/loss", 0.5}, {"learning_rate", 0.002}}).ok());
  ASSERT_TRUE((*writer)->WriteScalars(84, t + absl::Seconds(1), {{"train/loss", 0.25}}).ok());
  // Flushed at each write: readable while the writer is open.
  const std::vector<tensorflow::Event> events = ReadEvents((*writer)->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].step(), 42);
  EXPECT_DOUBLE_EQ(events[1].wall_time(), 1700000000.25);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 0.5f);
  EXPECT_EQ(events[1].summary().value(1).tag(), "learning_rate");
  EXPECT_FLOAT_EQ(events[1].summary().value(1).simple_value(), 0.002f);
  EXPECT_EQ(events[2].step(), 84);
  EXPECT_FLOAT_EQ(events[2].summary().value(0).simple_value(), 0.25f);
}

TEST(EventFileWriterTest, WireBytesAreTensorFlowsFieldNumbers) {
  // Event{step: 3, summary {value {tag: "a", simple_value: 1.0}}}, by hand:
  // step is field 2 (varint), summary field 5, value field 1, tag field 1,
  // simple_value field 2 (fixed32).
  tensorflow::Event event;
  event.set_step(3);
  tensorflow::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag("a");
  v->set_simple_value(1.0f);
  const std::string expected(
      "\x10\x03"  // step = 3
      "\x2a\x0a"  // summary, 10 bytes
      "\x0a\x08"  // value, 8 bytes
      "\x0a\x01"
      "a"                      // tag = "a"
      "\x15\x00\x00\x80\x3f",  // simple_value = 1.0f
      14);
  EXPECT_EQ(event.SerializeAsString(), expected);
  // A scalar 0 is written (TF's simple_value is in a oneof: it has
  // presence), or TensorBoard would drop the value.
  v->set_simple_value(0.0f);
  EXPECT_EQ(event.SerializeAsString().substr(9), std::string("\x15\x00\x00\x00\x00", 5));
  tensorflow::Event version;
  version.set_file_version("brain.Event:2");
  EXPECT_EQ(version.SerializeAsString(), std::string("\x1a\x0d") + "brain.Event:2");
}

TEST(EventFileWriterTest, TwoWritersOfOneSecondGetTwoFiles) {
  EventFileWriter::Options options;
  options.logdir = TempDir("two");
  options.now = absl::FromUnixSeconds(1700000000);
  auto first = EventFileWriter::Create(options);
  auto second = EventFileWriter::Create(options);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE((*first)->path(), (*second)->path());
  EXPECT_THAT((*second)->path(), MatchesRegex(".*/events\\.out\\.tfevents\\.1700000000\\..*\\.1"));
  EXPECT_EQ(ReadEvents((*first)->path()).size(), 1u);
  EXPECT_EQ(ReadEvents((*second)->path()).size(), 1u);
}

TEST(EventFileWriterTest, ErrorsNameTheDirectory) {
  const std::string dir = TempDir("blocked");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/file") << "not a directory";
  EventFileWriter::Options options;
  options.logdir = dir + "/file/logs";
  auto writer = EventFileWriter::Create(options);
  ASSERT_FALSE(writer.ok());
  EXPECT_THAT(std::string(writer.status().message()), HasSubstr(dir + "/file/logs"));
  options.logdir = "";
  EXPECT_TRUE(absl::IsInvalidArgument(EventFileWriter::Create(options).status()));
}

}  // namespace
}  // namespace pscluster
