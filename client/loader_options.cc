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
#include "base/text.h"
#include "pipeline/core/rng.h"
#include "pipeline/pipeline.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// The option `key` as `o` names it.
std::string Name(const LoaderOptions& o, const char* key) { return OptionName(key, o.surface); }

template <typename... Parts>
absl::Status Invalid(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// host:port with a numeric port, [v6]:port, or a gRPC URI (dns:///..., unix:...).
absl::Status CheckWorkerAddress(const std::string& address, const std::string& name) {
  if (absl::StrContains(address, ":/") || absl::StartsWith(address, "unix:")) {
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535 ||
      (address[0] == '[') != (address[colon - 1] == ']')) {
    return Invalid(name, ": '", SafeText(address),
                   "' is not host:port (e.g. worker1:7070, [::1]:7070)");
  }
  return absl::OkStatus();
}

// Every row's bounds, then what holds between options.
absl::Status CheckAll(const LoaderOptions& o) {
  if (absl::Status s = CheckOptions(LoaderOptionFields(), o, o.surface); !s.ok()) return s;
  if (o.rank >= o.world_size) {
    return Invalid(Name(o, "rank"), "/", Name(o, "world_size"),
                   ": need 0 <= rank < world_size, got ", o.rank, "/", o.world_size);
  }
  if (o.echo_auto && o.start_echo > o.max_echo) {
    return Invalid(Name(o, "start_echo"), ": must be 0 to ", Name(o, "max_echo"), " (", o.max_echo,
                   "), got ", o.start_echo);
  }
  if (o.max_batch_seconds > 0 && (o.echo_auto || o.echo > 1)) {
    return Invalid(Name(o, "max_batch_seconds"), ": not with ", Name(o, "echo"),
                   " (copies of a sample are not batched by length yet)");
  }
  if (o.pack_length > 0 && o.max_batch_seconds > 0) {
    return Invalid(Name(o, "pack_length"), ": not with ", Name(o, "max_batch_seconds"),
                   " (packed rows are all pack_length tokens)");
  }
  if (o.held_batches < 0 || o.held_batches > 64) {
    return Invalid("held_batches: must be in [0, 64], got ", o.held_batches);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RankSplit> ParseRankSplit(const std::string& name) {
  if (name == "pad") return RankSplit::kPad;
  if (name == "drop") return RankSplit::kDrop;
  if (name == "uneven") return RankSplit::kUneven;
  return Invalid("'", SafeText(name), "' is not pad, drop or uneven");
}

absl::StatusOr<OnError> ParseOnError(const std::string& name) {
  if (name == "skip") return OnError::kSkip;
  if (name == "fail") return OnError::kFail;
  return Invalid("'", SafeText(name), "' is not skip or fail");
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
    return Invalid("'", SafeText(text), "': ", why,
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
  if (o->local_ranks < 1) {
    return Invalid(Name(*o, "local_ranks"), " (LOCAL_WORLD_SIZE): must be at least 1");
  }
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
  std::string source = Name(*o, "job");
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
  if (absl::Status s = CheckAll(options); !s.ok()) return s;
  LoaderOptions resolved = options;
  ResolveFidelity(resolved.fidelity, &resolved.pipeline);
  if (absl::Status s = ApplyRankEnvironment(&resolved); !s.ok()) return s;
  if (absl::Status s = ApplyJobEnvironment(&resolved); !s.ok()) return s;
  if (resolved.echo_auto && resolved.world_size > 1) {
    // Each rank would choose from its own measurements: their epochs could
    // differ in length, and a rank left waiting in a collective hangs.
    return Invalid(Name(resolved, "echo"), " auto: not with ", resolved.world_size,
                   " ranks (each would choose its own factor, and ranks must run the same "
                   "number of batches); give every rank the same ",
                   Name(resolved, "echo"), " N");
  }
  if (!resolved.offload.has_value()) {
    resolved.offload = OffloadMode();
    if (const char* env = std::getenv("PREPFLOW_OFFLOAD"); env != nullptr && *env != '\0') {
      auto parsed = ParseOffload(env);
      if (!parsed.ok()) return Invalid("PREPFLOW_OFFLOAD: ", parsed.status().message());
      resolved.offload = *parsed;
    } else if (!options.workers.empty() || !options.scheduler.empty()) {
      // Workers named for this job are meant to be used.
      resolved.offload = *ParseOffload("auto");
      spdlog::info("{} given without {}: offloading with auto ({} off keeps every sample here)",
                   Name(resolved, options.workers.empty() ? "scheduler" : "workers"),
                   Name(resolved, "offload"), Name(resolved, "offload"));
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
    return Invalid(Name(resolved, "offload"), " ", OffloadModeString(*resolved.offload),
                   " needs workers (", Name(resolved, "workers"), " host:port,... or ",
                   Name(resolved, "scheduler"), " host:port)");
  }
  for (const std::string& w : resolved.workers) {
    if (absl::Status s = CheckWorkerAddress(w, Name(resolved, "workers")); !s.ok()) {
      return options.workers.empty() && options.scheduler.empty()
                 ? absl::InvalidArgumentError(absl::StrCat("PREPFLOW_WORKERS: ", s.message()))
                 : s;
    }
  }
  return resolved;
}

}  // namespace prepflow
