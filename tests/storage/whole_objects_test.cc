// WholeObjects on its own: copies served, the budget over what is kept and
// what is being fetched, failures handed to the readers that waited.
#include "storage/whole_objects.h"

#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

std::string Read(WholeObjects& w, const std::string& name, const std::string& body, uint64_t offset,
                 size_t length, const WholeObjects::Fetch& fetch) {
  std::string out(length, '\0');
  const absl::Status s = w.ReadAt(name, "", body.size(), offset, length,
                                  reinterpret_cast<uint8_t*>(out.data()), fetch, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(WholeObjects, ServesRangesFromOneFetchAndBoundsWhatItKeeps) {
  WholeObjectOptions o;
  o.max_bytes = 20;
  WholeObjects w(o);
  int fetches = 0;
  const std::string a = "0123456789", b = "abcdefghij", c = "ABCDEFGHIJ";
  auto of = [&](const std::string& body) {
    return [&fetches, body]() -> absl::StatusOr<std::string> {
      ++fetches;
      return body;
    };
  };
  EXPECT_EQ(Read(w, "a", a, 2, 3, of(a)), "234");
  EXPECT_EQ(Read(w, "a", a, 7, 3, of(a)), "789");
  EXPECT_EQ(fetches, 1);
  EXPECT_EQ(Read(w, "b", b, 0, 2, of(b)), "ab");
  EXPECT_EQ(Read(w, "c", c, 0, 2, of(c)), "AB");  // a, least recently used, is dropped
  EXPECT_EQ(w.counters().held_bytes, 20);
  EXPECT_EQ(Read(w, "a", a, 0, 1, of(a)), "0");
  EXPECT_EQ(fetches, 4);
  EXPECT_EQ(w.counters().refetches, 1);
  // A fetch that returns another size than the object had: the object changed.
  std::string out(1, '\0');
  const absl::Status changed = w.ReadAt(
      "d", "", 5, 0, 1, reinterpret_cast<uint8_t*>(out.data()),
      []() -> absl::StatusOr<std::string> { return std::string("xyz"); }, nullptr);
  EXPECT_TRUE(absl::IsDataLoss(changed)) << changed;
  EXPECT_THAT(changed.message(), HasSubstr("changed while being read"));
}

// Two objects that fit the budget only one at a time: the second fetch
// starts only once the first has finished (fetches in flight count against
// --whole-object-bytes too, or 64 readers could hold 64 shards).
TEST(WholeObjects, AFetchWaitsWhileOthersInFlightFillTheBudget) {
  WholeObjectOptions o;
  o.max_bytes = 15;
  WholeObjects w(o);
  absl::Notification first_in, release_first;
  std::atomic<bool> first_done{false}, overlapped{false};
  const std::string a(10, 'a'), b(10, 'b');
  std::thread first([&] {
    Read(w, "a", a, 0, 1, [&]() -> absl::StatusOr<std::string> {
      first_in.Notify();
      release_first.WaitForNotification();
      first_done = true;
      return a;
    });
  });
  first_in.WaitForNotification();
  std::thread second([&] {
    EXPECT_EQ(Read(w, "b", b, 0, 1,
                   [&]() -> absl::StatusOr<std::string> {
                     if (!first_done) overlapped = true;
                     return b;
                   }),
              "b");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // lets a wrong fetch start
  release_first.Notify();
  first.join();
  second.join();
  EXPECT_FALSE(overlapped) << "the second fetch ran while the first held the budget";
}

// Readers waiting on a fetch that fails get its error; the next reader
// tries again.
TEST(WholeObjects, AFailedFetchIsEveryWaitersAndNotKept) {
  WholeObjects w(WholeObjectOptions{});
  int fetches = 0;
  std::string out(1, '\0');
  auto failing = [&]() -> absl::StatusOr<std::string> {
    ++fetches;
    return absl::UnavailableError("storage down");
  };
  const absl::Status s =
      w.ReadAt("a", "", 3, 0, 1, reinterpret_cast<uint8_t*>(out.data()), failing, nullptr);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(Read(w, "a", "xyz", 1, 1, [] { return absl::StatusOr<std::string>("xyz"); }), "y");
  EXPECT_EQ(fetches, 1);
}

}  // namespace
}  // namespace prepflow
