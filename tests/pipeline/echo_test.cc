// Data echoing's parts: the echoed epoch order, the copies' random streams,
// and the store that hands one load to every copy.
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/rng.h"
#include "pipeline/core/wire.h"
#include "pipeline/reuse/echo_store.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

TEST(EchoOrderTest, EverySampleAppearsOncePerCopyWithinItsBlock) {
  std::vector<int64_t> order = EpochOrder(1000, 5, 2, true, 0, 1);
  const std::vector<int64_t> fresh = order;
  std::vector<uint32_t> copies;
  EchoOrder(&order, &copies, 3, 64, 5, 2);
  ASSERT_EQ(order.size(), 3000u);
  ASSERT_EQ(copies.size(), 3000u);
  std::map<int64_t, int> block_of;
  for (size_t i = 0; i < fresh.size(); ++i) block_of[fresh[i]] = static_cast<int>(i / 64);
  std::set<std::pair<int64_t, uint32_t>> seen;
  int adjacent = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_TRUE(seen.insert({order[i], copies[i]}).second) << order[i] << " copy " << copies[i];
    EXPECT_LT(copies[i], 3u);
    // Every copy of a sample lies in its fresh sample's block.
    EXPECT_EQ(static_cast<int>(i / (3 * 64)), block_of[order[i]]) << i;
    if (i > 0 && order[i] == order[i - 1]) ++adjacent;
  }
  EXPECT_EQ(seen.size(), 3000u);
  // Shuffled: copies are rarely next to each other (2 in 191 by chance).
  EXPECT_LT(adjacent, 60);
  // The same for the same (seed, epoch), another order for another epoch.
  std::vector<int64_t> again = fresh;
  std::vector<uint32_t> again_copies;
  EchoOrder(&again, &again_copies, 3, 64, 5, 2);
  EXPECT_EQ(again, order);
  EXPECT_EQ(again_copies, copies);
  std::vector<int64_t> other = fresh;
  EchoOrder(&other, &again_copies, 3, 64, 5, 3);
  EXPECT_NE(other, order);
}

TEST(EchoOrderTest, FactorOneChangesNothing) {
  std::vector<int64_t> order = EpochOrder(100, 1, 0, true, 0, 1);
  const std::vector<int64_t> fresh = order;
  std::vector<uint32_t> copies;
  EchoOrder(&order, &copies, 1, 16, 1, 0);
  EXPECT_EQ(order, fresh);
  EXPECT_EQ(copies, std::vector<uint32_t>(100, 0));
}

TEST(EchoCopiesTest, EachCopyDrawsItsOwnNumbersAfterTheEchoBoundary) {
  // Copy 0 draws exactly what the sample drew before echoing existed.
  EXPECT_EQ(SampleRng(9, 1, 77, 2).NextU64(), SampleRng(9, 1, 77, 2, 0).NextU64());
  EXPECT_NE(SampleRng(9, 1, 77, 2, 1).NextU64(), SampleRng(9, 1, 77, 2, 0).NextU64());
  EXPECT_NE(SampleRng(9, 1, 77, 2, 1).NextU64(), SampleRng(9, 1, 77, 2, 2).NextU64());
  // A pipeline whose random crop comes after the echo boundary (2): three
  // copies, three crops, each the same wherever it runs.
  auto p = testing::MakePipeline(R"pb(
    stages { decode {} }
    stages { resize { shorter_side: 64 } }
    stages { random_crop { size: 32 } }
    stages { random_horizontal_flip {} }
  )pb");
  const std::vector<uint8_t> jpeg = testing::Jpeg(120, 90, 3);
  std::set<std::vector<uint8_t>> outputs;
  for (uint32_t copy = 0; copy < 3; ++copy) {
    Workspace ws;
    Sample s;
    s.index = 4;
    s.copy = copy;
    s.echo_at = 2;
    uint8_t* bytes = ws.encoded.Reserve(jpeg.size());
    std::copy(jpeg.begin(), jpeg.end(), bytes);
    s.data = bytes;
    s.size = jpeg.size();
    s.shape = {static_cast<int64_t>(jpeg.size())};
    ASSERT_TRUE(p->Run(0, 4, s, ws).ok());
    outputs.insert(std::vector<uint8_t>(s.data, s.data + s.size));
  }
  EXPECT_EQ(outputs.size(), 3u);
}

