#include "pipeline/sample.h"

#include <cstdlib>
#include <new>

namespace prepflow {

void Buffer::Free::operator()(uint8_t* p) const { fn != nullptr ? fn(p) : std::free(p); }

uint8_t* Buffer::Reserve(size_t n) {
  if (n <= capacity_ && data_) return data_.get();
  // Grow geometrically so a slowly rising maximum does not reallocate often.
  size_t cap = capacity_ < 4096 ? 4096 : capacity_;
  while (cap < n) cap += cap / 2;
  cap = (cap + 63) & ~size_t{63};
  data_.reset();
  void* p = allocator_.allocate != nullptr ? allocator_.allocate(cap) : std::aligned_alloc(64, cap);
  if (p == nullptr) throw std::bad_alloc();
  data_ = std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(p), Free{allocator_.free});
  capacity_ = cap;
  return data_.get();
}

const char* ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kEncoded:
      return "encoded bytes";
    case ValueKind::kImage:
      return "image";
    case ValueKind::kTensor:
      return "tensor";
  }
  return "?";
}

}  // namespace prepflow
