// psctl: the pscluster command line (see psctl_cli.h for its commands and
// flags, `psctl --help` for their help, exit_codes.h for its exit codes).
//
//   psctl local JOB.yaml [--ps N] [--workers M] [-o table|json|yaml] ...
//   psctl submit JOB.yaml | status [JOB_ID] | watch JOB_ID | cancel JOB_ID |
//         rescale JOB_ID --ps N | list | describe JOB_ID | logs JOB_ID
//         [--coordinator HOST:PORT]
//   psctl checkpoint verify DIR [--ps N]
//   psctl export DIR --format onnx -o FILE
//   psctl predict DIR|JOB.yaml [--data FILE] -o FILE [--ps N] [--workers M]
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/checkpoint_verify.h"
#include "client/exit_codes.h"
#include "client/onnx_export.h"
#include "client/local_run.h"
#include "client/one_device.h"
#include "client/predict_run.h"
#include "client/output_format.h"
#include "client/psctl_cli.h"
#include "client/psctl_remote.h"
#include "common/job_spec.h"
#include "protos/coordinator.grpc.pb.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

// Parses the job spec and checks its data files; prints why not to stderr.
absl::StatusOr<JobSpec> LoadAndCheckSpec(const std::string& path) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return spec.status();
  }
  for (const std::string& file : DataFiles(*spec)) {
    // A streaming source's glob pattern: the coordinator expands it, and
    // names a pattern that matches nothing.
    if (file.find_first_of("*?[") != std::string::npos) continue;
    if (access(file.c_str(), F_OK) != 0) {
      std::fprintf(stderr, "data file not found: %s\n", file.c_str());
      return absl::NotFoundError(file);
    }
    if (access(file.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "data file not readable: %s\n", file.c_str());
      return absl::PermissionDeniedError(file);
    }
  }
  return spec;
}

int RunLocal(const LocalRunOptions& options) {
  absl::StatusOr<JobSpec> spec = LoadAndCheckSpec(options.spec_path);
  if (!spec.ok()) return kExitUsage;
  // A global batch or a learning rate scaled with the replicas is resolved
  // for --workers here, so that one that cannot be is a usage error (the
  // coordinator resolves the spec it gets again, for its workers).
  if (absl::Status s = ResolveReplicas(ReplicasFor(*spec, options.num_workers), &*spec); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", options.spec_path.c_str(), std::string(s.message()).c_str());
    return kExitUsage;
  }
  if (absl::Status s = CheckLabelled(*spec); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", options.spec_path.c_str(), std::string(s.message()).c_str());
    return kExitUsage;
  }
  if (spec->strategy == Strategy::kOneDevice || spec->strategy == Strategy::kMirrored) {
    return RunOneDevice(*spec, options);
  }
  return RunParameterServerJob(*spec, options);
}

// `checkpoint verify DIR`: exit 0 when a checkpoint restored, 1 when none
// did, 2 for a missing directory.
int CheckpointVerify(const std::string& dir, int num_ps, OutputFormat output) {
  CheckpointVerifyOptions options;
  options.dir = dir;
  options.num_ps = num_ps;
  absl::StatusOr<CheckpointVerifyReport> report = VerifyCheckpointDir(options);
  if (!report.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(report.status().message()).c_str());
    return kExitUsage;
  }
  if (output == OutputFormat::kText) {
    std::printf("%s", FormatCheckpointVerify(*report).c_str());
  } else {
    PrintStructured(CheckpointVerifyJson(*report), output);
  }
  if (!report->restored) {
    std::fprintf(stderr, "psctl: no checkpoint restores: %s\n", report->error.c_str());
    return kExitJobFailed;
  }
  return kExitOk;
}

