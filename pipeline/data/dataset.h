// Datasets: random access to (encoded bytes, label) by sample index.
//
// Two layouts:
//  * ImageFolder, indexed exactly as torchvision.datasets.ImageFolder does it:
//    classes are the sub-folders of the root sorted by name (label = position),
//    samples are the files with an image extension found by a sorted recursive
//    walk of each class folder. Sample i is the same file in both.
//  * WebDataset: .tar shards (a folder of them, sorted by name, or one file)
//    whose members are grouped by key (the name up to the first '.' of its
//    basename): key.jpg (or .jpeg/.png/...) is the image, key.cls its label
//    as decimal text. `prepflow pack` writes such shards from an ImageFolder,
//    keeping sample order and labels, so both give the same checksum.
//
// Thread-safety: after Open, every method may be called concurrently.
#ifndef PREPFLOW_PIPELINE_DATA_DATASET_H_
#define PREPFLOW_PIPELINE_DATA_DATASET_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pipeline/core/op.h"
#include "pipeline/core/sample.h"
#include "pipeline/core/workspace.h"
#include "pipeline/data/byte_source.h"
#include "pipeline/data/read_ahead.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

inline constexpr int64_t kDefaultMaxFileBytes = int64_t{256} << 20;
// The most samples a video may be read as (--clips-per-video).
inline constexpr int kMaxClipsPerVideo = 100;
// The most sources a mixture (DatasetSpec.mix) holds.
inline constexpr int kMaxMixSources = 1024;

struct DatasetOptions {
  // When set, the dataset must lie below this folder and every file is opened
  // with the kernel refusing any path that resolves outside it (openat2
  // RESOLVE_BENEATH): a worker's --data-root.
  std::string confine_to;
  // Reads datasets named by URL (http://, https://, s3://); null: a URL is
  // refused. Kept alive by the datasets opened through it.
  std::shared_ptr<const ObjectStore> store;
  // When set, only URLs below `url_prefixes` are read (CheckUrlAllowed): a
  // worker's --allow-url-prefix, where none means no URL at all.
  bool confine_urls = false;
  std::vector<std::string> url_prefixes;
  // A remote shard without a sidecar index is indexed by one pass over it,
  // read in windows of this many bytes.
  size_t index_window_bytes = size_t{8} << 20;
  // A remote shard's index made by a pass is kept here (by URL, size and
  // ETag), so the next open of an unchanged shard costs no pass; empty: not
  // kept.
  std::string index_cache_dir;
  // Remote data: reads started by Prefetch, at most this many at once and
  // this many bytes ahead (requests 0: no reading ahead).
  ReadAheadOptions read_ahead;
};

namespace detail {
struct DatasetSetup;
}  // namespace detail

class Dataset {
 public:
  virtual ~Dataset();

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  int64_t label(int64_t i) const { return labels_[i]; }
  // Whether samples carry a transcript (a manifest's "text", LibriSpeech's
  // .trans.txt), and sample i's. REQUIRES (text): has_texts().
  bool has_texts() const { return !texts_.empty(); }
  const std::string& text(int64_t i) const { return texts_[i]; }
  // Whether samples come with a duration (a manifest's), and sample i's in
  // seconds (< 0: unknown). REQUIRES (duration): has_durations().
  bool has_durations() const { return !durations_.empty(); }
  double duration(int64_t i) const { return durations_[i]; }
  // Which part of its media sample i is (a manifest's start and end, a
  // video's clip k of N); the whole media, one clip, by default.
  MediaWindow window(int64_t i) const { return windows_.empty() ? MediaWindow() : windows_[i]; }
  bool has_windows() const { return !windows_.empty(); }
  // A mixture (DatasetSpec.mix): each source's samples, in order; empty for
  // a dataset of one source.
  const std::vector<int64_t>& mix_sizes() const { return mix_sizes_; }
  // Sets s's index, label and window: sample i's identity.
  void Describe(int64_t i, Sample& s) const {
    s.index = i;
    s.label = labels_[i];
    s.window = window(i);
  }
  // Class names (ImageFolder); empty for WebDataset.
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& root() const { return root_; }
  // Where URLs are read (its stats() count this dataset's requests, among
  // others); null when none was given.
  const ObjectStore* store() const { return store_.get(); }
  virtual const char* format() const = 0;

