// What workers do to a job, with real prepflow-worker processes on
// loopback: a refusal, a kill, a restart, silence, a stall, a drain (by signal or by
// command), many streams, huge samples, a client that stops reading, a
// connection flood. Every sample is delivered exactly once whatever a worker
// does, and a worker holds to its memory budget whatever a job sends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pipeline/data/synthetic.h"
#include "proto/worker.grpc.pb.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/remote_fixture.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::prepflow::testing::WorkerProcess;
using ::testing::HasSubstr;

using RunResult = testing::Drained;
using ::prepflow::testing::kSanitizerSlack;
using ::prepflow::testing::RemoteTest;

TEST_F(RemoteTest, ARefusalStopsTheJobWithTheWorkersMessage) {
  TempDir other;
  WorkerProcess w(other.path());
  auto loader = Loader::Create(Options({w.address()}, "remote"));
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(loader.status().message(), HasSubstr(w.address()));
  EXPECT_THAT(loader.status().message(), HasSubstr("not below the data root"));

  LoaderOptions bad = Options({w.address()}, "cut=9");
  EXPECT_THAT(Loader::Create(bad).status().message(), HasSubstr("cut=9 is past the last stage"));
  EXPECT_THAT(Loader::Create(Options({}, "remote")).status().message(), HasSubstr("needs workers"));
}

TEST_F(RemoteTest, AKilledWorkerLosesNothing) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions o = Options({a.address(), b.address()}, "cut=2");
  o.epochs = 2;
  o.hedge_after = 0;  // re-issue alone must recover b's items (hedging would hide a bug in it)
  const RunResult r = RunWith(o, [&](Loader&) {
    b.Signal(SIGKILL);
    b.Wait();
  });
  ExpectExactlyOnce(r, 96, 2);
  EXPECT_EQ(r.stats.checksum, LocalChecksum(2));
  EXPECT_EQ(r.stats.workers_alive, 1);
  EXPECT_GE(r.stats.reissued_items, 1) << "b held items when it was killed";
  EXPECT_EQ(r.stats.hedged_items, 0);
}

