// The run checksum: identical wherever, in whatever order, and on however many
// threads each sample was processed.
//
// SampleHash = XXH3-64 (seed 0) of the 16 bytes [index as int64 LE, label as
// int64 LE] followed by the sample's output bytes. The checksum is the sum of
// SampleHash over every delivered sample, mod 2^64, printed as 16 hex digits.
// (Python: xxhash.xxh3_64(struct.pack('<qq', i, label) + t.tobytes()).)
//
// A record of several fields (Sample::fields) hashes its working value as
// above and then, in the stored fields' order (names in byte order), each
// field's name and bytes, each preceded by its length as int64 LE: one
// XXH3-64 over [index, label, value, (len(name), name, len(bytes), bytes)...].
#ifndef PREPFLOW_PIPELINE_CORE_CHECKSUM_H_
#define PREPFLOW_PIPELINE_CORE_CHECKSUM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "pipeline/core/sample.h"

namespace prepflow {

uint64_t SampleHash(int64_t index, int64_t label, const void* data, size_t size);
// SampleHash of `s`'s working value, extended over its stored fields (the
// same as SampleHash for a sample of one field).
uint64_t RecordHash(const Sample& s);

// Thread-safe, order-independent accumulator.
class Checksum {
 public:
  void Add(uint64_t sample_hash) { sum_.fetch_add(sample_hash, std::memory_order_relaxed); }
  uint64_t value() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> sum_{0};
};

std::string ChecksumHex(uint64_t value);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_CHECKSUM_H_
