#include "pipeline/data/shard_index.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/text.h"
#include "pipeline/data/tar.h"

namespace prepflow {
namespace {

constexpr absl::string_view kMagic = "prepflow-shard-index 1";

// Passes reads through and keeps the first failure, to tell a source that
// failed from an archive that is broken.
class FailureKeeper : public ByteSource {
 public:
  explicit FailureKeeper(const ByteSource& source) : source_(source) {}
  const std::string& name() const override { return source_.name(); }
  uint64_t size() const override { return source_.size(); }
  absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const override {
    absl::Status s = source_.ReadAt(offset, length, dst);
    if (!s.ok() && failure_.ok()) failure_ = s;
    return s;
  }
  const absl::Status& failure() const { return failure_; }

 private:
  const ByteSource& source_;
  mutable absl::Status failure_;  // one scan, one thread
};

std::string Escape(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case '\t':
        out += "%09";
        break;
      case '\n':
        out += "%0A";
        break;
      case '\r':
        out += "%0D";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool Unescape(absl::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      *out += text[i];
      continue;
    }
    const absl::string_view code = text.substr(i + 1, 2);
    if (code == "25") {
      *out += '%';
    } else if (code == "09") {
      *out += '\t';
    } else if (code == "0A") {
      *out += '\n';
    } else if (code == "0D") {
      *out += '\r';
    } else {
      return false;
    }
    i += 2;
  }
  return true;
}

}  // namespace

namespace {

// What follows the first dot of the member's basename, lower case.
std::string Extension(absl::string_view name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == absl::string_view::npos ? 0 : slash + 1);
  return dot == absl::string_view::npos ? "" : absl::AsciiStrToLower(name.substr(dot + 1));
}

}  // namespace

bool IsLabelMember(absl::string_view name) {
  const std::string ext = Extension(name);
  return ext == "cls" || ext == "label";
}

bool IsClassNameMember(absl::string_view name) { return Extension(name) == "class"; }

bool IsTranscriptMember(absl::string_view name) { return Extension(name) == "txt"; }

uint64_t TextLimit(absl::string_view name) {
  if (IsLabelMember(name)) return kMaxLabelBytes;
  if (IsClassNameMember(name)) return kMaxClassNameBytes;
  if (IsTranscriptMember(name)) return kMaxTranscriptBytes;
  return 0;
}

absl::StatusOr<ShardIndex> IndexShard(const ByteSource& shard) {
  FailureKeeper source(shard);
  ShardIndex index;
  index.shard_bytes = shard.size();
  absl::Status scanned = ScanTar(source, [&](const TarMember& m) -> absl::Status {
    IndexedMember member{m.name, m.offset, m.size, ""};
    if (m.size > 0 && m.size <= TextLimit(m.name)) {
      std::string text(m.size, '\0');
      if (absl::Status s = source.ReadAt(m.offset, m.size, reinterpret_cast<uint8_t*>(text.data()));
          !s.ok()) {
        return s;
      }
      member.text = std::string(absl::StripAsciiWhitespace(text));
    }
    if (index.members.size() >= kMaxShardMembers) {
      return absl::ResourceExhaustedError(
          absl::StrCat(shard.name(), " has over ", kMaxShardMembers, " members; not indexed"));
    }
    index.members.push_back(std::move(member));
    return absl::OkStatus();
  });
  if (!source.failure().ok()) return source.failure();
  if (absl::IsResourceExhausted(scanned)) return scanned;
  index.broken = std::move(scanned);
  return index;
}

std::string SidecarName(const std::string& shard) { return absl::StrCat(shard, ".idx"); }

std::string FormatShardIndex(const ShardIndex& index) {
  std::string out = absl::StrCat(kMagic, "\nshard-bytes ", index.shard_bytes, "\n");
  for (const IndexedMember& m : index.members) {
    absl::StrAppend(&out, m.offset, "\t", m.size, "\t", Escape(m.name));
    if (TextLimit(m.name) > 0) absl::StrAppend(&out, "\t", Escape(m.text));
    out += '\n';
  }
  return out;
}

absl::StatusOr<ShardIndex> ParseShardIndex(absl::string_view text, const std::string& name,
                                           uint64_t shard_bytes) {
  // Counted before splitting, so that a sidecar of millions of tiny lines is
  // refused before its lines take memory.
  if (static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) > kMaxShardMembers + 2) {
    return absl::DataLossError(
        absl::StrCat("shard index ", SafeText(name), ": over ", kMaxShardMembers, " members"));
  }
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  auto bad = [&](size_t line, absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("shard index ", SafeText(name), " line ", line + 1, ": ", what));
  };
  if (lines.size() < 3 || lines[0] != kMagic) {
    return bad(0, absl::StrCat("not a prepflow shard index (it starts '", kMagic, "')"));
  }
  ShardIndex index;
  absl::string_view size_line = lines[1];
  if (!absl::ConsumePrefix(&size_line, "shard-bytes ") ||
      !absl::SimpleAtoi(size_line, &index.shard_bytes)) {
    return bad(1, "expected 'shard-bytes N'");
  }
  if (index.shard_bytes != shard_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "shard index %s was made for a shard of %d bytes, and the shard has %d: it belongs to "
        "another version of the shard (run prepflow index again)",
        SafeText(name), index.shard_bytes, shard_bytes));
  }
  if (!lines.back().empty()) return bad(lines.size() - 1, "the index does not end with a newline");
  for (size_t i = 2; i + 1 < lines.size(); ++i) {
    const std::vector<absl::string_view> fields = absl::StrSplit(lines[i], '\t');
    IndexedMember m;
    if (fields.size() < 3 || fields.size() > 4 || !absl::SimpleAtoi(fields[0], &m.offset) ||
        !absl::SimpleAtoi(fields[1], &m.size) || !Unescape(fields[2], &m.name) || m.name.empty() ||
        (fields.size() == 4 && !Unescape(fields[3], &m.text))) {
      return bad(i, "expected 'offset<TAB>size<TAB>name[<TAB>label]'");
    }
    if (m.offset > shard_bytes || m.size > shard_bytes - m.offset) {
      return bad(i, absl::StrFormat("member %s (%d bytes at offset %d) runs past the shard's end",
                                    SafeText(m.name), m.size, m.offset));
    }
    if (m.text.size() > TextLimit(m.name)) return bad(i, "text is too long for its member");
    // A tar's members follow one another: one picture listed 50 times (at
    // one extent, under 50 keys) would be 50 samples.
    if (!index.members.empty() &&
        m.offset < index.members.back().offset + index.members.back().size) {
      return bad(i, absl::StrFormat("member %s (at offset %d) overlaps or precedes the one before",
                                    SafeText(m.name), m.offset));
    }
    index.members.push_back(std::move(m));
  }
  return index;
}

}  // namespace prepflow
