#include "tests/testing/loader_util.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pipeline/core/checksum.h"
#include "pipeline/data/synthetic.h"

namespace prepflow::testing {

// Far above any run here (a few seconds; under a minute with sanitizers on CI).
constexpr int kDrainDeadlineSeconds = 120;

void WriteRemoteTestSet(const std::string& path) {
  SyntheticFolderOptions o;
  o.classes = 4;
  o.images_per_class = 24;
  o.min_side = 120;
  o.max_side = 400;
  ASSERT_TRUE(WriteSyntheticImageFolder(path, o).ok()) << path;
}

LoaderOptions RemoteTestOptions(const std::string& data, const std::vector<std::string>& workers,
                                const std::string& mode) {
  LoaderOptions o;
  o.dataset.set_path(data);
  o.pipeline = *LoadPipelineSpec("imagenet-train");
  o.batch_size = 8;
  o.threads = 1;
  o.seed = 3;
  o.workers = workers;
  o.offload = *ParseOffload(mode);
  o.item_samples = 2;
  return o;
}

void ExpectExactlyOnce(const Drained& r, int64_t n, int epochs) {
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(static_cast<int64_t>(r.deliveries.size()), n);
  for (const auto& [index, count] : r.deliveries) ASSERT_EQ(count, epochs) << "index " << index;
  EXPECT_EQ(r.stats.images, n * epochs);
  EXPECT_EQ(r.stats.errors, 0);
}

Drained Drain(Loader& loader, const std::function<void()>& fault,
              const std::function<bool()>& when) {
  Drained d;
  bool pending = fault != nullptr;
  // A lost item would make Next() wait for ever: fail fast, saying how far
  // the run got (worker processes end with this one: PR_SET_PDEATHSIG).
  absl::Notification finished;
  std::thread deadline([&] {
    if (finished.WaitForNotificationWithTimeout(absl::Seconds(kDrainDeadlineSeconds))) return;
    const LoaderStats st = loader.Stats();
    std::fprintf(stderr,
                 "FAILED: the run did not finish within %d s (a lost item?): %lld images "
                 "delivered, %d of %d workers alive, %lld items reissued, %lld hedged\n",
                 kDrainDeadlineSeconds, static_cast<long long>(st.images), st.workers_alive,
                 st.workers_total, static_cast<long long>(st.reissued_items),
                 static_cast<long long>(st.hedged_items));
    std::_Exit(1);
  });
  while (true) {
    auto b = loader.Next();
    if (!b.ok()) {
      d.status = b.status();
      break;
    }
    if (*b == nullptr) break;
    const Batch& batch = **b;
    d.batch_sizes.push_back(static_cast<size_t>(batch.size()));
    d.end_positions.push_back(batch.end_position());
    EXPECT_EQ(batch.shape()[0], batch.size());
    d.echo_by_epoch[batch.epoch()] = batch.echo();
    for (int64_t i = 0; i < batch.size(); ++i) {
      const std::tuple<uint64_t, int64_t, uint32_t> key{batch.epoch(), batch.indices()[i],
                                                        batch.copies()[i]};
      ++d.epoch_copy_deliveries[key];
      d.epoch_copy_hashes[key] =
          SampleHash(batch.indices()[i], batch.labels()[i], batch.sample(i), batch.sample_bytes());
      d.indices.push_back(batch.indices()[i]);
      ++d.deliveries[batch.indices()[i]];
      ++d.copy_deliveries[{batch.indices()[i], batch.copies()[i]}];
      d.copy_hashes[{batch.indices()[i], batch.copies()[i]}] =
          SampleHash(batch.indices()[i], batch.labels()[i], batch.sample(i), batch.sample_bytes());
      d.recomputed +=
          SampleHash(batch.indices()[i], batch.labels()[i], batch.sample(i), batch.sample_bytes());
    }
    if (pending && (!when || when())) {
      fault();
      pending = false;
    }
  }
  d.stats = loader.Stats();
  finished.Notify();
  deadline.join();
  return d;
}

Drained Drain(const LoaderOptions& options, const std::function<void(Loader&)>& fault,
              const std::function<bool(const Loader&)>& when) {
  auto loader = Loader::Create(options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  if (!loader.ok()) {
    Drained failed;
    failed.status = loader.status();
    return failed;
  }
  Loader& l = **loader;
  return Drain(l, fault ? [&] { fault(l); } : std::function<void()>(),
               when ? [&] { return when(l); } : std::function<bool()>());
}

}  // namespace prepflow::testing
