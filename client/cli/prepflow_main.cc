// `prepflow`: run, profile and pack input pipelines; see `prepflow help`.
#include <cstdio>
#include <cstring>
#include <string>

#include "client/cli/commands.h"
#include "pipeline/executor.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kUsage[] =
    R"(usage: prepflow COMMAND [flags]   (prepflow COMMAND --help for its flags)

commands:
  run      run a pipeline over a dataset and report throughput and checksum
  profile  measure each stage's CPU time and output size per sample
  pack     write an ImageFolder as WebDataset .tar shards
  plan     what the offload planner decides for given measurements or a dataset
  demo     generate a small photo-like dataset (or take --data) and run imagenet-train on it

environment:
  PREPFLOW_LOG_LEVEL  trace, debug, info (default), warn, error, off
)";

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
  const std::string command = argv[1];
  if (command == "run") return prepflow::cli::RunCommand(argc, argv);
  if (command == "profile") return prepflow::cli::ProfileCommand(argc, argv);
  if (command == "pack") return prepflow::cli::PackCommand(argc, argv);
  if (command == "plan") return prepflow::cli::PlanCommand(argc, argv);
  if (command == "demo") return prepflow::cli::DemoCommand(argc, argv);
  std::fprintf(stderr, "prepflow: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