// A value at the boundary: `index` repeated.
absl::Status MakeValue(Sample& s, Workspace& ws) {
  uint8_t* p = ws.encoded.Reserve(100);
  std::fill(p, p + 100, static_cast<uint8_t>(s.index));
  s.kind = ValueKind::kEncoded;
  s.data = p;
  s.size = 100;
  s.shape = {100};
  return absl::OkStatus();
}

TEST(EchoStoreTest, EachSampleIsLoadedOnceForAllItsCopies) {
  EchoStore store(1 << 20);
  std::atomic<int> loads{0};
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Workspace ws;
      for (int64_t i = 0; i < 200; ++i) {
        Sample s;
        s.index = i;
        s.copy = static_cast<uint32_t>(t);
        const absl::Status st = store.Get(s, ws, 4, [&] {
          loads.fetch_add(1);
          std::this_thread::yield();
          return MakeValue(s, ws);
        });
        if (!st.ok() || s.size != 100 || s.data[99] != static_cast<uint8_t>(i)) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(loads.load(), 200);
  EXPECT_EQ(store.stats().loads, 200);
  EXPECT_EQ(store.stats().taken, 600);
  EXPECT_EQ(store.stats().held_bytes, 0);  // every value taken by its last copy
}

// Echo stores of many jobs share one budget (a worker's): 6 jobs' stores
// reached 1.6 GB at a 100 MB --max-memory-bytes. What does not fit the
// shared budget is not kept, its later copies load it again, and every byte
// comes back when values are taken or the stores go.
TEST(EchoStoreTest, StoresSharingABudgetHoldNoMoreThanItTogether) {
  auto shared = std::make_shared<ByteBudget>(250);  // two values of ~110 bytes
  std::vector<std::unique_ptr<EchoStore>> stores;
  for (int j = 0; j < 3; ++j) stores.push_back(std::make_unique<EchoStore>(1 << 20, shared));
  Workspace ws;
  int loads = 0;
  auto get = [&](EchoStore& store, int64_t index) {
    Sample s;
    s.index = index;
    return store.Get(s, ws, 2, [&] {
      ++loads;
      return MakeValue(s, ws);
    });
  };
  for (auto& store : stores) ASSERT_TRUE(get(*store, 7).ok());  // 3 first copies
  EXPECT_LE(shared->held(), 250);
  EXPECT_GT(shared->held(), 0);
  for (auto& store : stores) ASSERT_TRUE(get(*store, 7).ok());  // one of them loads again
  EXPECT_EQ(loads, 4);
  EXPECT_EQ(shared->held(), 0) << "every value taken by its last copy";
  ASSERT_TRUE(get(*stores[0], 8).ok());  // held when the store goes
  EXPECT_GT(shared->held(), 0);
  stores.clear();
  EXPECT_EQ(shared->held(), 0);
}

TEST(EchoStoreTest, ValuesDroppedForRoomAreLoadedAgainAndErrorsReachEveryCopy) {
  EchoStore store(300);  // room for two values of ~110 bytes
  Workspace ws;
  int loads = 0;
  auto get = [&](int64_t index) {
    Sample s;
    s.index = index;
    return store.Get(s, ws, 2, [&] {
      ++loads;
      return MakeValue(s, ws);
    });
  };
  for (int64_t i = 0; i < 4; ++i) ASSERT_TRUE(get(i).ok());  // first copies: 4 loads
  for (int64_t i = 0; i < 4; ++i) ASSERT_TRUE(get(i).ok());  // 0 and 1 were dropped
  EXPECT_EQ(loads, 6);
  EXPECT_EQ(store.stats().reloads, 2);
  EXPECT_EQ(store.stats().held_bytes, 0);

  Sample s;
  s.index = 50;
  const absl::Status broken = absl::DataLossError("broken file");
  EXPECT_EQ(store.Get(s, ws, 3, [&] { return broken; }), broken);
  EXPECT_EQ(store.Get(s, ws, 3, [&] { return absl::OkStatus(); }), broken);
  EXPECT_EQ(store.Get(s, ws, 3, [&] { return absl::OkStatus(); }), broken);
}

}  // namespace
}  // namespace prepflow
