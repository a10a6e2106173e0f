#include "client/loader_options.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "pipeline/rng.h"
#include "pipeline/text.h"

namespace prepflow {
namespace {

template <typename... Parts>
absl::Status Invalid(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// host:port with a numeric port, [v6]:port, or a gRPC URI (dns:///..., unix:...).
absl::Status CheckWorkerAddress(const std::string& address) {
  if (absl::StrContains(address, ":/") || absl::StartsWith(address, "unix:")) {
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535 ||
      (address[0] == '[') != (address[colon - 1] == ']')) {
    return Invalid("--workers: '", SafeText(address),
                   "' is not host:port (e.g. worker1:7070, [::1]:7070)");
  }
  return absl::OkStatus();
}

// The options that are plain numbers in a range.
absl::Status CheckNumbers(const LoaderOptions& o) {
  if (o.batch_size < 1 || o.batch_size > kMaxBatch) {
    return Invalid("--batch: must be 1 to ", kMaxBatch, ", got ", o.batch_size);
  }
  if (o.threads < 0 || o.threads > kMaxThreads) {
    return Invalid("--threads: must be 0 to ", kMaxThreads, ", got ", o.threads);
  }
  if (o.epochs < 1) return Invalid("--epochs: must be at least 1, got ", o.epochs);
  if (o.first_epoch < 0 || o.skip_batches < 0) {
    return Invalid("--start-epoch/--start-batch: must be >= 0, got ", o.first_epoch, "/",
                   o.skip_batches);
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return Invalid("--rank/--world-size: need 0 <= rank < world_size, got ", o.rank, "/",
                   o.world_size);
  }
  if (o.echo < 1 || o.echo >= static_cast<int>(kMaxCopies)) {
    return Invalid("--echo: must be 1 to ", kMaxCopies - 1, ", got ", o.echo);
  }
  if (o.max_echo < 1 || o.max_echo >= static_cast<int>(kMaxCopies)) {
    return Invalid("--max-echo: must be 1 to ", kMaxCopies - 1, ", got ", o.max_echo);
  }
  if (o.start_echo < 0 || (o.echo_auto && o.start_echo > o.max_echo)) {
    return Invalid("--start-echo: must be 0 to --max-echo (", o.max_echo, "), got ", o.start_echo);
  }
  if (o.echo_window < 1) return Invalid("--echo-window: must be at least 1, got ", o.echo_window);
  if (o.echo_bytes < 0) return Invalid("--echo-bytes: must be >= 0, got ", o.echo_bytes);
  if (o.prefetch_batches < 1 || o.prefetch_batches > kMaxPrefetch) {
    return Invalid("--prefetch: must be 1 to ", kMaxPrefetch, ", got ", o.prefetch_batches);
  }
  if (o.held_batches < 0 || o.held_batches > 64) {
    return Invalid("held_batches: must be in [0, 64], got ", o.held_batches);
  }
  if (o.max_pixels < 1) return Invalid("--max-pixels: must be positive, got ", o.max_pixels);
  if (o.max_jpeg_scans < 1) return Invalid("--max-jpeg-scans: must be positive");
  if (o.item_samples < 1) return Invalid("--item-samples: must be at least 1");
  if (!(o.worker_timeout_seconds > 0)) return Invalid("--worker-timeout: must be positive");
  if (!(o.hedge_after >= 0)) return Invalid("--hedge-after: must be >= 0 (0: off)");
  if (!(o.scheduler_weight > 0) || !std::isfinite(o.scheduler_weight))
    return Invalid("--weight: must be positive, got ", o.scheduler_weight);
  if (!(o.max_remote_cores >= 0)) return Invalid("--max-remote-cores: must be >= 0");
  if (!(o.demand >= 0)) return Invalid("--demand: must be >= 0");
  if (!(o.bandwidth >= 0)) return Invalid("--bandwidth-mbps: must be >= 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RankSplit> ParseRankSplit(const std::string& name) {
  if (name == "pad") return RankSplit::kPad;
  if (name == "drop") return RankSplit::kDrop;
  if (name == "uneven") return RankSplit::kUneven;
  return Invalid("--rank-split: '", SafeText(name), "' is not pad, drop or uneven");
}

absl::StatusOr<OnError> ParseOnError(const std::string& name) {
  if (name == "skip") return OnError::kSkip;
  if (name == "fail") return OnError::kFail;
  return Invalid("--on-error: '", name, "' is not skip or fail");
}

absl::StatusOr<OffloadMode> ParseOffload(const std::string& text) {
  OffloadMode mode;
  if (text == "off" || text.empty()) return mode;
  if (text == "auto") {
    mode.kind = OffloadMode::kAuto;
    return mode;
  }
  if (text == "remote") {
    mode.kind = OffloadMode::kRemote;
    return mode;
  }
  auto bad = [&text](const std::string& why) {
    return Invalid("--offload: '", text, "': ", why,
                   " (use off, auto, remote, or cut=K[,remote_fraction=F])");
  };
  if (text.rfind("cut=", 0) != 0) return bad("unknown mode");
  mode.kind = OffloadMode::kCut;
  bool have_cut = false;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.first == "cut") {
      if (!absl::SimpleAtoi(kv.second, &mode.cut) || mode.cut < 0) return bad("cut must be >= 0");
      have_cut = true;
    } else if (kv.first == "remote_fraction") {
      if (!absl::SimpleAtod(kv.second, &mode.remote_fraction) || !(mode.remote_fraction >= 0) ||
          mode.remote_fraction > 1) {
        return bad("remote_fraction must be in [0, 1]");
      }
    } else {
      return bad(absl::StrCat("unknown key '", kv.first, "'"));
    }
  }
  if (!have_cut) return bad("cut=K is required");
  return mode;
}

std::string OffloadModeString(const OffloadMode& mode) {
  switch (mode.kind) {
    case OffloadMode::kOff:
      return "off";
    case OffloadMode::kRemote:
      return "remote";
    case OffloadMode::kCut:
      return absl::StrFormat("cut=%d,remote_fraction=%g", mode.cut, mode.remote_fraction);
    case OffloadMode::kAuto:
      return "auto";
  }
  return "?";
}

namespace {

// The integer in environment variable `name`: nullopt when unset or empty,
// InvalidArgument naming it when not a number.
absl::StatusOr<std::optional<int>> EnvInt(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::optional<int>();
  int value = 0;
  if (!absl::SimpleAtoi(env, &value))
    return Invalid(name, ": '", SafeText(env), "' is not a number");
  return std::optional<int>(value);
}

// The ranks: from the launcher's environment where the job named none.
absl::Status ApplyRankEnvironment(LoaderOptions* o) {
  auto world = EnvInt("WORLD_SIZE");
  auto rank = EnvInt("RANK");
  auto local = EnvInt("LOCAL_WORLD_SIZE");
  for (const auto* v : {&world, &rank, &local}) {
    if (!v->ok()) return v->status();
  }
  if (o->rank == 0 && o->world_size == 1 && world->has_value() && **world > 1) {
    if (!rank->has_value() || **rank < 0 || **rank >= **world) {
      return Invalid("RANK/WORLD_SIZE: need 0 <= RANK < WORLD_SIZE, got ",
                     rank->has_value() ? absl::StrCat(**rank) : "no RANK", "/", **world);
    }
    o->rank = **rank;
    o->world_size = **world;
  }
  if (o->local_ranks == 0) o->local_ranks = local->has_value() ? **local : 1;
  if (o->local_ranks < 1) return Invalid("--local-ranks (LOCAL_WORLD_SIZE): must be at least 1");
  return absl::OkStatus();
}

// A job name as it travels (gRPC fields, metric labels, logs): 1 to 128
// printable characters, no spaces or quotes.
bool IsJobName(const std::string& name) {
  return !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isgraph(c) && c != '"' && c != '\'' && c != '\\';
  });
}

// torchrun's name for the run: its run id (--rdzv-id; "none" unless given or
// --standalone), with its master's address and port, which no two running
// jobs share (a loopback master with this host's name). "" when not under
// torchrun.
std::string TorchrunJob() {
  const char* run = std::getenv("TORCHELASTIC_RUN_ID");
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (run == nullptr || *run == '\0') return "";
  std::string master = absl::StrCat(addr != nullptr ? addr : "", ":", port != nullptr ? port : "");
  if (addr == nullptr || absl::StartsWith(addr, "127.") || absl::string_view(addr) == "localhost" ||
      absl::string_view(addr) == "::1") {
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    master = absl::StrCat(host, "/", master);
  }
  std::string name = absl::StrCat("torchrun-", run, "@", master);
  for (char& c : name) {
    if (!absl::ascii_isgraph(c) || c == '"' || c == '\'' || c == '\\') c = '_';
  }
  return name.substr(0, 128);
}

absl::Status ApplyJobEnvironment(LoaderOptions* o) {
  const char* source = "--job";
  if (o->job.empty()) {
    if (const char* env = std::getenv("PREPFLOW_JOB"); env != nullptr && *env != '\0') {
      o->job = env;
      source = "PREPFLOW_JOB";
    } else {
      o->job = TorchrunJob();
    }
  }
  if (!o->job.empty() && !IsJobName(o->job)) {
    return Invalid(source, ": '", SafeText(o->job.substr(0, 200)),
                   "' is not a job name (1 to 128 printable characters, no spaces or quotes)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoaderOptions> ResolveOptions(const LoaderOptions& options) {
  if (absl::Status s = CheckNumbers(options); !s.ok()) return s;
  LoaderOptions resolved = options;
  if (absl::Status s = ApplyRankEnvironment(&resolved); !s.ok()) return s;
  if (absl::Status s = ApplyJobEnvironment(&resolved); !s.ok()) return s;
  if (resolved.echo_auto && resolved.world_size > 1) {
    // Each rank would choose from its own measurements: their epochs could
    // differ in length, and a rank left waiting in a collective hangs.
    return Invalid("--echo auto: not with ", resolved.world_size,
                   " ranks (each would choose its own factor, and ranks must run the same "
                   "number of batches); give every rank the same --echo N");
  }
  if (!resolved.offload.has_value()) {
    resolved.offload = OffloadMode();
    if (const char* env = std::getenv("PREPFLOW_OFFLOAD"); env != nullptr && *env != '\0') {
      auto parsed = ParseOffload(env);
      if (!parsed.ok()) return Invalid("PREPFLOW_OFFLOAD: ", parsed.status().message());
      resolved.offload = *parsed;
    }
  }
  if (resolved.scheduler.empty() && resolved.workers.empty()) {
    // The cluster's scheduler (or, without one, its workers), set once in
    // the trainers' environment, so that a job needs only --offload (or
    // PREPFLOW_OFFLOAD) to use the pool.
    if (const char* env = std::getenv("PREPFLOW_SCHEDULER")) resolved.scheduler = env;
    const char* env = std::getenv("PREPFLOW_WORKERS");
    if (env != nullptr && resolved.offload->kind != OffloadMode::kOff) {
      for (absl::string_view w : absl::StrSplit(env, ',', absl::SkipWhitespace())) {
        resolved.workers.emplace_back(absl::StripAsciiWhitespace(w));
      }
    }
  }
  const OffloadMode::Kind kind = resolved.offload->kind;
  if ((kind == OffloadMode::kRemote || kind == OffloadMode::kCut) && resolved.workers.empty() &&
      resolved.scheduler.empty()) {
    return Invalid("--offload ", OffloadModeString(*resolved.offload),
                   " needs workers (--workers host:port,... or --scheduler host:port)");
  }
  for (const std::string& w : resolved.workers) {
    if (absl::Status s = CheckWorkerAddress(w); !s.ok()) {
      return options.workers.empty() && options.scheduler.empty()
                 ? absl::InvalidArgumentError(absl::StrCat("PREPFLOW_WORKERS: ", s.message()))
                 : s;
    }
  }
  return resolved;
}

}  // namespace prepflow
