#include "client/exit_codes.h"

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(ExitCodesTest, RpcErrorsMapToUsageUnreachableOrFailed) {
  EXPECT_EQ(ExitCodeForRpcError(absl::StatusCode::kOk), 0);
  // The user's input or the job's name is wrong: fix the command.
  for (absl::StatusCode c :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kNotFound}) {
    EXPECT_EQ(ExitCodeForRpcError(c), 2) << absl::StatusCodeToString(c);
  }
  // Nobody answers: check the address or the coordinator.
  EXPECT_EQ(ExitCodeForRpcError(absl::StatusCode::kUnavailable), 3);
  EXPECT_EQ(ExitCodeForRpcError(absl::StatusCode::kDeadlineExceeded), 3);
  // The coordinator answered with a failure of its own.
  EXPECT_EQ(ExitCodeForRpcError(absl::StatusCode::kInternal), 1);
  EXPECT_EQ(ExitCodeForRpcError(absl::StatusCode::kUnimplemented), 1);
}

TEST(ExitCodesTest, AJobThatFailedOnItsOwnInputIsAUsageError) {
  JobStatusProto s;
  s.set_state(SUCCEEDED);
  EXPECT_EQ(ExitCodeForJob(s), 0);
  s.set_state(FAILED);
  EXPECT_EQ(ExitCodeForJob(s), 1);  // e.g. a PS that never came back
  s.set_invalid_input(true);        // e.g. a corrupt data file on the workers
  EXPECT_EQ(ExitCodeForJob(s), 2);
  s.set_state(CANCELLED);
  s.set_invalid_input(false);
  EXPECT_EQ(ExitCodeForJob(s), 1);
}

TEST(ExitCodesTest, HelpDocumentsEveryCode) {
  const std::string help = kExitCodesHelp;
  for (const char* code : {"  0 ", "  1 ", "  2 ", "  3 ", "  130 "}) {
    EXPECT_NE(help.find(code), std::string::npos) << code;
  }
}

}  // namespace
}  // namespace pscluster
