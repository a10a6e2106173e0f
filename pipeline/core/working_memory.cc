#include "pipeline/core/working_memory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace prepflow {

WorkingMemory::WorkingMemory(int64_t bytes, int threads, std::string name)
    : share_(std::max<int64_t>(bytes, 0) / (2 * std::max(threads, 1))),
      pool_(std::max<int64_t>(bytes, 0) / 2),
      name_(std::move(name)) {}

int WorkingMemory::past_share() const {
  absl::MutexLock lock(&mu_);
  return taken_ ? 1 : 0;
}

int64_t WorkingMemory::waits() const {
  absl::MutexLock lock(&mu_);
  return waits_;
}

void WorkingMemory::EnterPastShare() {
  absl::MutexLock lock(&mu_);
  if (taken_) {
    ++waits_;
    mu_.Await(absl::Condition(
        +[](bool* taken) { return !*taken; }, &taken_));
  }
  taken_ = true;
}

void WorkingMemory::LeavePastShare() {
  absl::MutexLock lock(&mu_);
  taken_ = false;
}

MemoryMeter::~MemoryMeter() {
  if (past_share_) memory_->LeavePastShare();
}

absl::Status MemoryMeter::Charge(int64_t bytes) {
  if (bytes > memory_->most() - held_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("needs ", held_ + bytes, " bytes of working memory, over the ",
                     memory_->most(), " one sample may hold (", memory_->name(), ")"));
  }
  if (!past_share_ && held_ + bytes > memory_->share()) {
    // Holding no more than the share: a wait here blocks no other thread.
    memory_->EnterPastShare();
    past_share_ = true;
  }
  held_ += bytes;
  return absl::OkStatus();
}

void MemoryMeter::EndSample() {
  if (past_share_ && held_ <= memory_->share()) {
    past_share_ = false;
    memory_->LeavePastShare();
  }
}

std::string OutOfMemoryMessage(const std::bad_alloc& e) {
  if (const auto* over = dynamic_cast<const OverWorkingMemory*>(&e)) return over->what();
  return "out of memory";
}

}  // namespace prepflow
