#include "server/worker_service.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "net/security.h"
#include "net/status.h"
#include "pipeline/core/profiler.h"
#include "server/result_encoding.h"
#include "spdlog/spdlog.h"

namespace prepflow {

// The host part of a gRPC peer ("ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7"):
// what --max-streams-per-client counts by.
std::string ClientHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

namespace {

// A link probe's chunks: large enough that a shaper's burst (a token
// bucket's, commonly up to a few hundred kB) passes within the first, which
// the client does not time.
constexpr int64_t kProbeChunkBytes = 256 << 10;

// A reply waiting to be written, with its share of the worker's memory
// budget (WorkerCore::Submit), released when the reply is freed.
struct Outgoing {
  grpc::ByteBuffer message;
  std::shared_ptr<void> reservation;
};

}  // namespace

// One job stream. Life cycle: reads JobOpen, then work items; each item runs
// on the worker's pool and its result is queued for writing (one write in
// flight at a time). Finish() is called exactly once, only when no pool task
// can still call back, and always as the last thing a handler does, after it
// has released mu_: gRPC may delete the reactor (OnDone) as soon as Finish()
// is called.
class StreamReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(WorkerService* service, grpc::CallbackServerContext* context)
      : service_(service),
        core_(service->core_),
        context_(context),
        client_(ClientHost(context->peer())),
        created_nanos_(WallNanos()) {
    StartRead(&in_);
  }

