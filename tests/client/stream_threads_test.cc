// A trainer's threads do not grow with the worker streams it holds: streams
// share a few completion threads (client/remote/completion_threads.h), where
// each used to take a reader and a writer thread of its own. Real worker
// process, real gRPC on loopback; 1 stream against 48 to the same worker.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/process_stats.h"
#include "client/loader.h"
#include "gtest/gtest.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::prepflow::testing::WorkerProcess;

TEST(StreamThreadsTest, ThreadsDoNotGrowWithWorkerStreams) {
  TempDir dir;
  testing::WriteRemoteTestSet(dir.Join("root/data"));
  WorkerProcess w(dir.Join("root"), {"--listen", "0.0.0.0", "--insecure", "--max-streams", "64",
                                     "--max-streams-per-client", "64"});
  const std::string port = w.address().substr(w.address().rfind(':') + 1);
  // This process's threads at the first batch, every stream open, and the
  // run exactly once. The Loader opens one stream per address: the worker is
  // dialled at 127.0.0.1, 127.0.0.2, ... (all of 127/8 is loopback).
  const auto threads_with = [&](int streams) {
    std::vector<std::string> workers;
    for (int k = 1; k <= streams; ++k) workers.push_back(absl::StrCat("127.0.0.", k, ":", port));
    LoaderOptions o = testing::RemoteTestOptions(dir.Join("root/data"), workers, "remote");
    int threads = 0;
    const testing::Drained r = testing::Drain(o, [&](Loader&) { threads = ProcessThreadCount(); });
    testing::ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.workers_total, streams);
    return threads;
  };
  const int one = threads_with(1);
  const int many = threads_with(48);
  // gRPC's executor may add a thread or two per core under load, never one
  // per stream (two per stream would be 94 more).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("threads: %d with 1 stream, %d with 48\n", one, many);
  EXPECT_LE(many - one, 2 * cores + 4) << one << " threads with 1 stream, " << many << " with 48";
}

}  // namespace
}  // namespace prepflow
