#include "pipeline/data/dataset.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/text.h"

namespace prepflow {

Dataset::~Dataset() {
  if (confine_fd_ >= 0) close(confine_fd_);
}

absl::Status Dataset::CheckSize(uint64_t size, const std::string& path) const {
  if (size <= static_cast<uint64_t>(max_file_bytes_)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s is %d bytes, over the limit of %d (--max-file-bytes)", path, size, max_file_bytes_));
}

absl::StatusOr<proto::DatasetSpec::Format> ParseDatasetFormat(const std::string& name) {
  if (name == "auto") return proto::DatasetSpec::FORMAT_AUTO;
  if (name == "imagefolder") return proto::DatasetSpec::FORMAT_IMAGEFOLDER;
  if (name == "wds" || name == "webdataset") return proto::DatasetSpec::FORMAT_WEBDATASET;
  if (name == "lines") return proto::DatasetSpec::FORMAT_LINES;
  if (name == "manifest") return proto::DatasetSpec::FORMAT_MANIFEST;
  return absl::InvalidArgumentError(
      absl::StrCat("'", SafeText(name), "' is not one of auto, imagefolder, wds, manifest, lines"));
}

}  // namespace prepflow
