// prepflow's subcommands. Each returns the process exit code: 0 success, 1 the
// job failed, 2 bad usage.
#ifndef PREPFLOW_CLIENT_CLI_COMMANDS_H_
#define PREPFLOW_CLIENT_CLI_COMMANDS_H_

#include <string>

namespace prepflow::cli {

int RunCommand(int argc, char** argv);          // prepflow run
int ProfileCommand(int argc, char** argv);      // prepflow profile
int PackCommand(int argc, char** argv);         // prepflow pack
int IndexCommand(int argc, char** argv);        // prepflow index
int MaterializeCommand(int argc, char** argv);  // prepflow materialize
int StrategiesCommand(int argc, char** argv);   // prepflow strategies
int PlanCommand(int argc, char** argv);         // prepflow plan
int DemoCommand(int argc, char** argv);         // prepflow demo
int ProbeCommand(int argc, char** argv);        // prepflow probe
int OpsCommand(int argc, char** argv);          // prepflow ops

// Runs a command. With --json among its flags, stdout ends with exactly one
// JSON line whatever happens: the command's summary (with an "error" field
// when the job failed), or {"command", "error", "exit_code"} when it failed
// before it had one (bad flags, a dataset that cannot be opened, a worker
// that refused the job).
int RunWithJsonContract(const std::string& command, int (*f)(int, char**), int argc, char** argv);

}  // namespace prepflow::cli

#endif  // PREPFLOW_CLIENT_CLI_COMMANDS_H_
