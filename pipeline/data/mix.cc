// A weighted mixture of datasets as one (DatasetSpec.mix): the sources'
// samples in order, source s's i-th at offset(s) + i; every read goes to
// the source that holds the sample. Which samples an epoch visits, and in
// what order, is the client's MixOrder (epoch_order.h).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/data/datasets.h"

namespace prepflow {
namespace {

class MixDataset : public Dataset {
 public:
  explicit MixDataset(std::vector<std::unique_ptr<Dataset>> sources)
      : sources_(std::move(sources)) {
    int64_t offset = 0;
    for (const auto& s : sources_) {
      offsets_.push_back(offset);
      offset += s->size();
    }
  }

  const char* format() const override { return "mixture"; }
  std::string SamplePath(int64_t i) const override {
    const auto [s, j] = Locate(i);
    return sources_[s]->SamplePath(j);
  }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    const auto [s, j] = Locate(i);
    return sources_[s]->Read(j, out, size);
  }
  absl::Status ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                        uint64_t* whole) const override {
    const auto [s, j] = Locate(i);
    return sources_[s]->ReadHead(j, max_bytes, out, size, whole);
  }
  bool has_members() const override {
    return std::all_of(sources_.begin(), sources_.end(),
                       [](const auto& s) { return s->has_members(); });
  }
  absl::Status ReadMember(int64_t i, const std::string& field, Buffer* out,
                          size_t* size) const override {
    const auto [s, j] = Locate(i);
    return sources_[s]->ReadMember(j, field, out, size);
  }
  std::string Extension(int64_t i) const override {
    const auto [s, j] = Locate(i);
    return sources_[s]->Extension(j);
  }
  void Prefetch(absl::Span<const int64_t> indices) const override {
    std::vector<std::vector<int64_t>> per(sources_.size());
    for (const int64_t i : indices) {
      const auto [s, j] = Locate(i);
      per[s].push_back(j);
    }
    for (size_t s = 0; s < per.size(); ++s) {
      if (!per[s].empty()) sources_[s]->Prefetch(per[s]);
    }
  }
  void Extent(int64_t i, uint64_t* offset, uint64_t* size) const override {
    const auto [s, j] = Locate(i);
    sources_[s]->Extent(j, offset, size);
  }
  uint64_t SourceVersion(int64_t i) const override {
    const auto [s, j] = Locate(i);
    return sources_[s]->SourceVersion(j);
  }

 private:
  // The source holding sample i, and its index there.
  std::pair<size_t, int64_t> Locate(int64_t i) const {
    const size_t s = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), i) -
                                         offsets_.begin() - 1);
    return {s, i - offsets_[s]};
  }

  std::vector<std::unique_ptr<Dataset>> sources_;
  std::vector<int64_t> offsets_;
};

}  // namespace

void detail::DatasetSetup::Concatenate(Dataset* to, const std::vector<const Dataset*>& from) {
  const bool texts = std::any_of(from.begin(), from.end(), [](auto* d) { return d->has_texts(); });
  const bool durations =
      std::any_of(from.begin(), from.end(), [](auto* d) { return d->has_durations(); });
  const bool windows =
      std::any_of(from.begin(), from.end(), [](auto* d) { return d->has_windows(); });
  to->max_file_bytes_ = from[0]->max_file_bytes_;
  to->store_ = from[0]->store_;
  // Class names only where every source names the same classes.
  const bool same_classes = std::all_of(from.begin(), from.end(),
                                        [&](auto* d) { return d->classes_ == from[0]->classes_; });
  if (same_classes) to->classes_ = from[0]->classes_;
  for (const Dataset* d : from) {
    if (to->store_ == nullptr) to->store_ = d->store_;
    to->mix_sizes_.push_back(d->size());
    to->labels_.insert(to->labels_.end(), d->labels_.begin(), d->labels_.end());
    to->warnings_.insert(to->warnings_.end(), d->warnings_.begin(), d->warnings_.end());
    for (int64_t i = 0; i < d->size(); ++i) {
      if (texts) to->texts_.push_back(d->has_texts() ? d->text(i) : std::string());
      if (durations) to->durations_.push_back(d->has_durations() ? d->duration(i) : -1.0);
      if (windows) to->windows_.push_back(d->window(i));
    }
  }
}

std::unique_ptr<Dataset> MixOf(std::vector<std::unique_ptr<Dataset>> sources) {
  std::vector<const Dataset*> from;
  for (const auto& s : sources) from.push_back(s.get());
  auto out = std::make_unique<MixDataset>(std::move(sources));
  detail::DatasetSetup::Concatenate(out.get(), from);
  return out;
}

}  // namespace prepflow
