#include "client/psctl_cli.h"

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "client/exit_codes.h"
#include "client/psctl_version.h"

namespace pscluster {
namespace {

constexpr char kDescription[] =
    "psctl: the pscluster command line. Runs a training job on a local cluster of child\n"
    "processes (local), or talks to a running coordinator (submit, status, watch, cancel,\n"
    "list, describe, logs), or checks a checkpoint directory (checkpoint verify) or exports\n"
    "its model (export), or predicts with it on a local cluster (predict).";

constexpr char kEnvironmentHelp[] =
    "Environment:\n"
    "  PSCTL_COORDINATOR  default of --coordinator (HOST:PORT)\n"
    "  PSCTL_TOKEN_FILE   default of --token_file\n"
    "  PSCTL_TLS_CERT, PSCTL_TLS_KEY, PSCTL_TLS_CA, PSCTL_TLS_SERVER_NAME\n"
    "                     defaults of --tls_cert, --tls_key, --tls_ca, --tls_server_name\n";

std::string Footer() { return std::string(kEnvironmentHelp) + "\n" + kExitCodesHelp; }

// -o/--output on a command that prints results.
void AddOutput(CLI::App* sub, PsctlCommandLine* cl) {
  sub->add_option("-o,--output", cl->output,
                  "table (alias text: progress, tables, summaries), json or yaml (one object on "
                  "stdout)")
      ->transform(CLI::CheckedTransformer(OutputFormatNames()).description(""))
      ->type_name("table|json|yaml");
}

// --coordinator on a command that talks to a running coordinator.
void AddCoordinator(CLI::App* sub, PsctlCommandLine* cl, const std::string& dflt) {
  std::string help = "the coordinator's HOST:PORT (default: $PSCTL_COORDINATOR";
  help += dflt.empty() ? ", unset)" : ", " + dflt + ")";
  sub->add_option("--coordinator", cl->coordinator, help)->type_name("HOST:PORT");
}

// The credentials of a command that talks to a running coordinator.
void AddCredentials(CLI::App* sub, PsctlCommandLine* cl) {
  sub->add_option("--token_file", cl->token_file,
                  "file holding the job service's bearer token (default: $PSCTL_TOKEN_FILE)")
      ->type_name("FILE");
  sub->add_option("--tls_cert", cl->tls.cert,
                  "PEM certificate signed by the cluster CA (mutual TLS; with --tls_key, --tls_ca)")
      ->type_name("FILE");
  sub->add_option("--tls_key", cl->tls.key, "PEM private key of --tls_cert")->type_name("FILE");
  sub->add_option("--tls_ca", cl->tls.ca, "PEM certificate of the cluster CA")->type_name("FILE");
  sub->add_option("--tls_server_name", cl->tls.server_name,
                  "check the coordinator's certificate against this name instead of its host")
      ->type_name("NAME");
}

CLI::App* AddCommand(CLI::App* app, const std::string& name, const std::string& help) {
  CLI::App* sub = app->add_subcommand(name, help);
  sub->footer(Footer());
  return sub;
}

// The flags of the servers a local run starts (`local`, `predict`):
// restarts, the time limit (`timeout_what` after it: "cancel the job") and
// the binaries.
void AddServerFlags(CLI::App* sub, LocalRunOptions* o, const std::string& timeout_what) {
  sub->add_flag_function(
      "--no_restart,--no-restart", [o](std::int64_t count) { o->restart = count <= 0; },
      "do not restart a server that dies during the run; by default psctl restarts it at the "
      "same address, as Kubernetes would");
  sub->add_option("--timeout_s", o->timeout_s,
                  timeout_what + " after this many seconds (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->type_name("SECONDS");
  sub->add_option("--ps_server_bin", o->ps_server_bin, "ps_server binary (default: next to psctl)")
      ->type_name("PATH");
  sub->add_option("--worker_server_bin", o->worker_server_bin,
                  "worker_server binary (default: next to psctl)")
      ->type_name("PATH");
  sub->add_option("--coordinator_bin", o->coordinator_bin,
                  "coordinator binary (default: next to psctl)")
      ->type_name("PATH");
}

void AddLocal(CLI::App* app, PsctlCommandLine* cl) {
  CLI::App* sub = AddCommand(
      app, "local",
      "Run JOB.yaml on a cluster of child processes on 127.0.0.1 (N ps_server, M worker_server, "
      "1 coordinator), show progress, print the result and stop every child");
  LocalRunOptions& o = cl->local;
  sub->add_option("JOB.yaml", cl->argument, "the job spec")->required();
  sub->add_option("--ps", o.num_ps,
                  "number of ps_server processes (strategy multi_worker_mirrored runs none)")
      ->check(CLI::Range(1, INT_MAX))
      ->capture_default_str();
  sub->add_option("--workers", o.num_workers, "number of worker_server processes")
      ->check(CLI::Range(1, INT_MAX))
      ->capture_default_str();
  sub->add_option("--job_ps", o.job_ps,
                  "the job starts on the first N of the --ps PS; the others are spare, for "
                  "`psctl rescale JOB --ps N` (default: all; docs/elastic_ps.md)")
      ->check(CLI::Range(1, INT_MAX))
      ->type_name("N");
  AddOutput(sub, cl);
  sub->add_option("--run_dir", o.run_dir,
                  "directory for logs and port files (default: a fresh /tmp/psctl-XXXXXX, "
                  "removed when the job succeeds unless --keep_run_dir; kept when it fails)")
      ->type_name("DIR");
  sub->add_flag("--keep_run_dir", o.keep_run_dir, "keep the temporary run directory");
  sub->add_flag("--metrics", o.metrics,
                "every server serves Prometheus /metrics on a free 127.0.0.1 port; the "
                "addresses are printed when the cluster is up and listed under \"metrics\" in "
                "--output json (the parameter_server strategy only: one_device serves none)");
  sub->add_flag("--tls", o.tls,
                "make a throwaway CA and cluster certificate with openssl (in the run "
                "directory) and run every channel with mutual TLS, the job service with a "
                "bearer token");
  sub->add_flag("--describe", o.describe,
                "at the end, print each variable's layout over the PS tasks and the bytes each "
                "PS holds");
  AddServerFlags(sub, &o, "cancel the job");
}

void AddRemote(CLI::App* app, PsctlCommandLine* cl, const std::string& coordinator_default) {
  CLI::App* submit = AddCommand(
      app, "submit",
      "Validate JOB.yaml and submit it to the coordinator; prints the job id (-o json|yaml: "
      "job_id and queue_position)");
  submit->add_option("JOB.yaml", cl->argument, "the job spec")->required();

  CLI::App* status = AddCommand(
      app, "status",
      "Print a job's status, or every job (as `list`) without JOB_ID; exits 0 whatever the "
      "job's state");
  status->add_option("JOB_ID", cl->argument, "the job (default: all jobs)");

  CLI::App* watch =
      AddCommand(app, "watch",
                 "Follow a job's progress until it ends; exits 1 if it ended FAILED or CANCELLED");
  watch->add_option("JOB_ID", cl->argument, "the job")->required();

  CLI::App* cancel = AddCommand(app, "cancel", "Cancel a queued or running job");
  cancel->add_option("JOB_ID", cl->argument, "the job")->required();

  CLI::App* rescale = AddCommand(
      app, "rescale",
      "Move a running job onto the first N of the coordinator's PS tasks: checkpoint, re-shard, "
      "resume (docs/elastic_ps.md); prints the pause");
  rescale->add_option("JOB_ID", cl->argument, "the job")->required();
  rescale->add_option("--ps", cl->rescale_ps, "the number of PS tasks the job runs on after it")
      ->required()
      ->type_name("N");

  CLI::App* list = AddCommand(app, "list", "List the coordinator's jobs, queued ones included");

  CLI::App* describe =
      AddCommand(app, "describe",
                 "Print a job's variable layout over the PS tasks and the bytes each PS holds");
  describe->add_option("JOB_ID", cl->argument, "the job")->required();

  CLI::App* logs = AddCommand(
      app, "logs",
      "Print a job's event log: lifecycle, retries, worker and PS failures and recoveries, "
      "checkpoints, why it failed");
  logs->add_option("JOB_ID", cl->argument, "the job")->required();

  for (CLI::App* sub : {submit, status, watch, cancel, rescale, list, describe, logs}) {
    AddCoordinator(sub, cl, coordinator_default);
    AddCredentials(sub, cl);
    if (sub != cancel) AddOutput(sub, cl);
  }
}

void AddCheckpoint(CLI::App* app, PsctlCommandLine* cl) {
  CLI::App* checkpoint = AddCommand(app, "checkpoint", "Inspect checkpoint directories");
  checkpoint->require_subcommand(1);
  CLI::App* verify = AddCommand(
      checkpoint, "verify",
      "List DIR's checkpoints and restore the newest good one into in-process PS stores; exits "
      "1 if none restores");
  verify->add_option("DIR", cl->argument, "the job's checkpoint.dir")->required();
  verify
      ->add_option("--ps", cl->verify_ps,
                   "PS to restore into (default: as many as saved the checkpoint)")
      ->check(CLI::Range(1, INT_MAX));
  AddOutput(verify, cl);
}

void AddExport(CLI::App* app, PsctlCommandLine* cl) {
  CLI::App* exp = AddCommand(
      app, "export",
      "Write the model of DIR's newest good checkpoint as a model file (--format onnx); exits "
      "2 for a model it cannot export, naming what");
  exp->add_option("DIR", cl->argument, "the job's checkpoint.dir")->required();
  exp->add_option("--format", cl->export_format, "the model file's format (default: onnx)")
      ->check(CLI::IsMember({"onnx"}))
      ->type_name("onnx");
  exp->add_option("-o,--output", cl->export_path, "the model file to write")
      ->required()
      ->type_name("FILE");
}

void AddPredict(CLI::App* app, PsctlCommandLine* cl) {
  CLI::App* sub = AddCommand(
      app, "predict",
      "Batch prediction: start a local cluster (as `local`), restore the newest good checkpoint "
      "onto its PS and run the model over every row of the data on its workers; write one CSV "
      "line per row, in input order, exactly once even if a worker dies");
  LocalRunOptions& o = cl->local;
  sub->add_option("CHECKPOINT_DIR|JOB.yaml", cl->argument,
                  "the job's checkpoint directory, or its spec (its checkpoint.dir)")
      ->required();
  sub->add_option("--data", cl->predict_data,
                  "YAML file holding one data source, as the job spec's data.eval (default: the "
                  "job's data.eval); no labels needed (leave out labels: or label:)")
      ->type_name("FILE");
  sub->add_option("-o,--output", cl->predict_path,
                  "the CSV to write: header row,prediction (or row,p0..pN,class), one line per "
                  "input row; replaced atomically")
      ->required()
      ->type_name("FILE");
  sub->add_option("--closure_rows", cl->predict_closure_rows, "rows per predict closure")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--ps", o.num_ps, "number of ps_server processes")
      ->check(CLI::Range(1, INT_MAX))
      ->capture_default_str();
  sub->add_option("--workers", o.num_workers, "number of worker_server processes")
      ->check(CLI::Range(1, INT_MAX))
      ->capture_default_str();
  sub->add_option("--run_dir", o.run_dir,
                  "directory for logs and port files (default: a fresh /tmp/psctl-XXXXXX, "
                  "removed on success unless --keep_run_dir)")
      ->type_name("DIR");
  sub->add_flag("--keep_run_dir", o.keep_run_dir, "keep the temporary run directory");
  AddServerFlags(sub, &o, "give up");
}

}  // namespace

std::unique_ptr<CLI::App> BuildPsctlApp(PsctlCommandLine* cl,
                                        const std::string& coordinator_default) {
  cl->coordinator = coordinator_default;
  auto app = std::make_unique<CLI::App>(kDescription, "psctl");
  app->footer(Footer());
  app->set_version_flag("--version", std::string("psctl ") + kPsctlVersion);
  app->require_subcommand(1);
  // Global flags may also follow the subcommand (`psctl local X --log_level debug`).
  app->fallthrough();
  app->add_option("--log_level", cl->log_level,
                  "psctl's log level, also passed to the coordinator and workers `local` "
                  "starts if they accept it: trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->type_name("LEVEL");
  AddLocal(app.get(), cl);
  AddRemote(app.get(), cl, coordinator_default);
  AddCheckpoint(app.get(), cl);
  AddExport(app.get(), cl);
  AddPredict(app.get(), cl);
  return app;
}

std::optional<int> ParsePsctlCommandLine(int argc, const char* const* argv,
                                         const std::string& coordinator_default,
                                         PsctlCommandLine* cl) {
  std::unique_ptr<CLI::App> app = BuildPsctlApp(cl, coordinator_default);
  // CLI11 would call an unknown command an unexpected argument, or say that a
  // subcommand is required; name it instead.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--log_level") {
      ++i;  // its value
      continue;
    }
    if (!arg.empty() && arg[0] == '-') continue;
    const bool known =
        !app->get_subcommands([&arg](const CLI::App* sub) { return sub->check_name(arg); }).empty();
    if (!known) {
      std::fprintf(stderr, "psctl: unknown command '%s'\nRun with --help for more information.\n",
                   arg.c_str());
      return kExitUsage;
    }
    break;
  }
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and version print on stdout and are a success; anything else is
    // a usage error, whatever CLI11's own exit code for it.
    return app->exit(e) == 0 ? kExitOk : kExitUsage;
  }
  for (const CLI::App* sub = app.get(); !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    cl->command += (cl->command.empty() ? "" : " ") + sub->get_name();
  }
  cl->local.spec_path = cl->argument;
  cl->local.output = cl->output;
  cl->local.log_level = cl->log_level;
  return std::nullopt;
}

}  // namespace pscluster
