#include "tests/testing/worker_process.h"

#include "gtest/gtest.h"

namespace prepflow::testing {

WorkerProcess::WorkerProcess(const std::string& data_root, const std::vector<std::string>& args) {
  auto p = prepflow::WorkerProcess::Start(std::string(PREPFLOW_BIN_DIR) + "/prepflow-worker",
                                          data_root, args);
  if (!p.ok()) {
    // Every test that makes one needs it: stop here rather than fail later.
    ADD_FAILURE() << p.status();
    std::abort();
  }
  process_ = *std::move(p);
}

std::unique_ptr<prepflow::WorkerProcess> StartScheduler(int port,
                                                        const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--port", std::to_string(port), "--heartbeat-seconds",
                                   "0.2",    "--expire-after",     "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto s = prepflow::WorkerProcess::StartDaemon(
      std::string(PREPFLOW_BIN_DIR) + "/prepflow-scheduler", args);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

}  // namespace prepflow::testing
