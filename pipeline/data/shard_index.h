// The index of a WebDataset shard: its members' names, offsets and sizes, and
// the text of its small text members (labels, class names, transcripts), so
// that a remote shard's samples are read with one range request each and
// their labels and transcripts with none.
//
// An index is made by one pass over the shard's headers (IndexShard) or read
// from the shard's sidecar, <shard>.idx, which `prepflow pack` and
// `prepflow index` write:
//
//   prepflow-shard-index 1
//   shard-bytes 1234567
//   <offset>\t<size>\t<name>[\t<text>]
//   ...
//
// Names and label text are escaped (%25 for '%', %09 tab, %0A newline, %0D
// carriage return). The shard's size is recorded, so an index left over from
// another version of the shard is refused instead of read wrongly.
//
// Thread-safety: pure functions over immutable inputs (IndexShard only reads
// the source, which may be shared).
#ifndef PREPFLOW_PIPELINE_DATA_SHARD_INDEX_H_
#define PREPFLOW_PIPELINE_DATA_SHARD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline/data/byte_source.h"

namespace prepflow {

// Text members carry their text in the index: labels (key.cls, key.label) of
// at most kMaxLabelBytes, class names (key.class, as prepflow pack writes
// them) of at most kMaxClassNameBytes. Longer ones carry none.
inline constexpr uint64_t kMaxLabelBytes = 31;
inline constexpr uint64_t kMaxClassNameBytes = 255;
// Transcripts (key.txt) of at most kMaxTranscriptBytes; a longer one fails
// its sample. (Sidecars written before transcripts were indexed carry none:
// `prepflow index` writes them again.)
inline constexpr uint64_t kMaxTranscriptBytes = 16384;
// Members one shard may have (WebDataset shards hold thousands): a remote
// shard claiming terabytes of tiny members, or a sidecar of millions of
// lines, is refused before its index outgrows memory.
inline constexpr size_t kMaxShardMembers = size_t{1} << 22;

struct IndexedMember {
  std::string name;
  uint64_t offset = 0;  // of the member's data in the shard
  uint64_t size = 0;
  // A text member's text, whitespace stripped; empty otherwise.
  std::string text;
};

struct ShardIndex {
  uint64_t shard_bytes = 0;
  std::vector<IndexedMember> members;  // in archive order
  // DataLoss when the archive's structure broke off (a corrupt header, a
  // truncated shard): `members` holds what came before.
  absl::Status broken;
};

// Whether a member named `name` is a label member (extension cls or label).
bool IsLabelMember(absl::string_view name);
// Whether it names a sample's class (extension class).
bool IsClassNameMember(absl::string_view name);
// Whether it is a sample's transcript (extension txt).
bool IsTranscriptMember(absl::string_view name);
// The most bytes of text a member named `name` carries in an index: 0 for
// one that is not a text member.
uint64_t TextLimit(absl::string_view name);

// Indexes `shard` by reading its headers and label members. A broken archive
// is not an error (see ShardIndex::broken); a failing read of the source is,
// and so is a shard of more than kMaxShardMembers (ResourceExhausted).
absl::StatusOr<ShardIndex> IndexShard(const ByteSource& shard);

// The sidecar's name for the shard at `shard`.
std::string SidecarName(const std::string& shard);

// The sidecar text of a complete index (REQUIRES: index.broken is OK).
std::string FormatShardIndex(const ShardIndex& index);

// Parses sidecar `text` (for messages, `name`) of a shard of `shard_bytes`:
// DataLoss naming the sidecar and line for anything malformed, a member
// outside the shard, or another shard size ("made for another version of the
// shard: run prepflow index again").
absl::StatusOr<ShardIndex> ParseShardIndex(absl::string_view text, const std::string& name,
                                           uint64_t shard_bytes);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_SHARD_INDEX_H_
