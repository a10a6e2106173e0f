// A video dataset read --clips-per-video times: each video is N samples,
// clip k of N its k-th (decode_video's SAMPLER_UNIFORM spaces them; its
// other samplers draw each clip on its own, as PyTorchVideo's
// RandomMultiClipSampler). Everything else is the video's.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/data/datasets.h"

namespace prepflow {
namespace {

class ClipsDataset : public Dataset {
 public:
  ClipsDataset(std::unique_ptr<Dataset> inner, int clips)
      : inner_(std::move(inner)), clips_(clips) {}

  const char* format() const override { return inner_->format(); }
  std::string SamplePath(int64_t i) const override {
    return absl::StrCat(inner_->SamplePath(i / clips_), "#clip", i % clips_);
  }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    return inner_->Read(i / clips_, out, size);
  }
  absl::Status ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                        uint64_t* whole) const override {
    return inner_->ReadHead(i / clips_, max_bytes, out, size, whole);
  }
  bool has_members() const override { return inner_->has_members(); }
  absl::Status ReadMember(int64_t i, const std::string& field, Buffer* out,
                          size_t* size) const override {
    return inner_->ReadMember(i / clips_, field, out, size);
  }
  std::string Extension(int64_t i) const override { return inner_->Extension(i / clips_); }
  void Prefetch(absl::Span<const int64_t> indices) const override {
    std::vector<int64_t> videos;
    for (const int64_t i : indices) {
      if (videos.empty() || videos.back() != i / clips_) videos.push_back(i / clips_);
    }
    inner_->Prefetch(videos);
  }
  void Extent(int64_t i, uint64_t* offset, uint64_t* size) const override {
    inner_->Extent(i / clips_, offset, size);
  }
  uint64_t SourceVersion(int64_t i) const override { return inner_->SourceVersion(i / clips_); }

 private:
  std::unique_ptr<Dataset> inner_;
  int clips_;
};

}  // namespace

void detail::DatasetSetup::Expand(Dataset* to, const Dataset& from, int clips) {
  to->max_file_bytes_ = from.max_file_bytes_;
  to->root_ = from.root_;
  to->classes_ = from.classes_;
  to->warnings_ = from.warnings_;
  to->store_ = from.store_;
  for (int64_t i = 0; i < from.size(); ++i) {
    for (int k = 0; k < clips; ++k) {
      to->labels_.push_back(from.labels_[i]);
      if (from.has_texts()) to->texts_.push_back(from.texts_[i]);
      if (from.has_durations()) to->durations_.push_back(from.durations_[i]);
      MediaWindow w = from.window(i);
      w.clip = k;
      w.clips = clips;
      to->windows_.push_back(w);
    }
  }
}

std::unique_ptr<Dataset> ClipsOf(std::unique_ptr<Dataset> inner, int clips) {
  if (clips <= 1) return inner;
  const Dataset& from = *inner;
  auto out = std::make_unique<ClipsDataset>(std::move(inner), clips);
  detail::DatasetSetup::Expand(out.get(), from, clips);
  return out;
}

}  // namespace prepflow
