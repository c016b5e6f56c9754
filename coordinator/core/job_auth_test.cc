#include "coordinator/core/job_auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTokens[] =
    "# job service tokens\n"
    "alice:0123456789abcdef0123\n"
    "\n"
    "bob : fedcba9876543210fedc\n"
    "ffffeeeeddddccccbbbb\n";

TEST(JobAuthTest, OpenServiceLetsEveryoneInAsNobody) {
  JobAuth open;
  EXPECT_FALSE(open.enabled());
  absl::StatusOr<std::string> user = open.Authenticate("");
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(*user, "");
}

TEST(JobAuthTest, TokensNameTheirUsers) {
  absl::StatusOr<JobAuth> auth = JobAuth::FromText(kTokens, "tokens");
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->enabled());
  EXPECT_EQ(*auth->Authenticate("Bearer 0123456789abcdef0123"), "alice");
  EXPECT_EQ(*auth->Authenticate("Bearer fedcba9876543210fedc"), "bob");
  EXPECT_EQ(*auth->Authenticate("Bearer ffffeeeeddddccccbbbb"), "default");
}

TEST(JobAuthTest, MissingWrongOrMalformedCredentialsAreUnauthenticated) {
  absl::StatusOr<JobAuth> auth = JobAuth::FromText(kTokens, "tokens");
  ASSERT_TRUE(auth.ok());
  for (const char* header :
       {"", "Bearer", "Bearer ", "Bearer 0123456789abcdef012", "Bearer 0123456789abcdef01234",
        "Basic 0123456789abcdef0123", "0123456789abcdef0123"}) {
    absl::StatusOr<std::string> user = auth->Authenticate(header);
    EXPECT_EQ(user.status().code(), absl::StatusCode::kUnauthenticated) << header;
  }
}

TEST(JobAuthTest, BadFilesNameTheLineAndNeverQuoteTokens) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {Case{"", "no token"}, Case{"# only a comment\n", "no token"},
                        Case{"alice:short-token\n", "tokens:1: the token of 'alice' is shorter"},
                        Case{"\n:0123456789abcdef0123\n", "tokens:2: empty user"},
                        Case{"alice:0123456789abcdef012 3\n", "character outside"},
                        Case{"a:0123456789abcdef0123\nb:0123456789abcdef0123\n",
                             "tokens:2: the same token as user 'a'"}}) {
    absl::StatusOr<JobAuth> auth = JobAuth::FromText(c.text, "tokens");
    ASSERT_FALSE(auth.ok()) << c.text;
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(auth.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(auth.status().message()), Not(HasSubstr("0123456789abcdef")));
  }
  EXPECT_EQ(JobAuth::FromFile("/nonexistent/tokens").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pscluster
