#include "pipeline/reuse/echo_store.h"

#include "pipeline/core/wire.h"

namespace prepflow {

EchoStore::~EchoStore() {
  absl::MutexLock lock(&mu_);
  if (shared_ != nullptr) shared_->Give(stats_.held_bytes);
}

void EchoStore::Release(int64_t bytes) {
  stats_.held_bytes -= bytes;
  if (shared_ != nullptr) shared_->Give(bytes);
}

absl::Status EchoStore::Get(Sample& s, Workspace& ws, int copies,
                            const std::function<absl::Status()>& load) {
  if (copies <= 1) return load();
  const Key key{s.epoch, s.index};
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    while (it != entries_.end() && it->second.loading) {
      loaded_.Wait(&mu_);
      it = entries_.find(key);
    }
    if (it != entries_.end()) {
      Entry& e = it->second;
      const absl::Status status = e.status;
      const std::shared_ptr<const std::string> value = e.value;
      if (--e.remaining <= 0) {  // the last copy: it goes
        if (value != nullptr) Release(static_cast<int64_t>(value->size()));
        entries_.erase(it);
      }
      ++stats_.taken;
      if (!status.ok()) return status;
      return FromValueBytes(*value, ws, s);
    }
    // The first copy to ask, or one whose value was dropped for room.
    Entry& e = entries_[key];
    e.loading = true;
    e.order = next_order_++;
    if (auto d = dropped_.find(key); d != dropped_.end()) {
      e.remaining = static_cast<int>(d->second) - 1;
      dropped_.erase(d);
      ++stats_.reloads;
    } else {
      e.remaining = copies - 1;
    }
    ++stats_.loads;
  }
  const absl::Status status = load();
  std::shared_ptr<const std::string> value;
  if (status.ok()) value = std::make_shared<const std::string>(ValueBytes(s));
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  Entry& e = it->second;
  e.loading = false;
  e.status = status;
  e.value = value;
  const auto size = value != nullptr ? static_cast<int64_t>(value->size()) : 0;
  if (e.remaining <= 0) {
    entries_.erase(it);
  } else if (value != nullptr && shared_ != nullptr && !shared_->TryTake(size)) {
    // No room in the shared budget: the later copies load it again.
    dropped_[key] = e.remaining;
    entries_.erase(it);
  } else if (value != nullptr) {
    stats_.held_bytes += size;
    held_.emplace_back(e.order, key);
    Trim();
  }
  loaded_.SignalAll();
  return status;
}

void EchoStore::Trim() {
  // Values all taken leave their place in the queue: drop those at its head.
  auto stale = [this](const std::pair<uint64_t, Key>& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = entries_.find(h.second);
    return it == entries_.end() || it->second.order != h.first;
  };
  while (!held_.empty() && stale(held_.front())) held_.pop_front();
  while (stats_.held_bytes > max_bytes_ && !held_.empty()) {
    const auto [order, key] = held_.front();
    held_.pop_front();
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.order != order || it->second.loading) continue;
    Release(static_cast<int64_t>(it->second.value->size()));
    dropped_[key] = it->second.remaining;
    entries_.erase(it);
  }
}

std::vector<int64_t> EchoStore::NotStarted(uint64_t epoch,
                                           absl::Span<const int64_t> indices) const {
  std::vector<int64_t> out;
  absl::MutexLock lock(&mu_);
  for (int64_t i : indices) {
    if (!entries_.contains(Key{epoch, i})) out.push_back(i);
  }
  return out;
}

EchoStore::Stats EchoStore::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace prepflow
