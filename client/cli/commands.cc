#include "client/cli/commands.h"

#include "absl/strings/str_cat.h"
#include "base/flags.h"

namespace prepflow::cli {

int RunWithJsonContract(const std::string& command, Command f, int argc, char** argv) {
  // --json, read with the commands' own rules even when their flags are wrong.
  bool json = false;
  FlagSet json_flag(absl::StrCat("prepflow ", command), "");
  json_flag.Bool("json", &json, "");
  json_flag.ParseKnown(argc, argv, 2);
  Console console;
  const int code = f(console, argc, argv);
  if (json && !console.json_printed() && !(code == kOk && console.last_error().empty())) {
    console.PrintJson(
        Json{{"command", command},
             {"error", console.last_error().empty() ? "failed" : console.last_error()},
             {"exit_code", code}});
  }
  return code;
}

}  // namespace prepflow::cli
