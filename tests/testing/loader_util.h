// Draining a Loader in tests: everything a test may want to check about what
// it delivered.
#ifndef PREPFLOW_TESTS_TESTING_LOADER_UTIL_H_
#define PREPFLOW_TESTS_TESTING_LOADER_UTIL_H_

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "client/loader.h"

namespace prepflow::testing {

struct Drained {
  absl::Status status;  // the first error Next() returned, if any
  LoaderStats stats;
  std::vector<int64_t> indices;       // in delivery order
  std::map<int64_t, int> deliveries;  // index -> how many times
  std::vector<size_t> batch_sizes;
  std::vector<int64_t> end_positions;  // each batch's Batch::end_position
  uint64_t recomputed = 0;             // the checksum, recomputed from the delivered tensors
  // Data echoing: (index, copy) -> how many times, and the last one's hash.
  std::map<std::pair<int64_t, uint32_t>, int> copy_deliveries;
  std::map<std::pair<int64_t, uint32_t>, uint64_t> copy_hashes;
  // By epoch: (epoch, index, copy) -> how many times, and the last one's
  // hash; and each epoch's echo factor, as its batches said.
  std::map<std::tuple<uint64_t, int64_t, uint32_t>, int> epoch_copy_deliveries;
  std::map<std::tuple<uint64_t, int64_t, uint32_t>, uint64_t> epoch_copy_hashes;
  std::map<uint64_t, int> echo_by_epoch;
};

// The 96-image ImageFolder (4 classes of 24, 120 to 400 px) the suites with
// real workers share; fails the test if it cannot be written.
void WriteRemoteTestSet(const std::string& path);

// The options the suites with real workers run the remote test set with:
// imagenet-train, batches of 8, one thread, seed 3, items of 2 samples, the
// given workers and offload mode.
LoaderOptions RemoteTestOptions(const std::string& data, const std::vector<std::string>& workers,
                                const std::string& mode);

// Every one of `n` samples delivered `epochs` times, and no error.
void ExpectExactlyOnce(const Drained& r, int64_t n, int epochs = 1);

// Calls Next() until the end or an error; `fault` runs once, as soon as a
// batch is in hand and `when` holds (default: at the first batch), to inject
// a fault mid-run.
Drained Drain(Loader& loader, const std::function<void()>& fault = nullptr,
              const std::function<bool()>& when = nullptr);
// Creates a Loader from `options` (the test fails if it cannot) and drains it.
Drained Drain(const LoaderOptions& options, const std::function<void(Loader&)>& fault = nullptr,
              const std::function<bool(const Loader&)>& when = nullptr);

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_LOADER_UTIL_H_
