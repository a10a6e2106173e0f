// `prepflow`: run, profile and pack input pipelines; see `prepflow help`.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "client/cli/commands.h"
#include "pipeline/core/executor.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kUsage[] =
    R"(usage: prepflow COMMAND [flags]   (prepflow COMMAND --help for its flags)

commands:
  run      run a pipeline over a dataset and report throughput and checksum
  profile  measure each stage's CPU time and output size per sample
  pack     write an ImageFolder as WebDataset .tar shards
  index    write the index of existing shards beside them, for remote reading
  materialize  run a pipeline's deterministic prefix once and write its output as shards
  strategies   which prefix to materialize, and how: storage, one-off time, throughput
  plan     what the offload planner decides for given measurements or a dataset
  demo     generate a small photo-like dataset (or take --data) and run imagenet-train on it
  probe    check that a worker or the scheduler accepts connections (a liveness probe)
  ops      list every op a pipeline may use, with its fields and defaults
  options  list every option of a job: its flag, Python keyword, default and help
  version  print prepflow's version (also --version)

environment:
  PREPFLOW_LOG_LEVEL  trace, debug, info (default), warn, error, off
  PREPFLOW_OFFLOAD    a job's --offload when the flag is not given (off, auto, remote,
                      cut=K[,remote_fraction=F]): offloading switched on per job
  PREPFLOW_SCHEDULER  the scheduler (host:port) of jobs given neither --workers nor
                      --scheduler: set it cluster-wide, and PREPFLOW_OFFLOAD=auto (or
                      --offload auto) is the one per-job switch
  PREPFLOW_WORKERS    without a scheduler: the workers (host:port,...) of offloading
                      jobs given neither --workers nor --scheduler
  PREPFLOW_JOB        a job's --job when the flag is not given: the training job its
                      ranks share (workers serve it once, the scheduler shares per job)
  RANK, WORLD_SIZE, LOCAL_WORLD_SIZE
                      a job's --rank, --world-size and --local-ranks when it names none
                      (torchrun sets them)
  TORCHELASTIC_RUN_ID, MASTER_ADDR, MASTER_PORT
                      torchrun's run: the job's name when neither --job nor PREPFLOW_JOB
                      gives one
  XDG_CACHE_HOME, HOME
                      where remote shards' indexes are cached (--index-cache-dir's
                      default: $XDG_CACHE_HOME/prepflow/index, else ~/.cache/...)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
                      credentials for s3:// data (none: anonymous requests)
  AWS_REGION, AWS_DEFAULT_REGION
                      the S3 region (default us-east-1)
  AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL
                      an S3-compatible store's endpoint (path-style requests)
)";

// A closed terminal or ssh session sends SIGHUP, which would end a long run
// with no word. The run goes on; SIGINT and SIGTERM still stop it.
void OnHangUp(int) {
  static const char kLine[] =
      "prepflow: SIGHUP ignored; the run goes on (SIGINT or SIGTERM stop it)\n";
  ssize_t ignored = write(STDERR_FILENO, kLine, sizeof(kLine) - 1);  // async-signal-safe
  (void)ignored;
}

void IgnoreHangUp() {
  struct sigaction sa = {};
  sa.sa_handler = OnHangUp;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  prepflow::TuneAllocatorForStreaming();
  // Logs go to stderr so stdout carries only results (and --json's last line).
  auto logger = spdlog::stderr_color_mt("prepflow");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%^[%Y-%m-%d %H:%M:%S.%e %L]%$ %v");
  if (const char* level = std::getenv("PREPFLOW_LOG_LEVEL")) {
    spdlog::set_level(spdlog::level::from_str(level));
  }
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "version") == 0 || std::strcmp(argv[1], "--version") == 0) {
    std::printf("prepflow %s\n", PREPFLOW_VERSION);
    return 0;
  }
  IgnoreHangUp();
  const std::string command = argv[1];
  using prepflow::cli::Command;
  for (const auto& [name, f] : {std::pair<const char*, Command>{"run", prepflow::cli::RunCommand},
                                {"profile", prepflow::cli::ProfileCommand},
                                {"pack", prepflow::cli::PackCommand},
                                {"materialize", prepflow::cli::MaterializeCommand},
                                {"strategies", prepflow::cli::StrategiesCommand},
                                {"index", prepflow::cli::IndexCommand},
                                {"plan", prepflow::cli::PlanCommand},
                                {"demo", prepflow::cli::DemoCommand},
                                {"probe", prepflow::cli::ProbeCommand},
                                {"ops", prepflow::cli::OpsCommand},
                                {"options", prepflow::cli::OptionsCommand}}) {
    if (command == name) return prepflow::cli::RunWithJsonContract(command, f, argc, argv);
  }
  std::fprintf(stderr, "prepflow: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