  // Ends the stream DEADLINE_EXCEEDED if it has not opened a job within
  // `limit` of being created (see WorkerService::open_timeout_seconds).
  void ExpireIfUnopened(int64_t now, double limit_seconds) {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (job_ != nullptr || finishing_ || (now - created_nanos_) * 1e-9 < limit_seconds) return;
      const absl::Status s = absl::DeadlineExceededError(absl::StrFormat(
          "no job open message within %g s (--open-timeout-seconds)", limit_seconds));
      core_->RefuseStream(s, context_->peer());
      Fail(s);
      finish = MaybeFinish();
    }
    if (finish) Finish(*finish);
  }

  // Whether the reply being written has waited on its client for over
  // `limit_seconds` (see WorkerService::reply_timeout_seconds).
  bool Stalled(int64_t now, double limit_seconds) {
    absl::MutexLock lock(&mu_);
    return writing_ && !broken_ && !finishing_ &&
           (now - write_started_nanos_) * 1e-9 >= limit_seconds;
  }

  // Cancels the stream: OnCancel drops its queued results, the write under
  // way fails, and their memory is freed. May run this stream's callbacks,
  // OnDone included, on the calling thread.
  void CancelStalled(double limit_seconds) {
    core_->RefuseStream(absl::DeadlineExceededError(absl::StrFormat(
                            "its client took no reply for %g s (--reply-timeout-seconds); the "
                            "stream is cancelled and its results dropped",
                            limit_seconds)),
                        context_->peer());
    context_->TryCancel();
  }

  void OnReadDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {  // the client half-closed, or the stream broke
        reads_done_ = true;
      } else if (!grpc::SerializationTraits<proto::ClientMessage>::Deserialize(&in_, &msg_).ok()) {
        Fail(absl::InvalidArgumentError("unparseable message from the client"));
      } else if (job_ == nullptr) {
        OpenJob();
      } else if (msg_.has_item()) {
        TakeItem();
      } else {
        Fail(absl::InvalidArgumentError("expected a work item after the job open message"));
      }
      finish = MaybeFinish();
      if (ok && !finishing_) StartRead(&in_);
    }
    if (finish) Finish(*finish);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    // Freed after unlocking: a message's buffers and its share of the memory
    // budget (whose release may launch waiting items).
    Outgoing written;
    std::deque<Outgoing> dropped;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      written = std::move(outbox_.front());  // the message just written
      outbox_.pop_front();
      if (!ok) {
        broken_ = true;  // the client went away; results are dropped
        dropped = DropQueued();
      }
      WriteNext();
      finish = MaybeFinish();
    }
    if (finish) Finish(*finish);
  }

  void OnCancel() override {
    std::optional<grpc::Status> finish;
    std::deque<Outgoing> dropped;  // freed after unlocking, as in OnWriteDone
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      dropped = DropQueued();
      finish = MaybeFinish();
    }
    if (finish) Finish(*finish);
  }

  void OnDone() override {
    service_->Forget(this);
    std::shared_ptr<WorkerJob> job;
    {
      absl::MutexLock lock(&mu_);  // no callback runs after OnDone; this is for the analysis
      job = job_;
    }
    core_->CloseJob(job, client_);
    delete this;
  }

  // See WorkerService::Drain.
  void Drain(double seconds) {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!draining_ && job_ != nullptr && !broken_ && !finishing_) {
        proto::WorkerMessage notice;
        notice.mutable_draining()->set_seconds(seconds);
        Send(EncodeMessage(notice));
      }
      draining_ = true;
      finish = MaybeFinish();
    }
    if (finish) Finish(*finish);
  }

 private:
  void OpenJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!msg_.has_open()) {
      Fail(absl::InvalidArgumentError("the first message of a stream must open a job"));
      return;
    }
    proto::WorkerMessage reply;
    auto job =
        core_->OpenJob(msg_.open(), client_, reply.mutable_opened(), PeerIdentity(*context_));
    if (!job.ok()) {
      Fail(job.status());
      return;
    }
    job_ = *std::move(job);
    credits_ = reply.opened().max_items_in_flight();
    Send(EncodeMessage(reply));
    SendProbe(std::min(msg_.open().probe_bytes(), service_->options_.max_probe_bytes));
  }

  // The link probe (JobOpen.probe_bytes): `bytes` in `count` equal chunks of
  // at most kProbeChunkBytes (at least two), queued back to back behind
  // JobOpened. One chunk is encoded; the copies share its buffer.
  void SendProbe(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bytes < 2) return;
    const int64_t count = std::max<int64_t>(2, (bytes + kProbeChunkBytes - 1) / kProbeChunkBytes);
    proto::WorkerMessage chunk;
    chunk.mutable_probe()->set_count(static_cast<int32_t>(count));
    chunk.mutable_probe()->mutable_padding()->resize(static_cast<size_t>(bytes / count));
    const grpc::ByteBuffer encoded = EncodeMessage(chunk);
    for (int64_t i = 0; i < count; ++i) Send(grpc::ByteBuffer(encoded));
  }

  void TakeItem() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // While draining, items still come that the client sent before it had
    // the notice: they are answered like the rest.
    if (broken_) return;  // unanswered: the client reissues it
    if (in_flight_ >= credits_) {
      Fail(absl::ResourceExhaustedError(absl::StrCat("client sent more than ", credits_,
                                                     " outstanding work items (its credits)")));
      return;
    }
    ++in_flight_;
    absl::Status s = core_->Submit(job_, std::move(*msg_.mutable_item()),
                                   [this](ItemOutput output) { Done(std::move(output)); });
    if (!s.ok()) {
      --in_flight_;
      Fail(s);
    }
  }

  // On a pool thread: the result of one item, encoded before taking the lock.
  void Done(ItemOutput output) {
    std::shared_ptr<void> reservation = std::move(output.reservation);
    grpc::ByteBuffer encoded = EncodeItemOutput(std::move(output));
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      --in_flight_;
      if (!broken_ && !finishing_) Send(std::move(encoded), std::move(reservation));
      finish = MaybeFinish();
    }
    if (finish) Finish(*finish);
  }

  // `reservation`: the memory-budget share of the message, released when it
  // has been written or dropped.
  void Send(grpc::ByteBuffer msg, std::shared_ptr<void> reservation = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    outbox_.push_back(Outgoing{std::move(msg), std::move(reservation)});
    WriteNext();
  }

  // Drops unsent results. A message being written stays until OnWriteDone:
  // gRPC reads it until then.
  // Returns them, for the caller to free after unlocking.
  std::deque<Outgoing> DropQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto first = writing_ ? outbox_.begin() + 1 : outbox_.begin();
    std::deque<Outgoing> dropped(std::make_move_iterator(first),
                                 std::make_move_iterator(outbox_.end()));
    outbox_.erase(first, outbox_.end());
    return dropped;
  }

  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || outbox_.empty() || broken_) return;
    writing_ = true;
    write_started_nanos_ = WallNanos();
    StartWrite(&outbox_.front().message);
  }

  void Fail(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error_.ok()) error_ = std::move(status);
  }

  // The stream's final status once nothing is running or being written and
  // the stream has ended, been cut short or failed; nullopt otherwise. Returns
  // a status once only: the caller must Finish() with it after unlocking.
  std::optional<grpc::Status> MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_ || in_flight_ > 0 || writing_) return std::nullopt;
    const bool outbox_done = outbox_.empty() || broken_;
    // A draining stream with a job ends when its client closes it (after
    // the notice, once its items are answered) or at the shutdown deadline.
    const bool ended = reads_done_ || broken_ || !error_.ok() || (draining_ && job_ == nullptr);
    if (!ended || !outbox_done) return std::nullopt;
    finishing_ = true;
    if (!error_.ok()) return ToGrpcStatus(error_);
    if (draining_ && !reads_done_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is shutting down");
    }
    if (broken_) return grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
    return grpc::Status::OK;
  }

  WorkerService* service_;
  WorkerCore* core_;
  grpc::CallbackServerContext* context_;
  const std::string client_;  // the peer's host (--max-streams-per-client)
  const int64_t created_nanos_;
  grpc::ByteBuffer in_;       // owned by the one outstanding read
  proto::ClientMessage msg_;  // in_, parsed

  absl::Mutex mu_;
  std::shared_ptr<WorkerJob> job_ ABSL_GUARDED_BY(mu_);
  int credits_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Outgoing> outbox_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t write_started_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// A stream refused before it starts (no job is opened): finishes at once.
