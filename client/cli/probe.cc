// `prepflow probe`.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "client/cli/commands.h"
#include "net/security.h"
#include "storage/options.h"

namespace prepflow::cli {

int ProbeCommand(Console& console, int argc, char** argv) {
  std::string address;
  double timeout_seconds = 5;
  SecurityOptions security_options;
  FlagSet flags("prepflow probe",
                "Checks that a prepflow-worker or prepflow-scheduler accepts connections: dials "
                "it and waits for the connection (TLS handshake included) to be ready. Exit 0 "
                "if it is, 1 if not: a liveness probe that notices a listener that has stopped "
                "accepting while its process stays up.");
  flags.String("address", &address, "host:port of the daemon");
  flags.Double("timeout-seconds", &timeout_seconds, "how long to wait for the connection");
  RegisterSecurityFlags(flags, &security_options, /*server=*/false);
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (address.empty()) return console.UsageError("prepflow probe: --address is required", flags);
  if (!(timeout_seconds > 0))
    return console.UsageError("prepflow probe: --timeout-seconds must be > 0", flags);
  auto security = LoadSecurity(security_options);
  if (!security.ok()) return console.Failure("probe", security.status());
  auto channel = SecureChannel(address, *security);
  const bool ready = channel->WaitForConnected(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  if (!ready) {
    return console.Failure("probe", absl::UnavailableError(absl::StrCat(
                                        address, " did not accept a connection within ",
                                        timeout_seconds, " s (--timeout-seconds)")));
  }
  std::printf("%s accepts connections\n", address.c_str());
  return kOk;
}

}  // namespace prepflow::cli
