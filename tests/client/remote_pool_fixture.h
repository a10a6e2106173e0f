// RemotePool's test fixture: fake streams the test plays the worker behind,
// and a fake clock. No process, socket or sleep.
#ifndef PREPFLOW_TESTS_CLIENT_REMOTE_POOL_FIXTURE_H_
#define PREPFLOW_TESTS_CLIENT_REMOTE_POOL_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/remote/remote_pool.h"
#include "gtest/gtest.h"

namespace prepflow::testing {

// One stream: records what the pool sends; the test plays the worker.
struct FakeStream : WorkerStream {
  std::string address;
  Handlers handlers;
  bool started = false, closed = false, cancelled = false;
  std::vector<proto::WorkItem> sent;
  int64_t bytes = 0;

  proto::JobOpen open;  // what Start sent

  void Start(const proto::JobOpen& job) override {
    started = true;
    open = job;
  }
  void Send(proto::WorkItem item) override { sent.push_back(std::move(item)); }
  void Close() override { closed = true; }
  void Cancel() override { cancelled = true; }
  int64_t received_bytes() const override { return bytes; }
  int64_t receive_cpu_nanos() const override { return 0; }
};

class RemotePoolTest : public ::testing::Test {
 protected:
  RemotePoolTest() : batch_(ValueType{ValueKind::kTensor, {1}}, 64) {
    std::vector<int64_t> indices(64);
    for (int i = 0; i < 64; ++i) indices[i] = 1000 + i;
    batch_.Reset(/*epoch=*/3, 0, indices);
  }

  void Make(RemotePoolOptions options = {}, int64_t probe_bytes = 0, int echo = 1) {
    RemotePool::Callbacks cb;
    cb.result = [this](RemoteItem item, std::shared_ptr<const ReceivedMessage> answer,
                       const std::string& address) {
      for (int64_t slot : item.slots) ++delivered_[slot];
      answered_by_.push_back(address);
      owed_while_delivering_.push_back(pool_->owed_items());
      (void)answer;
    };
    cb.run_locally = [this](RemoteItem item) {
      for (int64_t slot : item.slots) ++local_[slot];
    };
    cb.failed = [this](const absl::Status& s) { refusal_ = s; };
    cb.changed = [this] { ++changes_; };
    StreamFactory factory = [this](const std::string& address, const std::string&,
                                   WorkerStream::Handlers handlers) {
      auto s = std::make_unique<FakeStream>();
      s->address = address;
      s->handlers = std::move(handlers);
      streams_.push_back(s.get());
      return s;
    };
    proto::JobOpen open;
    open.set_job_id("job-test");
    open.set_probe_bytes(probe_bytes);
    open.set_echo(echo);
    pool_ = std::make_unique<RemotePool>(options, open, factory, cb, [this] { return now_; });
  }

  // Adds a worker and has it open the job with `credits`.
  FakeStream* Open(const std::string& address, int credits, const std::string& worker_id = "",
                   double granted = 0, int cores = 4, int64_t cache_bytes = 0) {
    pool_->Add(address, worker_id, granted);
    FakeStream* s = streams_.back();
    proto::JobOpened opened;
    opened.set_max_items_in_flight(credits);
    opened.set_threads(cores);
    opened.set_cores(cores);
    opened.set_cache_bytes(cache_bytes);
    s->handlers.opened(opened);
    return s;
  }

  void Submit(std::vector<int64_t> slots) { pool_->Submit(RemoteItem{&batch_, slots, 2}); }

  // The worker behind `s` answers the item it was sent as its `k`-th.
  void Answer(FakeStream* s, size_t k, int64_t wire_bytes = 100, double run_seconds = 0) {
    const proto::WorkItem& item = s->sent.at(k);
    auto answer = std::make_shared<ReceivedMessage>();
    proto::ItemResult* r = answer->message.mutable_result();
    r->set_item_id(item.item_id());
    r->set_run_seconds(run_seconds);
    for (int64_t index : item.indices()) {
      proto::SampleResult* sr = r->add_samples();
      sr->set_index(index);
      sr->set_read_cpu_seconds(0.001);
    }
    answer->payloads.resize(item.indices_size());
    answer->wire_bytes = static_cast<size_t>(wire_bytes);
    s->handlers.result(answer);
  }

  int64_t Delivered() const {
    int64_t n = 0;
    for (const auto& [slot, count] : delivered_) n += count;
    for (const auto& [slot, count] : local_) n += count;
    return n;
  }
  // Every slot in `slots` arrived exactly once, remotely or locally.
  void ExpectExactlyOnce(const std::vector<int64_t>& slots) {
    for (int64_t slot : slots) {
      const int remote = delivered_.count(slot) ? delivered_.at(slot) : 0;
      const int local = local_.count(slot) ? local_.at(slot) : 0;
      EXPECT_EQ(remote + local, 1) << "slot " << slot;
    }
  }

  Batch batch_;
  int64_t now_ = 1'000'000'000;
  std::vector<FakeStream*> streams_;
  std::map<int64_t, int> delivered_, local_;
  std::vector<std::string> answered_by_;
  std::vector<int64_t> owed_while_delivering_;
  absl::Status refusal_;
  int changes_ = 0;
  std::unique_ptr<RemotePool> pool_;
};

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_CLIENT_REMOTE_POOL_FIXTURE_H_
