// The fixture of the Loader's tests with real prepflow-worker processes
// (tests/client/remote_test.cc, worker_faults_test.cc): the remote test set
// written once per suite, options for it, a run with an optional fault
// injected mid-run, and the local checksum to compare with.
#ifndef PREPFLOW_TESTS_TESTING_REMOTE_FIXTURE_H_
#define PREPFLOW_TESTS_TESTING_REMOTE_FIXTURE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/loader.h"
#include "gtest/gtest.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/test_util.h"

namespace prepflow::testing {

// AddressSanitizer keeps freed memory in quarantine (256 MB) and pads every
// block, so a sanitizer build checks memory bounds with this much more room;
// the plain build checks them as stated.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr long kSanitizerSlack = 768L << 20;
#else
inline constexpr long kSanitizerSlack = 0;
#endif

class RemoteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    WriteRemoteTestSet(dir_->Join("root/data"));
  }
  static void TearDownTestSuite() { delete dir_; }

  static LoaderOptions Options(const std::vector<std::string>& workers, const std::string& mode) {
    return RemoteTestOptions(dir_->Join("root/data"), workers, mode);
  }
  static Drained RunWith(const LoaderOptions& o,
                         const std::function<void(Loader&)>& fault = nullptr,
                         const std::function<bool(const Loader&)>& when = nullptr) {
    return Drain(o, fault, when);
  }
  static void ExpectExactlyOnce(const Drained& r, int64_t n, int epochs = 1) {
    ::prepflow::testing::ExpectExactlyOnce(r, n, epochs);
  }
  static uint64_t LocalChecksum(int epochs = 1) {
    LoaderOptions o = Options({}, "off");
    o.epochs = epochs;
    return RunWith(o).stats.checksum;
  }

  static inline TempDir* dir_ = nullptr;
};

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_REMOTE_FIXTURE_H_