// A worker listed with --workers that restarts (killed, then started again
// on its port) is dialled again and rejoins the run; nothing is lost or
// doubled. The consumer waits in the fault until it is back, so the run
// cannot end first.
TEST_F(RemoteTest, AStaticWorkerThatRestartsRejoinsTheRun) {
  const std::vector<std::string> flags = {"--threads", "1"};
  WorkerProcess a(dir_->Join("root"), flags);
  auto b = std::make_unique<WorkerProcess>(dir_->Join("root"), flags);
  const std::string address = b->address();
  LoaderOptions o = Options({a.address(), address}, "cut=2");
  o.epochs = 3;
  o.hedge_after = 0;
  bool rejoined = false;
  const RunResult r = RunWith(o, [&](Loader& loader) {
    b->Signal(SIGKILL);
    b->Wait();
    std::vector<std::string> again = flags;
    again.insert(again.end(), {"--port", address.substr(address.rfind(':') + 1)});
    b = std::make_unique<WorkerProcess>(dir_->Join("root"), again);
    for (int i = 0; i < 3000 && !rejoined; ++i) {
      for (const LoaderStats::WorkerStats& w : loader.Stats().workers) {
        rejoined = rejoined || (w.address == address && w.alive && w.streams >= 2);
      }
      if (!rejoined) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  EXPECT_TRUE(rejoined) << address << " was not dialled again after it restarted";
  ExpectExactlyOnce(r, 96, 3);
  EXPECT_EQ(r.stats.checksum, LocalChecksum(3));
  EXPECT_EQ(r.stats.workers_alive, 2);
}

TEST_F(RemoteTest, ASilentWorkerIsTimedOutAndItsItemsMove) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions o = Options({a.address(), b.address()}, "remote");
  o.worker_timeout_seconds = 1;
  o.hedge_after = 0;  // the timeout alone
  const RunResult r = RunWith(o, [&](Loader&) { b.Signal(SIGSTOP); });
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_EQ(r.stats.workers_alive, 1);
  EXPECT_GE(r.stats.reissued_items, 1);
}

TEST_F(RemoteTest, AStalledWorkersItemsAreHedgedLongBeforeTheTimeout) {
  // b stops answering (SIGSTOP: its connection stays up, so nothing fails)
  // with a timeout far longer than the run. Its items are copied to a as soon
  // as a sits idle; every sample still arrives exactly once, and b, never
  // timed out, keeps its place.
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions o = Options({a.address(), b.address()}, "remote");
  o.worker_timeout_seconds = 600;
  const RunResult r = RunWith(
      o, [&](Loader&) { b.Signal(SIGSTOP); },
      // Once both have answered, so that the latencies are known.
      [](const Loader& l) {
        const LoaderStats st = l.Stats();
        return st.workers.size() == 2 && st.workers[0].samples > 0 && st.workers[1].samples > 0;
      });
  b.Signal(SIGCONT);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_GE(r.stats.hedged_items, 1);
  EXPECT_GE(r.stats.hedge_wins, 1);
  EXPECT_EQ(r.stats.reissued_items, 0);  // nothing timed out
  EXPECT_EQ(r.stats.workers_alive, 2);
}

TEST_F(RemoteTest, AllWorkersGoneMeansTheJobFinishesLocally) {
  auto a = std::make_unique<WorkerProcess>(dir_->Join("root"),
                                           std::vector<std::string>{"--threads", "1"});
  const RunResult r = RunWith(Options({a->address()}, "cut=3"), [&](Loader&) { a.reset(); });
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_EQ(r.stats.workers_alive, 0);
  EXPECT_GT(r.stats.local_images, 0);
}

// Of two workers, the second has answered (so it holds items when told to go).
bool SecondWorkerAnswered(const Loader& l) {
  const LoaderStats st = l.Stats();
  return st.workers.size() == 2 && st.workers[1].samples > 0;
}

// SIGTERM mid-run: b tells the client it is leaving (DrainNotice), gets no
// new items, answers those it holds and those already on their way, and
// exits once the client closes its stream: nothing is re-issued, and b
// exits well before its 20 s of grace (Wait returns when it has).
TEST_F(RemoteTest, SigtermDrainsWithNothingReissuedAndExitsZero) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1", "--grace-seconds", "20"});
  int status = -1;
  LoaderOptions o = Options({a.address(), b.address()}, "remote");
  o.hedge_after = 0;  // anything b left unanswered could come back by re-issue alone
  const RunResult r = RunWith(
      o,
      [&](Loader&) {
        b.Signal(SIGTERM);
        status = b.Wait();
      },
      // Once b has answered, so that it holds items when told to go.
      SecondWorkerAnswered);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(r.stats.drained_workers, 1);
  EXPECT_EQ(r.stats.reissued_items, 0);
  EXPECT_EQ(r.stats.workers_alive, 1);
}

// The same drain by command (a preStop hook's, a node termination
// handler's): `prepflow-worker --drain --pid-file F` signals the worker F
// names, waits until it has left and exits 0; the worker removed its pid file.
TEST_F(RemoteTest, DrainCommandDrainsTheWorkerItsPidFileNamesWithNothingReissued) {
  const std::string pid_file = dir_->Join("b.pid");
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"),
                  {"--threads", "1", "--grace-seconds", "20", "--pid-file", pid_file});
  pid_t named = 0;
  std::ifstream(pid_file) >> named;
  ASSERT_EQ(named, b.pid());  // written before the port the test waited for
  int drain = -1, status = -1;
  LoaderOptions o = Options({a.address(), b.address()}, "remote");
  o.hedge_after = 0;
  const RunResult r = RunWith(
      o,
      [&](Loader&) {
        drain = std::system(
            absl::StrCat(PREPFLOW_BIN_DIR, "/prepflow-worker --drain --pid-file ", pid_file)
                .c_str());
        status = b.Wait();
      },
      SecondWorkerAnswered);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  ASSERT_TRUE(WIFEXITED(drain)) << drain;
  EXPECT_EQ(WEXITSTATUS(drain), 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(r.stats.drained_workers, 1);
  EXPECT_EQ(r.stats.reissued_items, 0);
  EXPECT_FALSE(std::filesystem::exists(pid_file));
}

// A worker that does not leave (stopped here: it cannot run its drain) is
// reported: --drain exits 1 after --grace-seconds + 10 s, so a hook does not
// pass for done. Let run again, the worker drains on the signal it was sent.
TEST_F(RemoteTest, DrainCommandExitsOneWhileTheWorkerIsStillThere) {
  const std::string pid_file = dir_->Join("w.pid");
  WorkerProcess w(dir_->Join("root"), {"--threads", "1", "--pid-file", pid_file});
  w.Signal(SIGSTOP);
  const int drain = std::system(absl::StrCat(PREPFLOW_BIN_DIR,
                                             "/prepflow-worker --drain --grace-seconds 0 "
                                             "--pid-file ",
                                             pid_file, " 2>/dev/null")
                                    .c_str());
  ASSERT_TRUE(WIFEXITED(drain)) << drain;
  // Else the worker was never told: the destructor kills it, no wait.
  ASSERT_EQ(WEXITSTATUS(drain), 1);
  w.Signal(SIGCONT);
  const int status = w.Wait();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(RemoteTest, ThirtyTwoStreamsOnOneWorkerStayBounded) {
  WorkerProcess w(dir_->Join("root"),
                  {"--threads", "2", "--max-streams", "40", "--max-items-per-stream", "2",
                   "--max-memory-bytes", "16000000"});
  const long start = w.PeakRssBytes();  // after start-up: libraries, threads, gRPC
  const uint64_t local = LocalChecksum();
  std::vector<std::thread> clients;
  std::vector<RunResult> runs(32);
  for (int c = 0; c < 32; ++c) {
    clients.emplace_back([&, c] { runs[c] = RunWith(Options({w.address()}, "remote")); });
  }
  for (std::thread& t : clients) t.join();
  int status = 0;
  ASSERT_EQ(waitpid(w.pid(), &status, WNOHANG), 0)
      << "the worker died: " << (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exited");
  for (int c = 0; c < 32; ++c) {
    ExpectExactlyOnce(runs[c], 96);
    EXPECT_EQ(runs[c].stats.checksum, local) << "client " << c;
    EXPECT_EQ(runs[c].stats.remote_images, 96) << "client " << c;
  }
  // Results, reads ahead and the threads' working memory are held to the
  // 16 MB budget; add 1 MiB per stream for gRPC's buffers and the job's
  // state.
  const long peak = w.PeakRssBytes();
  EXPECT_GT(start, 0);
  EXPECT_LT(peak - start, 16'000'000 + 32 * (1L << 20) + kSanitizerSlack)
      << "start-up RSS " << start << ", peak " << peak;
}

// Samples of 48 MB each (a 2000 px crop, normalized to float32): the worker
// admits items against half of --max-memory-bytes (here 400 MB: four
// samples), runs them in the quarter its threads may hold (one sample's
// 12 MB crop and 48 MB tensor), the client sizes its items to what the worker
// takes, and the worker's memory stays within the budget instead of growing
// with credits x item samples (2 x 8 x 48 MB before). A budget too small for
// one sample refuses the job, naming the numbers.
TEST_F(RemoteTest, HugeSamplesStayWithinTheWorkersMemoryBudget) {
  SyntheticFolderOptions small;
  small.classes = 2;
  small.images_per_class = 4;
  small.min_side = 64;
  small.max_side = 96;
  ASSERT_TRUE(WriteSyntheticImageFolder(dir_->Join("root/small"), small).ok());
  LoaderOptions o = Options({}, "remote");
  o.dataset.set_path(dir_->Join("root/small"));
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'huge' stages { decode {} } stages { random_resized_crop { size: 2000 } } "
      "stages { normalize {} }",
      &o.pipeline));
  o.batch_size = 4;
  o.item_samples = 8;
  const int64_t sample_bytes = int64_t{2000} * 2000 * 3 * 4;

  {
    WorkerProcess w(dir_->Join("root"), {"--threads", "1", "--max-memory-bytes", "400000000"});
    const long start = w.PeakRssBytes();
    o.workers = {w.address()};
    const RunResult r = RunWith(o);
    ExpectExactlyOnce(r, 8);
    EXPECT_EQ(r.stats.remote_images, 8);
    // Within the budget; far from 2 x 8 x 48 MB.
    const long peak = w.PeakRssBytes();
    EXPECT_GT(peak - start, 2 * sample_bytes);
    EXPECT_LT(peak - start, 400'000'000 + kSanitizerSlack) << "peak RSS " << peak;
  }
  {
    WorkerProcess w(dir_->Join("root"), {"--threads", "1", "--max-memory-bytes", "40000000"});
    o.workers = {w.address()};
    auto refused = Loader::Create(o);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(refused.status().message(), HasSubstr("did not open the job (RESOURCE_EXHAUSTED"));
    EXPECT_THAT(refused.status().message(),
                HasSubstr("one sample of pipeline huge is 48000000 bytes"));
    EXPECT_THAT(refused.status().message(), HasSubstr("--max-memory-bytes 40000000"));
  }
}

// The message opening job `job_id` over the dataset at `data` with the
// pipeline in text format.
proto::ClientMessage OpenMessage(const std::string& data, const std::string& job_id,
                                 const std::string& pipeline) {
  proto::DatasetSpec spec;
  spec.set_path(data);
  auto dataset = OpenDataset(spec);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  proto::ClientMessage open;
  proto::JobOpen* job = open.mutable_open();
  job->set_job_id(job_id);
  *job->mutable_dataset() = spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(pipeline, job->mutable_pipeline()));
  if (dataset.ok()) {
    job->set_dataset_size((*dataset)->size());
    job->set_dataset_fingerprint((*dataset)->fingerprint());
  }
  return open;
}

