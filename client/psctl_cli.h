// psctl's command line, on CLI11: the subcommands (local, submit, status,
// watch, cancel, list, describe, logs, checkpoint verify, export, predict),
// their flags, help
// and version, parsed into one PsctlCommandLine. The same builder serves
// psctl_main.cc and psctl_cli_test.cc.
//
// Flags keep the spellings psctl had with absl flags (--run_dir, --timeout_s,
// --no_restart, ...), accept `--flag=value` and `--flag value`, and come
// before or after the positional argument. --log_level is global (it may
// follow any subcommand).
//
// Not thread-safe: build and parse on one thread.
#ifndef PSCLUSTER_CLIENT_PSCTL_CLI_H_
#define PSCLUSTER_CLIENT_PSCTL_CLI_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "client/local_run_options.h"
#include "client/output_format.h"
#include "common/cluster_config.h"

namespace pscluster {

// What the user asked for.
struct PsctlCommandLine {
  // "local", "submit", "status", "watch", "cancel", "rescale", "list",
  // "describe", "logs", "checkpoint verify", "export" or "predict".
  std::string command;
  // JOB.yaml (local, submit), JOB_ID (status: optional; watch, cancel,
  // describe, logs) or DIR (checkpoint verify, export), or DIR|JOB.yaml
  // (predict).
  std::string argument;
  // -o/--output: table (alias text), json or yaml.
  OutputFormat output = OutputFormat::kText;
  // --coordinator HOST:PORT; defaults to $PSCTL_COORDINATOR (see
  // BuildPsctlApp).
  std::string coordinator;
  // Remote commands: --token_file (psctl_main falls back to
  // $PSCTL_TOKEN_FILE) and --tls_cert/--tls_key/--tls_ca/--tls_server_name.
  std::string token_file;
  TlsFiles tls;
  // --log_level: trace|debug|info|warn|error|off; empty when not given.
  std::string log_level;
  // `local`'s flags (spec_path, output and log_level are filled in by
  // ParsePsctlCommandLine from the fields above).
  LocalRunOptions local;
  // `checkpoint verify --ps N`: PS to restore into; 0 (not given): as many
  // as saved the checkpoint.
  int verify_ps = 0;
  // `export DIR --format onnx -o FILE`: the model file's format and path.
  std::string export_format = "onnx";
  std::string export_path;
  // `predict SOURCE [--data FILE] -o FILE [--closure_rows N]` (its cluster
  // flags go into `local`, as for `local`).
  std::string predict_data;
  std::string predict_path;
  int64_t predict_closure_rows = 500;
  // `rescale JOB_ID --ps N` (docs/elastic_ps.md): the PS the job moves onto.
  int rescale_ps = 0;
};

// Builds the CLI11 app whose parse fills `*command_line` (not owned; must
// outlive the app). `coordinator_default` is the default of --coordinator
// (main passes $PSCTL_COORDINATOR; the environment is read by the caller).
std::unique_ptr<CLI::App> BuildPsctlApp(PsctlCommandLine* command_line,
                                        const std::string& coordinator_default);

// Parses argv with BuildPsctlApp. Returns nullopt when a command should run
// (then *command_line says which), else the exit code psctl ends with after
// what parsing printed: 0 for --help, -h, CMD --help and --version (on
// stdout), 2 for a usage error (on stderr: what is wrong, and where to find
// help).
std::optional<int> ParsePsctlCommandLine(int argc, const char* const* argv,
                                         const std::string& coordinator_default,
                                         PsctlCommandLine* command_line);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_PSCTL_CLI_H_
