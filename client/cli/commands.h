// prepflow's subcommands. Each returns the process exit code: 0 success, 1 the
// job failed, 2 bad usage.
#ifndef PREPFLOW_CLIENT_CLI_COMMANDS_H_
#define PREPFLOW_CLIENT_CLI_COMMANDS_H_

namespace prepflow::cli {

int RunCommand(int argc, char** argv);      // prepflow run
int ProfileCommand(int argc, char** argv);  // prepflow profile
int PackCommand(int argc, char** argv);     // prepflow pack
int PlanCommand(int argc, char** argv);     // prepflow plan
int DemoCommand(int argc, char** argv);     // prepflow demo

}  // namespace prepflow::cli

#endif  // PREPFLOW_CLIENT_CLI_COMMANDS_H_
