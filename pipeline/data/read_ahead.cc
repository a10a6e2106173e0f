#include "pipeline/data/read_ahead.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace prepflow {

ReadAhead::ReadAhead(ReadAheadOptions options) : options_(options) {
  const int n = std::max(1, options_.requests);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { IoLoop(); });
}

ReadAhead::~ReadAhead() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
  absl::MutexLock lock(&mu_);
  if (options_.shared != nullptr) options_.shared->Give(held_bytes_);
}

void ReadAhead::Release(size_t bytes) {
  held_bytes_ -= static_cast<int64_t>(bytes);
  if (options_.shared != nullptr) options_.shared->Give(static_cast<int64_t>(bytes));
}

bool ReadAhead::MakeRoom(size_t bytes) {
  // Entries in the order they were started; those taken are gone from
  // entries_ and skipped. Only finished ones are dropped: a read in flight
  // or queued stays, and then nothing newer is started.
  while (held_bytes_ + static_cast<int64_t>(bytes) > options_.max_bytes) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.done && !it->second.claimed &&
          (oldest == entries_.end() || it->second.order < oldest->second.order)) {
        oldest = it;
      }
    }
    if (oldest == entries_.end()) return false;
    Release(oldest->second.size);
    entries_.erase(oldest);
    ++counters_.evicted;
  }
  return true;
}

void ReadAhead::Start(int64_t index, size_t size, Fetch fetch) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || entries_.count(index) > 0) return;
  if (static_cast<int64_t>(size) > options_.max_bytes || !MakeRoom(size) ||
      (options_.shared != nullptr && !options_.shared->TryTake(static_cast<int64_t>(size)))) {
    ++counters_.refused;
    return;
  }
  Entry& e = entries_[index];
  e.order = next_order_++;
  e.size = size;
  e.fetch = std::move(fetch);
  held_bytes_ += static_cast<int64_t>(size);
  queue_.push_back(index);
  ++counters_.started;
  work_.Signal();
}

bool ReadAhead::Take(int64_t index, Buffer* out, size_t* size, absl::Status* status) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(index);
  if (it == entries_.end() || it->second.claimed) return false;
  it->second.claimed = true;  // the entry stays until this Take erases it
  ++counters_.taken;
  if (!it->second.running && !it->second.done) {
    // Still queued: read it here and now rather than wait behind the queue
    // (the I/O threads skip an index no longer held).
    Fetch fetch = std::move(it->second.fetch);
    const size_t n = it->second.size;
    Release(n);
    entries_.erase(it);
    mu_.Unlock();
    *status = fetch(out->Reserve(n == 0 ? 1 : n), n);
    *size = n;
    mu_.Lock();
    return true;
  }
  while (!it->second.done) done_.Wait(&mu_);
  Entry& e = it->second;
  *status = e.status;
  if (e.status.ok()) {
    std::memcpy(out->Reserve(e.size == 0 ? 1 : e.size), e.bytes.get(), e.size);
    *size = e.size;
  }
  ThreadStorageStats().Add(e.cost);
  Release(e.size);
  entries_.erase(it);
  return true;
}

void ReadAhead::IoLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && queue_.empty()) work_.Wait(&mu_);
    if (stopping_) return;
    const int64_t index = queue_.front();
    queue_.pop_front();
    auto it = entries_.find(index);
    if (it == entries_.end() || it->second.running || it->second.done) continue;
    Entry& e = it->second;  // stays: neither Take nor MakeRoom drop a running entry
    e.running = true;
    const size_t n = e.size;
    Fetch fetch = e.fetch;
    mu_.Unlock();
    std::unique_ptr<uint8_t[]> bytes(new (std::nothrow) uint8_t[n == 0 ? 1 : n]);
    const StorageStats before = ThreadStorageStats();
    absl::Status status = bytes == nullptr
                              ? absl::ResourceExhaustedError("out of memory reading ahead")
                              : fetch(bytes.get(), n);
    const StorageStats cost = ThreadStorageStats().Minus(before);
    mu_.Lock();
    e.bytes = std::move(bytes);
    e.status = std::move(status);
    e.cost = cost;
    e.done = true;
    done_.SignalAll();
  }
}

void ReadAhead::AwaitReads() {
  absl::MutexLock lock(&mu_);
  // Inline, not a lambda: clang's thread-safety analysis cannot see that a
  // lambda runs under the lock.
  while (!stopping_) {
    bool busy = false;
    for (const auto& [index, e] : entries_) busy |= !e.done;
    if (!busy) break;
    done_.Wait(&mu_);
  }
}

ReadAhead::Counters ReadAhead::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace prepflow
