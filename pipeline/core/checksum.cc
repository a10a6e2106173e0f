#include "pipeline/core/checksum.h"

// The state struct is only complete with XXH_STATIC_LINKING_ONLY; keeping it
// on the stack avoids a heap allocation per sample.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
// Debian's libxxhash picks SSE2, AVX2 or AVX-512 at run time through these
// entry points; the hash value is the same whichever runs.
#include <xxh_x86dispatch.h>
#endif

#include "absl/strings/str_format.h"

namespace prepflow {

namespace {

void UpdateInt64(XXH3_state_t* state, uint64_t v) {
  uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(v >> (8 * i));
  XXH3_64bits_update(state, bytes, sizeof(bytes));
}

void Start(XXH3_state_t* state, int64_t index, int64_t label, const void* data, size_t size) {
  XXH3_64bits_reset(state);
  UpdateInt64(state, static_cast<uint64_t>(index));
  UpdateInt64(state, static_cast<uint64_t>(label));
  XXH3_64bits_update(state, data, size);
}

}  // namespace

uint64_t SampleHash(int64_t index, int64_t label, const void* data, size_t size) {
  XXH3_state_t state;
  Start(&state, index, label, data, size);
  return XXH3_64bits_digest(&state);
}

uint64_t RecordHash(const Sample& s) {
  XXH3_state_t state;
  Start(&state, s.index, s.label, s.data, s.size);
  for (const StoredField& f : s.fields) {
    UpdateInt64(&state, f.name.size());
    XXH3_64bits_update(&state, f.name.data(), f.name.size());
    UpdateInt64(&state, f.bytes.size());
    XXH3_64bits_update(&state, f.bytes.data(), f.bytes.size());
  }
  return XXH3_64bits_digest(&state);
}

std::string ChecksumHex(uint64_t value) { return absl::StrFormat("%016x", value); }

}  // namespace prepflow
