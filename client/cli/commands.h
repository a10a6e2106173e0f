// prepflow's subcommands, one file each (run.cc, pack.cc, ...). Each prints
// through its Console and returns the process exit code: 0 success, 1 the
// job failed, 2 bad usage.
//
// Thread-safety: commands run on main's thread; a Console is not shared.
#ifndef PREPFLOW_CLIENT_CLI_COMMANDS_H_
#define PREPFLOW_CLIENT_CLI_COMMANDS_H_

#include <string>

#include "client/cli/console.h"

namespace prepflow::cli {

int RunCommand(Console& console, int argc, char** argv);          // prepflow run
int ProfileCommand(Console& console, int argc, char** argv);      // prepflow profile
int PackCommand(Console& console, int argc, char** argv);         // prepflow pack
int IndexCommand(Console& console, int argc, char** argv);        // prepflow index
int MaterializeCommand(Console& console, int argc, char** argv);  // prepflow materialize
int StrategiesCommand(Console& console, int argc, char** argv);   // prepflow strategies
int PlanCommand(Console& console, int argc, char** argv);         // prepflow plan
int DemoCommand(Console& console, int argc, char** argv);         // prepflow demo
int ProbeCommand(Console& console, int argc, char** argv);        // prepflow probe
int OpsCommand(Console& console, int argc, char** argv);          // prepflow ops
int OptionsCommand(Console& console, int argc, char** argv);      // prepflow options

// Runs a command. With --json among its flags, stdout ends with exactly one
// JSON line whatever happens: the command's summary (with an "error" field
// when the job failed), or {"command", "error", "exit_code"} when it failed
// before it had one (bad flags, a dataset that cannot be opened, a worker
// that refused the job).
using Command = int (*)(Console& console, int argc, char** argv);
int RunWithJsonContract(const std::string& command, Command f, int argc, char** argv);

}  // namespace prepflow::cli

#endif  // PREPFLOW_CLIENT_CLI_COMMANDS_H_