  // Where sample i comes from, for messages: "root/class/img.jpg" or
  // "shard-000001.tar:000000123.jpg".
  virtual std::string SamplePath(int64_t i) const = 0;
  // Reads sample i's encoded bytes into `out`; sets `*size`. Errors carry the
  // path (NotFound, PermissionDenied, DataLoss for a short read, ...).
  // REQUIRES: 0 <= i < size().
  virtual absl::Status Read(int64_t i, Buffer* out, size_t* size) const = 0;
  // The first min(max_bytes, its size) bytes of sample i into `out` (`*size`
  // of them) and its whole size in `*whole`: what reading a header needs,
  // without the rest (a file's or a shard member's first bytes, a ranged
  // read of an object). Errors as Read's. By default the whole sample.
  virtual absl::Status ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                                uint64_t* whole) const;
  // Whether samples are records of named members (WebDataset), whose
  // members a pipeline's fields may name.
  virtual bool has_members() const { return false; }
  // Reads member `field` of sample i into `out` (`*size` bytes): a
  // WebDataset member by its extension after the key ("jpg", "left.png";
  // alternatives "jpg;png", the first present), "" the media as Read does.
  // NotFound naming the sample and the field where it has none.
  virtual absl::Status ReadMember(int64_t i, const std::string& field, Buffer* out,
                                  size_t* size) const;
  // The file extension of sample i's image, lower case, without the dot.
  virtual std::string Extension(int64_t i) const = 0;
  // Starts reading `indices` ahead of their Read where reads wait on the
  // network (remote data; see read_ahead.h); a hint that local data ignores.
  virtual void Prefetch(absl::Span<const int64_t> indices) const { (void)indices; }
  // Where sample i's bytes lie in its shard; (0, 0) for a file of its own.
  virtual void Extent(int64_t i, uint64_t* offset, uint64_t* size) const {
    (void)i;
    *offset = 0;
    *size = 0;
  }

  // Reads larger than this are refused before memory is reserved.
  int64_t max_file_bytes() const { return max_file_bytes_; }
  // XXH3 over the format, every sample's path relative to the root, its
  // label and its extent: two indexes with the same fingerprint map every
  // index to the same bytes and label.
  uint64_t fingerprint() const { return fingerprint_; }
  // Where the dataset is: a local root's real path (symlinks resolved) or
  // the URL it was opened at.
  const std::string& location() const { return location_; }
  // The fingerprint and the location together: two datasets with the same
  // names, labels and sizes in two places are different data, and what is
  // kept of one (a cache's entries) must never be served for the other.
  uint64_t identity() const { return identity_; }
  // What changes whenever sample i's bytes may have: a hash of its file's
  // (or shard's) device, inode, size and modification and change times,
  // stat'ed now, or of its object's ETag as listed or opened (0 when the
  // store gives none). A cached value made from another version is stale.
  virtual uint64_t SourceVersion(int64_t i) const = 0;
  // What indexing left out and why (a symlink loop not followed), for the
  // caller to log.
  const std::vector<std::string>& index_warnings() const { return warnings_; }

 protected:
  friend struct detail::DatasetSetup;

  // ResourceExhausted naming `path` when `size` is over the limit.
  absl::Status CheckSize(uint64_t size, const std::string& path) const;
  // Opens `path` for reading, without blocking, and fills `*st`; when
  // confined, only if it resolves (symlinks and "..") below the confinement
  // root: otherwise PermissionDenied naming it. Anything but a regular file
  // (a FIFO, a device) is FailedPrecondition.
  absl::StatusOr<int> OpenForRead(const std::string& path, struct stat* st) const;
  // A local file's first `head` bytes (all of them: SIZE_MAX) through
  // OpenForRead, and its size; over max_file_bytes() is ResourceExhausted.
  absl::Status ReadLocal(const std::string& path, size_t head, Buffer* out, size_t* size,
                         uint64_t* whole) const;

  int64_t max_file_bytes_ = kDefaultMaxFileBytes;
  // DatasetSpec.require_fields: records without one are left out (datasets
  // of records alone; OpenDataset refuses them for others).
  std::vector<std::string> require_fields_;
  uint64_t fingerprint_ = 0;
  uint64_t identity_ = 0;
  std::string location_;
  std::string confine_root_;  // realpath, no trailing slash; empty: not confined
  int confine_fd_ = -1;
  std::string root_;
  std::vector<std::string> classes_;
  std::vector<int64_t> labels_;
  std::vector<std::string> texts_;    // empty, or one per sample
  std::vector<double> durations_;     // empty, or one per sample
  std::vector<MediaWindow> windows_;  // empty, or one per sample
  std::vector<int64_t> mix_sizes_;    // a mixture's sources' sizes
  std::vector<std::string> warnings_;
  std::shared_ptr<const ObjectStore> store_;  // where URLs are read; may be null
  // Remote data's reads ahead. A subclass resets it in its destructor, before
  // the sources its reads use go.
  std::unique_ptr<ReadAhead> read_ahead_;
};

