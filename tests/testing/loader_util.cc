#include "tests/testing/loader_util.h"

#include "gtest/gtest.h"
#include "pipeline/checksum.h"

namespace prepflow::testing {

Drained Drain(Loader& loader, const std::function<void()>& after_first) {
  Drained d;
  bool first = true;
  while (true) {
    auto b = loader.Next();
    if (!b.ok()) {
      d.status = b.status();
      break;
    }
    if (*b == nullptr) break;
    const Batch& batch = **b;
    d.batch_sizes.push_back(static_cast<size_t>(batch.size()));
    EXPECT_EQ(batch.shape()[0], batch.size());
    for (int64_t i = 0; i < batch.size(); ++i) {
      d.indices.push_back(batch.indices()[i]);
      ++d.deliveries[batch.indices()[i]];
      d.recomputed +=
          SampleHash(batch.indices()[i], batch.labels()[i], batch.sample(i), batch.sample_bytes());
    }
    if (first && after_first) after_first();
    first = false;
  }
  d.stats = loader.Stats();
  return d;
}

Drained Drain(const LoaderOptions& options, const std::function<void(Loader&)>& after_first) {
  auto loader = Loader::Create(options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  if (!loader.ok()) return Drained{loader.status(), {}, {}, {}, {}, 0};
  Loader& l = **loader;
  return Drain(l, after_first ? [&] { after_first(l); } : std::function<void()>());
}

}  // namespace prepflow::testing
