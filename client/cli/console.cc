#include "client/cli/console.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/text.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/pipeline.h"

namespace prepflow::cli {

absl::Status LoadPluginFlag(const std::string& list) { return LoadPlugins(SplitList(list)); }

absl::Status ApplyFidelityFlag(const std::string& text, proto::PipelineSpec* spec) {
  absl::StatusOr<proto::Fidelity> fidelity = ParseFidelity(text);
  if (!fidelity.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--fidelity: ", fidelity.status().message()));
  }
  ResolveFidelity(*fidelity, spec);
  return absl::OkStatus();
}

void Console::PrintJson(const Json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  std::fflush(stdout);
  json_printed_ = true;
}

int Console::UsageError(const std::string& message, const FlagSet& flags) {
  last_error_ = SafeText(message);
  std::fprintf(stderr, "%s\n%s", last_error_.c_str(), flags.UsageAfter(message).c_str());
  return kUsage;
}

int Console::Failure(const std::string& command, const absl::Status& status) {
  last_error_ = SafeText(status.message());
  std::fprintf(stderr, "prepflow %s: error: %s\n", command.c_str(), last_error_.c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? kUsage : kFailed;
}

std::optional<int> Console::ParseFlags(FlagSet& flags, int argc, char** argv) {
  if (absl::Status s = flags.Parse(argc, argv, 2); !s.ok()) {
    return UsageError(std::string(s.message()), flags);
  }
  if (flags.help()) {
    std::printf("%s", flags.Usage().c_str());
    return kOk;
  }
  return std::nullopt;
}

Progress::Progress() : tty_(isatty(STDERR_FILENO) == 1) {}

void Progress::Update(const std::string& line, bool force) {
  if (!tty_) return;
  const int64_t now = WallNanos();
  if (!force && now - last_ < 250'000'000) return;
  last_ = now;
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void Progress::Done() {
  if (shown_) std::fprintf(stderr, "\r\033[K");
  shown_ = false;
}

std::string StagesTable(const std::vector<StageStats>& stages) {
  double total = 0;
  for (const StageStats& s : stages) total += s.cpu_seconds_per_sample();
  std::string out = absl::StrFormat("  %-24s %14s %7s %16s\n", "stage", "cpu ms/sample", "share",
                                    "out KiB/sample");
  for (const StageStats& s : stages) {
    absl::StrAppendFormat(
        &out, "  %-24s %14.3f %6.1f%% %16.1f\n", s.name, s.cpu_seconds_per_sample() * 1e3,
        total > 0 ? 100 * s.cpu_seconds_per_sample() / total : 0, s.bytes_per_sample() / 1024);
  }
  absl::StrAppendFormat(&out, "  %-24s %14.3f\n", "total", total * 1e3);
  return out;
}

}  // namespace prepflow::cli