// Reads sample s.index's record for a pipeline of `fields`
// (Pipeline::fields): the first field's bytes as the sample's value (in
// ws.encoded), the others as its stored fields, encoded. `*bytes`: what was
// read. Errors as ReadMember's.
absl::Status ReadRecord(const Dataset& dataset, const std::vector<std::string>& fields,
                        Workspace& ws, Sample& s, size_t* bytes);
// Each of `inner`'s samples as `clips` samples (sample i is clip i % clips
// of inner sample i / clips): a video dataset read --clips-per-video times.
// `clips` 1 gives `inner` back.
std::unique_ptr<Dataset> ClipsOf(std::unique_ptr<Dataset> inner, int clips);
// `sources` as one dataset (mix.cc): source s's i-th sample is sample
// offset(s) + i, offset(s) the sizes of the sources before it; labels,
// transcripts, durations and windows are the sources'; class names where
// every source has the same. REQUIRES: at least one source.
std::unique_ptr<Dataset> MixOf(std::vector<std::unique_ptr<Dataset>> sources);

// {""}: the fields of a sample read whole as its media (materialized data,
// whose one member holds a record).
const std::vector<std::string>& MediaOnly();

// Opens `spec.path` in `spec.format`; FORMAT_AUTO picks WebDataset for a .tar
// file or a folder holding .tar files, else ImageFolder. Errors: NotFound
// (missing path, no classes, no images), DataLoss (corrupt shard),
// InvalidArgument (bad .cls label), each naming the path.
// With options.confine_to, a dataset path outside it is PermissionDenied.
//
// A URL (with options.store) names remote data the same ways: one .tar
// shard, a brace pattern of shards, or a prefix ("s3://bucket/train"), which
// is listed: WebDataset when it holds .tar objects, else an ImageFolder
// whose class is the first path component below the prefix. Remote shards
// are indexed from their sidecar (<shard>.idx, see shard_index.h) or by one
// streaming pass. With options.confine_urls, a URL outside
// options.url_prefixes is PermissionDenied naming it.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const proto::DatasetSpec& spec,
                                                     const DatasetOptions& options = {});

// A dataset as an op's data (Op::Open): its samples' bytes, by index.
std::unique_ptr<OpData> AsOpData(std::unique_ptr<Dataset> dataset);

// How ops open their data (PipelineOptions::open_data): OpenDataset of the
// path (format auto) with `options`, so a worker's confinement holds.
OpDataOpener OpDataOpenerFor(DatasetOptions options);

// How ops read one file (PipelineOptions::read_file): a local path below
// options.confine_to when set, or a URL through options.store (within
// options.url_prefixes when confine_urls).
OpFileReader OpFileReaderFor(DatasetOptions options);

// Parses "auto" | "imagefolder" | "wds" (also "webdataset"). The error quotes
// `name`; the caller adds its option's name.
absl::StatusOr<proto::DatasetSpec::Format> ParseDatasetFormat(const std::string& name);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_DATASET_H_
