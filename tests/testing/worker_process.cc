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

}  // namespace prepflow::testing