// A client that opened job `job_id` on a worker, over the remote test set,
// with the pipeline that makes 12 MB samples (a 1000 px crop as float32),
// sent `items` items of one sample each, and reads nothing after the job
// opened; its transport still answers pings (a live client that stopped
// reading).
class StalledClient {
 public:
  static constexpr int64_t kSampleBytes = int64_t{1000} * 1000 * 3 * 4;

  void Start(const std::string& address, const std::string& data, const std::string& job_id,
             int items) {
    stub_ =
        proto::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    stream_ = stub_->Process(&context_);
    const proto::ClientMessage open =
        OpenMessage(data, job_id,
                    "name: 'big' stages { decode {} } stages { random_resized_crop { size: "
                    "1000 } } stages { normalize {} }");
    proto::WorkerMessage opened;
    ASSERT_TRUE(stream_->Write(open));
    ASSERT_TRUE(stream_->Read(&opened));
    ASSERT_TRUE(opened.has_opened()) << opened.DebugString();
    for (int item = 0; item < items; ++item) {
      proto::ClientMessage m;
      m.mutable_item()->set_item_id(item + 1);
      m.mutable_item()->set_cut(3);
      m.mutable_item()->add_indices(item);
      ASSERT_TRUE(stream_->Write(m));
    }
  }
  ~StalledClient() {
    if (stream_ == nullptr) return;
    context_.TryCancel();
    (void)stream_->Finish();
  }

