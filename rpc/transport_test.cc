// ConfigureTransport's checks of bad TLS files and sizes (a working mutual-TLS
// cluster with openssl-made certificates is tests/security_test.sh).
#include "rpc/transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace pscluster {
namespace {

using ::testing::HasSubstr;

std::string TempFile(const std::string& name, const std::string& contents) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

TEST(TransportTest, DefaultIsPlaintextWithTheDefaultSize) {
  EXPECT_FALSE(TransportUsesTls());
  EXPECT_EQ(MaxMessageBytes(), kDefaultMaxMessageBytes);
  EXPECT_LT(kDefaultMaxMessageBytes, int64_t{1} << 30);
}

TEST(TransportTest, BadSettingsAreRefusedAndChangeNothing) {
  const std::string junk = TempFile("junk.pem", "not a certificate\n");
  struct Case {
    TransportOptions options;
    absl::StatusCode code;
    const char* message;
  };
  TransportOptions partial;
  partial.tls.cert = junk;
  TransportOptions missing;
  missing.tls = {"/nonexistent/c.pem", junk, junk, ""};
  TransportOptions not_pem;
  not_pem.tls = {junk, junk, junk, ""};
  TransportOptions too_small;
  too_small.max_message_bytes = 1000;
  TransportOptions name_only;
  name_only.tls.server_name = "pscluster";
  for (const Case& c : {Case{partial, absl::StatusCode::kInvalidArgument, "all three"},
                        Case{missing, absl::StatusCode::kNotFound, "/nonexistent/c.pem"},
                        Case{not_pem, absl::StatusCode::kInvalidArgument, "no PEM certificate"},
                        Case{too_small, absl::StatusCode::kInvalidArgument, "outside"},
                        Case{name_only, absl::StatusCode::kInvalidArgument, "without TLS"}}) {
    absl::Status s = ConfigureTransport(c.options);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
    EXPECT_FALSE(TransportUsesTls());
    EXPECT_EQ(MaxMessageBytes(), kDefaultMaxMessageBytes);
  }
  TransportOptions bigger;
  bigger.max_message_bytes = int64_t{64} << 20;
  ASSERT_TRUE(ConfigureTransport(bigger).ok());
  EXPECT_EQ(MaxMessageBytes(), int64_t{64} << 20);
}

}  // namespace
}  // namespace pscluster