// `export DIR --format onnx -o FILE`: exit 0 when written; 2 for a model it
// refuses, a missing directory or checkpoint, or an unwritable FILE; 1 when
// no checkpoint restores.
int Export(const std::string& dir, const std::string& path) {
  absl::StatusOr<OnnxExportReport> report = ExportOnnx(dir, path);
  if (!report.ok()) {
    const absl::Status& s = report.status();
    std::fprintf(stderr, "psctl: cannot export %s: %s\n", dir.c_str(),
                 std::string(s.message()).c_str());
    return absl::IsUnimplemented(s) || absl::IsNotFound(s) || absl::IsInvalidArgument(s) ||
                   absl::IsPermissionDenied(s)
               ? kExitUsage
               : kExitJobFailed;
  }
  std::string inputs;
  if (report->inputs > 0 || report->id_inputs.empty()) {
    inputs = absl::StrCat("input [batch, ", report->inputs, "]");
  }
  if (!report->id_inputs.empty()) {
    absl::StrAppend(&inputs, inputs.empty() ? "" : ", ", absl::StrJoin(report->id_inputs, ", "),
                    " (int64 [batch, n], -1 padding; ", report->embedding_rows,
                    " embedding rows)");
  }
  std::printf("exported checkpoint %lld of job %s to %s (onnx, %lld nodes, %lld bytes, %.2f s): "
              "%s -> logits, predictions [batch, %lld]\n",
              static_cast<long long>(report->checkpoint_id), report->job_id.c_str(),
              report->path.c_str(), static_cast<long long>(report->nodes),
              static_cast<long long>(report->bytes), report->seconds, inputs.c_str(),
              static_cast<long long>(report->outputs));
  return kExitOk;
}

// The bearer token in `path`: its first non-empty line, with a `USER:`
// prefix dropped (so the coordinator's tokens file of one user works too).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file ", path));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view token = absl::StripAsciiWhitespace(line);
    if (token.empty() || token[0] == '#') continue;
    if (const size_t colon = token.find(':'); colon != absl::string_view::npos) {
      token = absl::StripAsciiWhitespace(token.substr(colon + 1));
    }
    return std::string(token);
  }
  return absl::InvalidArgumentError(absl::StrCat("token file ", path, " holds no token"));
}

int Main(int argc, char** argv) {
  const char* env_coordinator = std::getenv("PSCTL_COORDINATOR");
  PsctlCommandLine cl;
  if (std::optional<int> done = ParsePsctlCommandLine(
          argc, argv, env_coordinator != nullptr ? env_coordinator : "", &cl)) {
    return *done;
  }
  // psctl's own logging (the in-process cores of strategy one_device) goes to
  // stderr, so that stdout carries only the result (-o json|yaml); by
  // default warnings and errors only: the progress lines say the rest.
  spdlog::set_default_logger(spdlog::stderr_color_mt("psctl"));
  spdlog::set_level(cl.log_level.empty() ? spdlog::level::warn
                                         : spdlog::level::from_str(cl.log_level));

  if (cl.command == "local") return RunLocal(cl.local);
  if (cl.command == "checkpoint verify") {
    return CheckpointVerify(cl.argument, cl.verify_ps, cl.output);
  }
  if (cl.command == "export") return Export(cl.argument, cl.export_path);
  if (cl.command == "predict") {
    PredictRunOptions predict;
    predict.source = cl.argument;
    predict.data_path = cl.predict_data;
    predict.output_path = cl.predict_path;
    predict.closure_rows = cl.predict_closure_rows;
    predict.cluster = cl.local;
    return RunPredict(predict);
  }
  if (cl.coordinator.empty()) {
    std::fprintf(stderr, "psctl: %s needs --coordinator HOST:PORT (or PSCTL_COORDINATOR)\n",
                 cl.command.c_str());
    return kExitUsage;
  }
  TransportOptions transport;
  transport.tls = cl.tls;
  // PSCTL_TLS_CERT/KEY/CA/SERVER_NAME stand in for flags not given.
  for (auto [field, env] : {std::pair{&transport.tls.cert, "PSCTL_TLS_CERT"},
                            std::pair{&transport.tls.key, "PSCTL_TLS_KEY"},
                            std::pair{&transport.tls.ca, "PSCTL_TLS_CA"},
                            std::pair{&transport.tls.server_name, "PSCTL_TLS_SERVER_NAME"}}) {
    const char* value = std::getenv(env);
    if (field->empty() && value != nullptr) *field = value;
  }
  if (absl::Status s = ConfigureTransport(transport); !s.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  std::string token_file = cl.token_file;
  if (const char* env = std::getenv("PSCTL_TOKEN_FILE"); token_file.empty() && env != nullptr) {
    token_file = env;
  }
  std::string token;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(token_file);
    if (!read.ok()) {
      std::fprintf(stderr, "psctl: %s\n", std::string(read.status().message()).c_str());
      return kExitUsage;
    }
    token = *std::move(read);
  }
  std::unique_ptr<Coordinator::Stub> stub =
      Coordinator::NewStub(MakeChannel(cl.coordinator, token));
  if (cl.command == "rescale") return RunRescale(cl.argument, cl.rescale_ps, cl.output, stub.get());
  return RunRemoteCommand(cl.command, cl.argument, cl.output, stub.get());
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