class RefusedStream : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* WorkerService::Process(
    grpc::CallbackServerContext* context) {
  if (absl::Status s = CheckToken(context->client_metadata(), options_.token); !s.ok()) {
    core_->RefuseStream(s, context->peer());
    return new RefusedStream(s);
  }
  auto* reactor = new StreamReactor(this, context);
  bool drain = false;
  double seconds = 0;
  {
    absl::MutexLock lock(&mu_);
    streams_.insert(reactor);
    drain = draining_;
    seconds = drain_seconds_;
  }
  if (drain) reactor->Drain(seconds);
  return reactor;
}

WorkerService::WorkerService(WorkerCore* core, WorkerServiceOptions options)
    : core_(core), options_(std::move(options)) {
  if (options_.open_timeout_seconds > 0 || options_.reply_timeout_seconds > 0) {
    janitor_ = std::thread([this] { JanitorLoop(); });
  }
}

WorkerService::~WorkerService() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (janitor_.joinable()) janitor_.join();
}

void WorkerService::JanitorLoop() {
  double tick_seconds = 1;
  for (const double limit : {options_.open_timeout_seconds, options_.reply_timeout_seconds}) {
    if (limit > 0) tick_seconds = std::min(tick_seconds, limit / 4);
  }
  const absl::Duration tick = absl::Seconds(tick_seconds);
  while (true) {
    std::vector<StreamReactor*> stalled;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) return;
      // As Drain(): a reactor cannot be deleted while mu_ is held (Forget).
      const int64_t now = WallNanos();
      for (StreamReactor* r : streams_) {
        if (options_.open_timeout_seconds > 0)
          r->ExpireIfUnopened(now, options_.open_timeout_seconds);
        if (options_.reply_timeout_seconds > 0 && r->Stalled(now, options_.reply_timeout_seconds)) {
          stalled.push_back(r);
        }
      }
      pinned_.insert(stalled.begin(), stalled.end());  // Forget waits for them
    }
    // Outside mu_: a cancel may run the stream's callbacks here, OnDone's
    // Forget included (which then does not wait for this thread's pin).
    for (StreamReactor* r : stalled) r->CancelStalled(options_.reply_timeout_seconds);
    absl::MutexLock lock(&mu_);
    pinned_.clear();
  }
}

void WorkerService::Drain(double seconds) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  drain_seconds_ = seconds;
  for (StreamReactor* r : streams_) r->Drain(seconds);
}

void WorkerService::Forget(StreamReactor* reactor) {
  absl::MutexLock lock(&mu_);
  if (std::this_thread::get_id() != janitor_.get_id()) {
    // The janitor may be cancelling this stream outside the lock.
    const auto unpinned = [this, reactor]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return pinned_.count(reactor) == 0;
    };
    mu_.Await(absl::Condition(&unpinned));
  }
  streams_.erase(reactor);
}

}  // namespace prepflow
