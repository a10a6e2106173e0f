// A corpus of lines (--format lines): every non-empty line of its files is a
// sample, a language model's document as JSON Lines ({"text": ...}, read by
// tokenize's json_key) or as plain text. The files are read once to find
// the lines; a sample is read with one ranged read of its line.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "pipeline/data/datasets.h"
#include "pipeline/data/shard_index.h"

namespace prepflow::detail {
namespace {

class LinesDataset : public Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& root,
                                                       const std::vector<std::string>& files,
                                                       const ShardAccess& access,
                                                       const Configure& configure) {
    auto ds = std::unique_ptr<LinesDataset>(new LinesDataset);
    configure(ds.get());
    ds->root_ = root;
    for (const std::string& name : files) {
      absl::StatusOr<std::unique_ptr<ByteSource>> source = access.open(name);
      if (!source.ok()) return source.status();
      ds->files_.push_back(*std::move(source));
      ds->json_.push_back(absl::EndsWith(name, ".jsonl") || absl::EndsWith(name, ".json"));
      if (absl::Status s = ds->IndexLines(ds->files_.size() - 1); !s.ok()) return s;
    }
    if (ds->lines_.empty()) {
      return absl::NotFoundError(absl::StrCat("no lines in the files at ", root));
    }
    ds->labels_.assign(ds->lines_.size(), -1);
    return ds;
  }

  const char* format() const override { return "lines"; }
  std::string SamplePath(int64_t i) const override {
    const Line& l = lines_[i];
    return absl::StrCat(files_[l.file]->name(), ":", l.number);
  }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    const Line& l = lines_[i];
    if (absl::Status s = CheckSize(l.size, SamplePath(i)); !s.ok()) return s;
    *size = l.size;
    const absl::Status s =
        files_[l.file]->ReadAt(l.offset, l.size, out->Reserve(std::max<uint64_t>(l.size, 1)));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(SamplePath(i), ": ", s.message()));
    return absl::OkStatus();
  }
  std::string Extension(int64_t i) const override { return json_[lines_[i].file] ? "json" : "txt"; }
  void Extent(int64_t i, uint64_t* offset, uint64_t* size) const override {
    *offset = lines_[i].offset;
    *size = lines_[i].size;
  }
  uint64_t SourceVersion(int64_t i) const override {
    return files_[lines_[i].file]->version_hash();
  }

 private:
  struct Line {
    uint32_t file;
    uint32_t number;  // 1-based, for messages
    uint64_t offset;
    uint64_t size;  // without the line's end (\n, \r\n)
  };

  // Finds the lines of file f, reading it in windows.
  absl::Status IndexLines(size_t f) {
    const ByteSource& file = *files_[f];
    constexpr size_t kWindow = size_t{1} << 20;
    std::vector<uint8_t> window(kWindow);
    uint64_t start = 0;
    uint32_t number = 1;
    for (uint64_t at = 0; at < file.size(); at += kWindow) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kWindow, file.size() - at));
      if (absl::Status s = file.ReadAt(at, n, window.data()); !s.ok()) return s;
      for (const uint8_t* p = window.data(); p < window.data() + n;) {
        const auto* nl = static_cast<const uint8_t*>(std::memchr(p, '\n', window.data() + n - p));
        if (nl == nullptr) break;
        const uint64_t end = at + static_cast<uint64_t>(nl - window.data());
        const bool cr = end > start && (nl > window.data() ? nl[-1] == '\r' : LastIsCr(f, end));
        if (absl::Status s = AddLine(f, number++, start, end - start - cr); !s.ok()) return s;
        start = end + 1;
        p = nl + 1;
      }
    }
    return AddLine(f, number, start, file.size() - start);
  }
  bool LastIsCr(size_t f, uint64_t end) const {
    uint8_t c = 0;
    return files_[f]->ReadAt(end - 1, 1, &c).ok() && c == '\r';
  }
  absl::Status AddLine(size_t f, uint32_t number, uint64_t offset, uint64_t size) {
    if (size == 0) return absl::OkStatus();  // blank lines are no documents
    if (number > kMaxShardMembers) {         // as a shard's members
      return absl::ResourceExhaustedError(absl::StrCat(
          files_[f]->name(), ": over ", kMaxShardMembers, " lines; split it into files of fewer"));
    }
    lines_.push_back(Line{static_cast<uint32_t>(f), number, offset, size});
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<ByteSource>> files_;
  std::vector<bool> json_;
  std::vector<Line> lines_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenLines(const std::string& root,
                                                   const std::vector<std::string>& files,
                                                   const ShardAccess& access,
                                                   const Configure& configure) {
  return LinesDataset::Open(root, files, access, configure);
}

}  // namespace prepflow::detail