 private:
  std::unique_ptr<proto::Worker::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<proto::ClientMessage, proto::WorkerMessage>> stream_;
};

// The link probe: a stream that asks for one gets it right after JobOpened,
// in equal chunks, capped by the worker's --max-probe-bytes, and then its
// results; a stream that asks for none, or for a negative amount, gets its
// results straight away, and one asking for the most an int64 holds gets the
// cap.
TEST_F(RemoteTest, TheLinkProbeComesBeforeAnyResultAndWithinTheWorkersCap) {
  WorkerProcess w(dir_->Join("root"), {"--threads", "1", "--max-probe-bytes", "600000"});
  for (const int64_t asked :
       {int64_t{4} << 20, int64_t{0}, int64_t{-5}, std::numeric_limits<int64_t>::max()}) {
    auto stub = proto::Worker::NewStub(
        grpc::CreateChannel(w.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    auto stream = stub->Process(&context);
    proto::ClientMessage open = OpenMessage(dir_->Join("root/data"), "probe",
                                            "name: 'p' stages { decode {} } stages { resize "
                                            "{ shorter_side: 8 } }");
    open.mutable_open()->set_probe_bytes(asked);
    ASSERT_TRUE(stream->Write(open));
    proto::ClientMessage item;
    item.mutable_item()->set_item_id(1);
    item.mutable_item()->set_cut(2);
    item.mutable_item()->add_indices(0);
    ASSERT_TRUE(stream->Write(item));
    stream->WritesDone();
    std::vector<proto::WorkerMessage> got;
    for (proto::WorkerMessage m; stream->Read(&m);) got.push_back(m);
    ASSERT_TRUE(stream->Finish().ok());
    // 600000 bytes: three chunks of 200000 (at most 256 KiB each).
    const size_t chunks = asked > 0 ? 3 : 0;
    ASSERT_EQ(got.size(), 2 + chunks) << "asked " << asked;
    EXPECT_TRUE(got.front().has_opened());
    for (size_t i = 1; i <= chunks; ++i) {
      ASSERT_TRUE(got[i].has_probe());
      EXPECT_EQ(got[i].probe().count(), 3);
      EXPECT_EQ(got[i].probe().padding().size(), 200000u);
    }
    EXPECT_TRUE(got.back().has_result());
  }
}

// A client that opens a job, sends items and never reads the replies held
// the worker's whole memory budget: another job's items waited until their
// client gave the worker up (--worker-timeout) and ran them locally. Past
// --reply-timeout-seconds the stalled stream is cancelled, its results
// dropped, and the other job is served remotely.
TEST_F(RemoteTest, AClientThatStopsReadingIsCutOffAndOthersAreServed) {
  // Results may hold half the budget: 49 MB, four items of one 12 MB sample.
  WorkerProcess w(dir_->Join("root"),
                  {"--threads", "1", "--max-memory-bytes", "98000000", "--max-items-per-stream",
                   "8", "--reply-timeout-seconds", "2"});
  StalledClient stalled;
  stalled.Start(w.address(), dir_->Join("root/data"), "stops-reading", 4);
  const RunResult r = RunWith(Options({w.address()}, "remote"));
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_EQ(r.stats.remote_images, 96) << "the worker was given up for a client that never reads";
}

// The worker's whole footprint, not its results alone: with
// --max-memory-bytes B its RSS stays under B plus its base (the process as
// started, and 1 MiB per stream) while everything that takes memory runs at
// once on six threads: a client that stopped reading holds results, a job of
// 3.5-megapixel PNGs and progressive JPEGs decoded at full size (libjpeg's
// coefficients, OpenCV's copies, every op's output), and a job echoing its
// samples. Before, the threads' working memory was outside the budget (a
// 64 MP JPEG took 427 MB of it at a 50 MB budget) and results alone could take
// all of B: this run grew the worker by 313-323 MB against a 240 MB budget
// (now about 207 MB).
TEST_F(RemoteTest, TheWorkersRssStaysWithinItsBudgetForAnyMix) {
  const std::string large = dir_->Join("root/large");
  for (int i = 0; i < 6; ++i) {
    const bool png = i % 2 == 0;
    testing::WriteFile(
        absl::StrCat(large, "/c", i % 3, "/img", i, png ? ".png" : ".jpg"),
        SyntheticImage(2200, 1600, 40 + i, 20 * i,
                       png ? SyntheticFormat::kPng : SyntheticFormat::kProgressiveJpeg));
  }
  constexpr int64_t kBudget = 240'000'000;  // results 120 MB, reads ahead and echo 60, working 60
  WorkerProcess w(dir_->Join("root"),
                  {"--threads", "6", "--max-memory-bytes", absl::StrCat(kBudget),
                   "--max-items-per-stream", "16", "--reply-timeout-seconds", "600"});
  const long start = w.PeakRssBytes();
  StalledClient stalled;  // 9 x 12 MB of results held, unsent
  stalled.Start(w.address(), dir_->Join("root/data"), "stalled", 9);

  LoaderOptions big = Options({w.address()}, "remote");
  big.dataset.set_path(large);
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'full-size' stages { decode {} } stages { resize { height: 224 width: 224 "
      "interpolation: INTERPOLATION_BICUBIC } } stages { normalize {} }",
      &big.pipeline));
  big.item_samples = 1;
  big.batch_size = 2;
  big.epochs = 2;
  LoaderOptions echoed = Options({w.address()}, "remote");
  echoed.echo = 4;
  RunResult big_run, echo_run;
  std::thread t([&] { big_run = RunWith(big); });
  echo_run = RunWith(echoed);
  t.join();
  ExpectExactlyOnce(big_run, 6, 2);
  EXPECT_EQ(big_run.stats.remote_images, 12) << "a sample was refused or failed on the worker";
  EXPECT_EQ(echo_run.stats.images, 96 * 4);
  EXPECT_EQ(echo_run.stats.errors, 0);
  int status = 0;
  ASSERT_EQ(waitpid(w.pid(), &status, WNOHANG), 0) << "the worker died";
  const long peak = w.PeakRssBytes();
  EXPECT_LT(peak - start, kBudget + 3 * (1L << 20) + kSanitizerSlack)
      << "start-up RSS " << start << ", peak " << peak;
  std::printf("worker RSS: start-up %ld, peak %ld, growth %ld of a budget of %ld\n", start, peak,
              peak - start, static_cast<long>(kBudget));
}

// Idle connections past the worker's open-files limit make accept4 fail
// (EMFILE); gRPC then stops accepting for good while the process stays up.
// The worker notices, restarts its listener (closing every connection of the
// old one, the flood's included), and the next job gets remote samples.
TEST_F(RemoteTest, AConnectionFloodDoesNotKillTheListener) {
  WorkerProcess w(dir_->Join("root"), {"--threads", "1"});
  // A low limit for the worker alone: what it has open now, plus a little.
  int open_now = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", w.pid(), "/fd"))) {
    (void)e;
    ++open_now;
  }
  const rlimit low = {static_cast<rlim_t>(open_now + 16), static_cast<rlim_t>(open_now + 16)};
  ASSERT_EQ(prlimit(w.pid(), RLIMIT_NOFILE, &low, nullptr), 0) << std::strerror(errno);

  const std::string port = w.address().substr(w.address().rfind(':') + 1);
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> flood;
  for (int i = 0; i < 64; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
      close(fd);
      break;
    }
    flood.push_back(fd);
  }
  // 64 connections for 16 free descriptors: the acceptor runs out. Wait
  // until the worker answers again (its restarted listener); the flood's
  // connections were closed with the old one.
  auto channel = grpc::CreateChannel(w.address(), grpc::InsecureChannelCredentials());
  EXPECT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60)))
      << "the worker stopped accepting connections for good";
  for (int fd : flood) close(fd);

  LoaderOptions o = Options({w.address()}, "remote");
  o.connect_timeout_seconds = 60;
  const RunResult r = RunWith(o);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.remote_images, 96) << "the worker stopped accepting connections";
  int status = 0;
  EXPECT_EQ(waitpid(w.pid(), &status, WNOHANG), 0) << "the worker exited";
}

}  // namespace
}  // namespace prepflow
