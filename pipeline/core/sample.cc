#include "pipeline/core/sample.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>

#include "pipeline/core/working_memory.h"

namespace prepflow {

void Buffer::Free::operator()(uint8_t* p) const { fn != nullptr ? fn(p) : std::free(p); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this == &other) return *this;
  Release();
  allocator_ = other.allocator_;
  data_ = std::move(other.data_);
  capacity_ = std::exchange(other.capacity_, 0);
  meter_ = std::exchange(other.meter_, nullptr);
  return *this;
}

uint8_t* Buffer::Reserve(size_t n) {
  if (n <= capacity_ && data_) return data_.get();
  // Grow geometrically so a slowly rising maximum does not reallocate often;
  // a metered buffer takes what it needs (its bytes are a budget's).
  size_t cap = capacity_ < 4096 ? 4096 : capacity_;
  if (meter_ != nullptr) {
    cap = std::max(cap, (n + 4095) & ~size_t{4095});
  } else {
    while (cap < n) cap += cap / 2;
  }
  cap = (cap + 63) & ~size_t{63};
  if (meter_ != nullptr) {
    // Counted before it is allocated; a grant that is refused (or a wait
    // for one) leaves the old storage in place.
    const absl::Status granted = meter_->Charge(static_cast<int64_t>(cap - capacity_));
    if (!granted.ok()) throw OverWorkingMemory(std::string(granted.message()));
  }
  data_.reset();
  void* p = allocator_.allocate != nullptr ? allocator_.allocate(cap) : std::aligned_alloc(64, cap);
  if (p == nullptr) {
    if (meter_ != nullptr) meter_->Uncharge(static_cast<int64_t>(cap));
    capacity_ = 0;
    throw std::bad_alloc();
  }
  data_ = std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(p), Free{allocator_.free});
  capacity_ = cap;
  return data_.get();
}

void Buffer::Release() {
  data_.reset();
  if (meter_ != nullptr) meter_->Uncharge(static_cast<int64_t>(capacity_));
  capacity_ = 0;
}

const char* ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kEncoded:
      return "encoded bytes";
    case ValueKind::kImage:
      return "image";
    case ValueKind::kTensor:
      return "tensor";
    case ValueKind::kAudio:
      return "audio";
    case ValueKind::kTokens:
      return "tokens";
  }
  return "?";
}

const StoredField* Sample::FindField(const std::string& name) const {
  const auto it =
      std::lower_bound(fields.begin(), fields.end(), name,
                       [](const StoredField& f, const std::string& n) { return f.name < n; });
  return it != fields.end() && it->name == name ? &*it : nullptr;
}

void Sample::StoreField(StoredField field) {
  const auto it =
      std::lower_bound(fields.begin(), fields.end(), field.name,
                       [](const StoredField& f, const std::string& n) { return f.name < n; });
  if (it != fields.end() && it->name == field.name) {
    *it = std::move(field);
  } else {
    fields.insert(it, std::move(field));
  }
}

}  // namespace prepflow
