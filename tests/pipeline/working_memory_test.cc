#include "pipeline/core/working_memory.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/image_decode.h"
#include "pipeline/core/op.h"
#include "pipeline/data/synthetic.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

// 4 MB over 2 threads: a share of 1 MB each, at most 3 MB for one thread.
constexpr int64_t kBytes = 4 << 20;

TEST(WorkingMemory, SharesAndTheMost) {
  WorkingMemory memory(kBytes, 2, "the test's 4 MB");
  EXPECT_EQ(memory.share(), 1 << 20);
  EXPECT_EQ(memory.most(), 3 << 20);
}

TEST(WorkingMemory, ANeedPastTheMostIsRefusedNamingTheLimit) {
  WorkingMemory memory(kBytes, 2, "the test's 4 MB");
  MemoryMeter meter(&memory);
  ASSERT_TRUE(meter.Charge(2 << 20).ok());
  const absl::Status refused = meter.Charge(2 << 20);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("needs 4194304 bytes of working memory"));
  EXPECT_THAT(refused.message(), HasSubstr("the test's 4 MB"));
  EXPECT_EQ(meter.held(), 2 << 20);  // nothing counted for the refusal
  meter.Uncharge(2 << 20);
  meter.EndSample();
  EXPECT_EQ(memory.past_share(), 0);
}

// Two threads past their share at once would hold 6 MB of 4: the second
// waits until the first's sample ends. The wait is observed through the
// count of waits, not a clock.
TEST(WorkingMemory, OneThreadAtATimeGoesPastItsShare) {
  WorkingMemory memory(kBytes, 2, "4 MB");
  MemoryMeter first(&memory), second(&memory);
  ASSERT_TRUE(first.Charge(2 << 20).ok());
  EXPECT_TRUE(first.past_share());
  EXPECT_TRUE(second.Charge(512 << 10).ok());  // within its share: no wait
  std::atomic<bool> charged{false};
  std::thread t([&] {
    ASSERT_TRUE(second.Charge(2 << 20).ok());
    charged = true;
  });
  while (memory.waits() == 0) std::this_thread::yield();
  EXPECT_FALSE(charged);
  first.Uncharge(2 << 20);
  first.EndSample();
  t.join();
  EXPECT_TRUE(charged);
  EXPECT_TRUE(second.past_share());
  EXPECT_EQ(memory.past_share(), 1);
}

TEST(WorkingMemory, BuffersAreCountedAndEndSampleFreesThePastShare) {
  WorkingMemory memory(kBytes, 2, "4 MB");
  Workspace ws(&memory);
  ws.encoded.Reserve(100'000);
  EXPECT_EQ(ws.meter->held(), static_cast<int64_t>(ws.encoded.capacity()));
  ws.scratch[0].Reserve(2'000'000);
  EXPECT_TRUE(ws.meter->past_share());
  ws.EndSample();
  EXPECT_EQ(ws.scratch[0].capacity(), 0u);  // the largest went
  EXPECT_GT(ws.encoded.capacity(), 0u);     // what fits the share stays
  EXPECT_FALSE(ws.meter->past_share());
  EXPECT_EQ(memory.past_share(), 0);
  // Past the most: the growth throws a bad_alloc that names the limit, and
  // leaves the buffer as it was.
  try {
    ws.scratch[1].Reserve(5'000'000);
    FAIL() << "no exception";
  } catch (const std::bad_alloc& e) {
    EXPECT_THAT(OutOfMemoryMessage(e), HasSubstr("of working memory"));
  }
  EXPECT_EQ(ws.scratch[1].capacity(), 0u);
  ws.EndSample();
}

TEST(WorkingMemory, AMovedBufferIsCountedOnce) {
  WorkingMemory memory(kBytes, 1, "4 MB");
  MemoryMeter meter(&memory);
  {
    Buffer a;
    a.set_meter(&meter);
    a.Reserve(10'000);
    Buffer b(std::move(a));
    EXPECT_EQ(a.capacity(), 0u);
    EXPECT_EQ(meter.held(), static_cast<int64_t>(b.capacity()));
  }
  EXPECT_EQ(meter.held(), 0);
}

// The decoder counts what libjpeg holds for a progressive file (every
// coefficient until the last scan) before it allocates, and OpenCV's copy
// of a PNG; refused, it is ready for the next image.
TEST(WorkingMemory, TheDecoderCountsItsLibrariesAndRecovers) {
  const std::vector<uint8_t> baseline = SyntheticImage(1200, 900, 1, 30, SyntheticFormat::kJpeg);
  const std::vector<uint8_t> progressive =
      SyntheticImage(1200, 900, 1, 30, SyntheticFormat::kProgressiveJpeg);
  const std::vector<uint8_t> png = SyntheticImage(1600, 1200, 1, 30, SyntheticFormat::kPng);
  // 1200 x 900 x 3 = 3.24 MB of pixels; 3.4 MB of progressive coefficients
  // more (4:2:0); for the 1600 x 1200 PNG, 5.76 MB of pixels twice (OpenCV's
  // BGR image and the RGB output) and 1 MB of rows.
  WorkingMemory memory(8 << 20, 1, "8 MB");  // at most 8 MB for one thread
  Workspace ws(&memory);
  const DecodeOptions options;
  DecodedImage image;
  ASSERT_TRUE(
      ws.decoder.Decode(baseline.data(), baseline.size(), options, nullptr, &ws.scratch[0], &image)
          .ok());
  ws.EndSample();
  ASSERT_TRUE(
      ws.decoder
          .Decode(progressive.data(), progressive.size(), options, nullptr, &ws.scratch[0], &image)
          .ok());
  ws.EndSample();
  const absl::Status refused =
      ws.decoder.Decode(png.data(), png.size(), options, nullptr, &ws.scratch[0], &image);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("8 MB"));
  ws.EndSample();
  EXPECT_EQ(ws.meter->held(), static_cast<int64_t>(ws.scratch[0].capacity()));

  WorkingMemory small(5 << 20, 1, "5 MB");  // the pixels fit, the coefficients do not
  Workspace tight(&small);
  EXPECT_TRUE(
      tight.decoder
          .Decode(baseline.data(), baseline.size(), options, nullptr, &tight.scratch[0], &image)
          .ok());
  tight.EndSample();
  tight.scratch[0].Release();
  const absl::Status over = tight.decoder.Decode(progressive.data(), progressive.size(), options,
                                                 nullptr, &tight.scratch[0], &image);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  tight.EndSample();
  // libjpeg was left ready: the next baseline image decodes.
  EXPECT_TRUE(
      tight.decoder
          .Decode(baseline.data(), baseline.size(), options, nullptr, &tight.scratch[0], &image)
          .ok());
  EXPECT_EQ(tight.meter->held(), static_cast<int64_t>(tight.scratch[0].capacity()));
}

}  // namespace
}  // namespace prepflow
