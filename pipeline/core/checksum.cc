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

uint64_t SampleHash(int64_t index, int64_t label, const void* data, size_t size) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  uint8_t header[16];
  for (int i = 0; i < 8; ++i) {
    header[i] = static_cast<uint8_t>(static_cast<uint64_t>(index) >> (8 * i));
    header[8 + i] = static_cast<uint8_t>(static_cast<uint64_t>(label) >> (8 * i));
  }
  XXH3_64bits_update(&state, header, sizeof(header));
  XXH3_64bits_update(&state, data, size);
  return XXH3_64bits_digest(&state);
}

std::string ChecksumHex(uint64_t value) { return absl::StrFormat("%016x", value); }

}  // namespace prepflow
