// `prepflow run`.
#include <optional>

#include "base/flags.h"
#include "client/cli/commands.h"
#include "client/cli/run_flags.h"
#include "nlohmann/json.hpp"
#include "storage/options.h"

namespace prepflow::cli {

int RunCommand(Console& console, int argc, char** argv) {
  RunFlags rf;
  FlagSet flags("prepflow run",
                "Runs a pipeline over a dataset on this machine's CPUs and reports "
                "throughput and the order-independent checksum.");
  rf.Register(flags, true);
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  const bool mix = rf.options.dataset.mix_size() > 0;
  if (rf.data.empty() && !mix) {
    return console.UsageError("prepflow run: --data (or --mix) is required", flags);
  }
  if (!rf.data.empty() && mix) {
    return console.UsageError("prepflow run: --data and --mix: give one of them", flags);
  }
  auto options = rf.ToOptions();
  if (!options.ok()) return console.Failure("run", options.status());
  RunOutcome outcome = ExecuteRun(console, "run", *options, rf.json, rf.metrics_port);
  if (rf.json && !outcome.summary.is_null()) console.PrintJson(outcome.summary);
  return outcome.exit_code;
}

}  // namespace prepflow::cli
