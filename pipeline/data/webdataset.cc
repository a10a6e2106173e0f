// WebDataset: .tar shards whose members are grouped into samples by key.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/text.h"
#include "pipeline/data/datasets.h"
#include "pipeline/data/pack.h"
#include "pipeline/data/shard_index.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace prepflow::detail {
namespace {

class WebDataset : public Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& root,
                                                       const std::vector<std::string>& shards,
                                                       const ShardAccess& access,
                                                       const Configure& configure) {
    auto ds = std::unique_ptr<WebDataset>(new WebDataset);
    configure(ds.get());
    ds->root_ = root;
    absl::flat_hash_map<std::string, int> keys;  // every key seen, and its shard
    // Remote shards cost round trips each (a size, a sidecar), so they are
    // opened and indexed `access.parallel` at a time, a window of them at
    // once; local ones in turn. Samples are grouped in shard order.
    const size_t threads = access.remote ? std::max(1, access.parallel) : 1;
    const size_t window = 4 * threads;
    for (size_t base = 0; base < shards.size(); base += window) {
      std::vector<OpenedShard> opened(std::min(window, shards.size() - base));
      ds->OpenShards(shards, base, access, threads, &opened);
      for (OpenedShard& o : opened) {
        if (!o.status.ok()) return o.status;
        ds->shards_.push_back(std::move(o.source));
        if (absl::Status s = ds->Group(o.index, &keys); !s.ok()) return s;
      }
    }
    if (ds->any_media_) ds->DropTextOnly();
    const size_t grouped = ds->samples_.size();
    if (!ds->require_fields_.empty()) ds->DropWithoutRequired(root);
    if (ds->samples_.empty() && grouped > 0) {
      return absl::NotFoundError(absl::StrCat(
          "no record in the shards at ", root, " has every field of --require-fields (",
          SafeText(absl::StrJoin(ds->require_fields_, ",")), ")"));
    }
    if (ds->samples_.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no images, audio, video or text (key.jpg, key.flac, key.mp4, key.txt, ...) in the "
          "shards at ",
          root));
    }
    ds->TakeClassNames();
    if (ds->has_texts_) ds->texts_ = std::move(ds->sample_texts_);
    return ds;
  }

  ~WebDataset() override { read_ahead_.reset(); }

  const char* format() const override { return "wds"; }
  std::string SamplePath(int64_t i) const override {
    const Entry& e = samples_[i];
    return absl::StrCat(shards_[e.shard]->name(), ":", e.name);
  }
  std::string Extension(int64_t i) const override { return LowerExtension(samples_[i].name); }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    const Entry& e = samples_[i];
    if (!e.error.ok()) return e.error;
    if (absl::Status s = CheckSize(e.size, SamplePath(i)); !s.ok()) return s;
    absl::Status s;
    if (read_ahead_ == nullptr || !read_ahead_->Take(i, out, size, &s)) {
      *size = e.size;
      s = shards_[e.shard]->ReadAt(e.offset, e.size, out->Reserve(e.size == 0 ? 1 : e.size));
    }
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(SamplePath(i), ": ", s.message()));
    return absl::OkStatus();
  }
  bool has_members() const override { return true; }
  absl::Status ReadMember(int64_t i, const std::string& field, Buffer* out,
                          size_t* size) const override {
    const Entry& e = samples_[i];
    if (field.empty() || !e.error.ok()) return Read(i, out, size);
    for (absl::string_view alternative : absl::StrSplit(field, ';')) {
      const auto id = ext_ids_.find(absl::AsciiStrToLower(alternative));
      if (id == ext_ids_.end()) continue;
      if (id->second == e.media_ext) return Read(i, out, size);
      for (uint32_t m = 0; m < e.members; ++m) {
        const Member& member = members_[e.first_member + m];
        if (member.ext != id->second) continue;
        const std::string path = absl::StrCat(SamplePath(i), "[", exts_[member.ext], "]");
        if (absl::Status s = CheckSize(member.size, path); !s.ok()) return s;
        *size = member.size;
        const absl::Status s = shards_[e.shard]->ReadAt(
            member.offset, member.size, out->Reserve(std::max<uint64_t>(member.size, 1)));
        if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
        return absl::OkStatus();
      }
    }
    return absl::NotFoundError(absl::StrCat(SamplePath(i), ": the sample has no member '",
                                            SafeText(field), "' (a field the pipeline reads)"));
  }
  absl::Status ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                        uint64_t* whole) const override {
    const Entry& e = samples_[i];
    if (!e.error.ok()) return e.error;
    if (absl::Status s = CheckSize(e.size, SamplePath(i)); !s.ok()) return s;
    *whole = e.size;
    *size = static_cast<size_t>(std::min<uint64_t>(e.size, max_bytes));
    const absl::Status s =
        shards_[e.shard]->ReadAt(e.offset, *size, out->Reserve(std::max<size_t>(*size, 1)));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(SamplePath(i), ": ", s.message()));
    return absl::OkStatus();
  }
  void Prefetch(absl::Span<const int64_t> indices) const override {
    if (read_ahead_ == nullptr) return;
    for (const int64_t i : indices) {
      const Entry& e = samples_[i];
      if (!e.error.ok() || e.size > static_cast<uint64_t>(max_file_bytes_)) continue;
      read_ahead_->Start(i, e.size, [this, &e](uint8_t* dst, size_t n) {
        return shards_[e.shard]->ReadAt(e.offset, n, dst);
      });
    }
  }
  uint64_t SourceVersion(int64_t i) const override {
    return shards_[samples_[i].shard]->version_hash();
  }
  void Extent(int64_t i, uint64_t* offset, uint64_t* size) const override {
    *offset = samples_[i].offset;
    *size = samples_[i].size;
  }

 private:
  struct Entry {
    int shard;
    std::string name;
    uint64_t offset, size;
    // Set for a sample the index found broken (a bad label, a member past the
    // end of a truncated shard, a corrupt header): reading it fails with this,
    // so the job skips it or stops, as configured, and the rest is usable.
    absl::Status error;
    // Its other members (members_[first_member, + members)) and its media's
    // extension, for pipelines that read fields (ReadMember).
    size_t first_member = 0;
    uint32_t members = 0;
    uint16_t media_ext = kNoExt;
  };
  // A member other than the media, a label or a class name: where it lies,
  // and its extension (an index into exts_).
  struct Member {
    uint64_t offset = 0, size = 0;
    uint16_t ext = 0;
  };
  static constexpr uint16_t kNoExt = 0xffff;
  // Distinct member extensions a dataset may have (a crafted shard of
  // millions of names must not grow the table without bound): members
  // past them are not readable as fields, and a warning says so.
  static constexpr size_t kMaxExtensions = 4096;

  // The id of extension `ext` (lower case), interned; kNoExt past the limit.
  uint16_t ExtId(const std::string& ext) {
    const auto it = ext_ids_.find(ext);
    if (it != ext_ids_.end()) return it->second;
    if (exts_.size() >= kMaxExtensions) {
      if (!too_many_exts_) {
        warnings_.push_back(absl::StrCat("more than ", kMaxExtensions,
                                         " member extensions; members with others are not "
                                         "readable as fields"));
      }
      too_many_exts_ = true;
      return kNoExt;
    }
    exts_.push_back(ext);
    return ext_ids_[ext] = static_cast<uint16_t>(exts_.size() - 1);
  }

  struct OpenedShard {
    absl::Status status;
    std::unique_ptr<ByteSource> source;
    ShardIndex index;
  };

  // Opens and indexes shards[base + k] into (*opened)[k] on `threads`
  // threads.
  void OpenShards(const std::vector<std::string>& shards, size_t base, const ShardAccess& access,
                  size_t threads, std::vector<OpenedShard>* opened) const {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k = next++; k < opened->size(); k = next++) {
        OpenedShard& o = (*opened)[k];
        absl::StatusOr<std::unique_ptr<ByteSource>> source = access.open(shards[base + k]);
        if (!source.ok()) {
          o.status = source.status();
          continue;
        }
        absl::StatusOr<ShardIndex> index = ShardIndexOf(shards[base + k], **source, access);
        if (!index.ok()) {
          o.status = index.status();
          continue;
        }
        o.source = *std::move(source);
        o.index = *std::move(index);
      }
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < std::min(threads, opened->size()); ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  }

  // The shard's index: a remote shard's sidecar where it has one, else a pass
  // over its headers (through a window, for a remote shard).
  absl::StatusOr<ShardIndex> ShardIndexOf(const std::string& name, const ByteSource& shard,
                                          const ShardAccess& access) const {
    if (!access.remote) return IndexShard(shard);
    absl::StatusOr<std::unique_ptr<ByteSource>> sidecar = access.open(SidecarName(name));
    if (sidecar.ok()) {
      if (absl::Status s = CheckSize((*sidecar)->size(), (*sidecar)->name()); !s.ok()) return s;
      std::string text((*sidecar)->size(), '\0');
      if (absl::Status s =
              (*sidecar)->ReadAt(0, text.size(), reinterpret_cast<uint8_t*>(text.data()));
          !s.ok()) {
        return s;
      }
      return ParseShardIndex(text, (*sidecar)->name(), shard.size());
    }
    if (!absl::IsNotFound(sidecar.status())) return sidecar.status();
    const std::string cached = CachedIndexPath(name, shard, access);
    std::error_code size_error;
    const uint64_t cached_size =
        cached.empty() ? 0 : std::filesystem::file_size(cached, size_error);
    // Its size is checked before anything is read: a planted file of
    // gigabytes is a miss, not an allocation.
    if (!cached.empty() && !size_error && cached_size <= static_cast<uint64_t>(max_file_bytes_)) {
      std::ifstream in(cached, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (in.is_open() && text.size() <= static_cast<uint64_t>(max_file_bytes_)) {
        absl::StatusOr<ShardIndex> index = ParseShardIndex(text, cached, shard.size());
        if (index.ok()) return index;  // a damaged entry is made again
      }
    }
    WindowedSource windowed(shard, access.window_bytes);
    absl::StatusOr<ShardIndex> index = IndexShard(windowed);
    if (!cached.empty() && index.ok() && index->broken.ok()) {
      // Best effort: a cache that cannot be written costs the next open a pass.
      std::error_code ignored;
      std::filesystem::create_directories(access.cache_dir, ignored);
      (void)WriteFileAtomically(cached, FormatShardIndex(*index));
    }
    return index;
  }

  // Where the index of shard `name` is cached: a file named by a hash of its
  // URL, size and version; empty when nothing is cached (no cache folder, or
  // a source without a version, whose changes could not be told).
  static std::string CachedIndexPath(const std::string& name, const ByteSource& shard,
                                     const ShardAccess& access) {
    const std::string version = shard.version();
    if (access.cache_dir.empty() || version.empty()) return "";
    const std::string key =
        absl::StrCat(name, std::string(1, '\0'), shard.size(), std::string(1, '\0'), version);
    return absl::StrFormat("%s/%016x.idx", access.cache_dir, XXH3_64bits(key.data(), key.size()));
  }

  // The sample being grouped: its media member, label, class name and
  // transcript, or the error that fails it.
  struct Pending {
    Entry media{};
    bool has_media = false;
    int64_t label = -1;
    std::string class_name;  // from key.class
    std::string text;        // from key.txt
    bool has_text = false;   // key.txt is a member
    std::string media_ext;
    std::vector<std::pair<std::string, Member>> others;  // by extension
    // A text member (key.txt, key.json): the media of a sample that has no
    // image, audio or video (a text-only record).
    Entry text_media{};
    std::string text_ext;
    std::string long_transcript, long_member;  // a key.txt over kMaxTranscriptBytes
    absl::Status error;
    std::string error_member;

    // Takes member `m` (extension `ext`, lower case) of shard `shard` at `path`.
    void Take(const IndexedMember& m, const std::string& ext, int shard, const std::string& path) {
      // The last part names the format ("p<tag>.pfv", "left.jpg").
      const size_t last = ext.rfind('.');
      const std::string format = last == std::string::npos ? ext : ext.substr(last + 1);
      if ((IsImageExtension(format) || IsAudioExtension(format) || IsVideoExtension(format)) &&
          !has_media) {
        media = Entry{shard, m.name, m.offset, m.size, absl::OkStatus()};
        media_ext = ext;
        has_media = true;
        return;
      }
      if (!IsLabelMember(m.name) && !IsClassNameMember(m.name)) {
        others.emplace_back(ext, Member{m.offset, m.size, 0});
        if (text_ext.empty() && (format == "txt" || format == "json")) {
          text_media = Entry{shard, m.name, m.offset, m.size, absl::OkStatus()};
          text_ext = ext;
        }
      }
      if (IsClassNameMember(m.name)) {
        class_name = m.text;
      } else if (IsTranscriptMember(m.name) && error.ok()) {
        text = m.text;
        has_text = true;
        // Over the limit fails a sample whose media is another member (a
        // text-only record's .txt is its media: read as the sample is).
        if (m.size > kMaxTranscriptBytes) {
          long_transcript = absl::StrCat(path, ":", SafeText(m.name), ": transcript of ", m.size,
                                         " bytes is over the limit of ", kMaxTranscriptBytes);
          long_member = m.name;
        }
      } else if (IsLabelMember(m.name) && error.ok()) {
        if (!absl::SimpleAtoi(m.text, &label) || label < 0) {
          Fail(m.name,
               absl::StrCat(path, ":", SafeText(m.name), ": label is not a non-negative integer"));
        }
      }
    }
    void Fail(const std::string& member, const std::string& why) {
      error = absl::DataLossError(why);
      error_member = member;
    }
  };

  // Adds the pending sample (if it has media or an error) and starts anew.
  void Flush(Pending* p, int shard, const std::string& path) {
    // A text-only record counts where the shards hold nothing else (Open
    // keeps them then): beside images, a stray key.json is no sample.
    const bool text_only = !p->has_media && !p->text_ext.empty() && p->error.ok();
    if (!text_only && !p->long_transcript.empty() && p->error.ok()) {
      p->Fail(p->long_member, p->long_transcript);
    }
    if (text_only) {  // its .txt is its media, not a transcript to carry beside it
      p->media = p->text_media;
      p->media_ext = p->text_ext;
      p->has_media = true;
      p->text.clear();
    }
    has_texts_ |= p->has_text && !text_only;
    if (p->has_media) any_media_ |= !text_only;
    if (!p->error.ok()) {
      samples_.push_back(Entry{shard, p->error_member, 0, 0, std::move(p->error)});
      labels_.push_back(-1);
      sample_texts_.emplace_back();
    } else if (p->has_media) {
      p->media.media_ext = ExtId(p->media_ext);
      p->media.first_member = members_.size();
      for (auto& [ext, member] : p->others) {
        member.ext = ExtId(ext);
        if (member.ext == kNoExt) continue;
        members_.push_back(member);
        ++p->media.members;
      }
      samples_.push_back(p->media);
      labels_.push_back(p->label);
      sample_texts_.push_back(std::move(p->text));
      if (text_only) text_only_.push_back(samples_.size() - 1);
      if (p->label >= 0 && !p->class_name.empty()) NameClass(p->label, p->class_name, path);
    }
    *p = Pending();
  }

  // Groups the members of shard `shards_.size() - 1` into samples: a
  // sample's media is its first image, audio or video member, else its
  // first text member (.txt, .json). Members of one sample
  // are adjacent; a sample is complete when the key changes. A key seen
  // before (in this shard or an earlier one) is FailedPrecondition: a
  // WebDataset key names one sample, and a repeated one is most often a
  // stale shard read beside new ones.
  absl::Status Group(const ShardIndex& index, absl::flat_hash_map<std::string, int>* keys) {
    const int shard = static_cast<int>(shards_.size()) - 1;
    const std::string& path = shards_.back()->name();
    std::string key;
    Pending pending;
    for (const IndexedMember& m : index.members) {
      const size_t slash = m.name.rfind('/');
      const size_t dot = m.name.find('.', slash == std::string::npos ? 0 : slash + 1);
      const std::string k = m.name.substr(0, dot);
      const std::string ext =
          dot == std::string::npos ? "" : absl::AsciiStrToLower(m.name.substr(dot + 1));
      if (k != key) {
        Flush(&pending, shard, path);
        key = k;
        const auto [seen, added] = keys->emplace(k, shard);
        if (!added) {
          return absl::FailedPreconditionError(absl::StrCat(
              "sample key '", SafeText(k), "' appears twice, in ", shards_[seen->second]->name(),
              " and ", path,
              ": a WebDataset key names one sample (stale shards beside new ones? prepflow "
              "pack --overwrite replaces them)"));
        }
      }
      pending.Take(m, ext, shard, path);
    }
    Flush(&pending, shard, path);
    if (!index.broken.ok()) {
      // The archive's structure is lost from here on (a corrupt header, a
      // member past the end of a truncated file): what came before stays,
      // and one failing sample stands for the rest of the shard.
      samples_.push_back(Entry{shard, "(rest of shard)", 0, 0, index.broken});
      labels_.push_back(-1);
      sample_texts_.emplace_back();
    }
    return absl::OkStatus();
  }

  // Whether sample e has member `field` (alternatives "jpg;png": any).
  bool HasMember(const Entry& e, const std::string& field) const {
    for (absl::string_view alternative : absl::StrSplit(field, ';')) {
      const auto id = ext_ids_.find(absl::AsciiStrToLower(alternative));
      if (id == ext_ids_.end()) continue;
      if (id->second == e.media_ext) return true;
      for (uint32_t m = 0; m < e.members; ++m) {
        if (members_[e.first_member + m].ext == id->second) return true;
      }
    }
    return false;
  }

  // Leaves out the records without a member require_fields_ names (a
  // record that failed to index stays, to be reported).
  void DropWithoutRequired(const std::string& root) {
    std::vector<size_t> drop;
    for (size_t i = 0; i < samples_.size(); ++i) {
      const Entry& e = samples_[i];
      if (!e.error.ok()) continue;
      for (const std::string& field : require_fields_) {
        if (!HasMember(e, field)) {
          drop.push_back(i);
          break;
        }
      }
    }
    if (drop.empty()) return;
    warnings_.push_back(absl::StrCat(root, ": ", drop.size(), " of ", samples_.size(),
                                     " records lack a field of --require-fields (",
                                     SafeText(absl::StrJoin(require_fields_, ",")),
                                     ") and are left out"));
    Drop(drop);
  }

  // Removes the samples of text alone (shards of images with a stray
  // key.json): they are samples only where nothing else is.
  void DropTextOnly() { Drop(text_only_); }

  // Removes the samples at `drop` (increasing).
  void Drop(const std::vector<size_t>& drop) {
    if (drop.empty()) return;
    size_t kept = 0, next = 0;
    for (size_t i = 0; i < samples_.size(); ++i) {
      if (next < drop.size() && drop[next] == i) {
        ++next;
        continue;
      }
      if (kept != i) {  // (a self-move would empty the strings)
        samples_[kept] = std::move(samples_[i]);
        labels_[kept] = labels_[i];
        sample_texts_[kept] = std::move(sample_texts_[i]);
      }
      ++kept;
    }
    samples_.resize(kept);
    labels_.resize(kept);
    sample_texts_.resize(kept);
  }

  // Label `label`'s class is `name`, as a sample of shard `path` says. Two
  // names for one label drop every name (with a warning).
  void NameClass(int64_t label, const std::string& name, const std::string& path) {
    if (class_names_conflict_) return;
    const auto [it, added] = class_names_.emplace(label, name);
    if (!added && it->second != name) {
      warnings_.push_back(absl::StrCat(path, ": label ", label, " is named both '",
                                       SafeText(it->second), "' and '", SafeText(name),
                                       "'; the shards' class names are not used"));
      class_names_conflict_ = true;
    }
  }
  // The class names the shards carry (key.class), when they name exactly the
  // labels 0, 1, ..., n - 1: the dataset's classes, as for an ImageFolder.
  void TakeClassNames() {
    if (class_names_conflict_ || class_names_.empty() ||
        class_names_.rbegin()->first != static_cast<int64_t>(class_names_.size()) - 1) {
      return;
    }
    for (auto& [label, name] : class_names_) classes_.push_back(std::move(name));
  }

  std::vector<std::unique_ptr<ByteSource>> shards_;
  std::vector<Entry> samples_;
  std::vector<Member> members_;
  std::vector<std::string> exts_;
  absl::flat_hash_map<std::string, uint16_t> ext_ids_;
  bool too_many_exts_ = false;
  std::map<int64_t, std::string> class_names_;  // while opening
  bool class_names_conflict_ = false;
  std::vector<std::string> sample_texts_;  // while opening: per sample, "" where none
  bool has_texts_ = false;                 // some sample has a key.txt
  bool any_media_ = false;                 // some sample has an image, audio or video
  std::vector<size_t> text_only_;          // the samples of text alone, in order
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenWebDataset(const std::string& root,
                                                        const std::vector<std::string>& shards,
                                                        const ShardAccess& access,
                                                        const Configure& configure) {
  return WebDataset::Open(root, shards, access, configure);
}

}  // namespace prepflow::detail
