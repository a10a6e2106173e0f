// Reading and writing POSIX tar archives (ustar, with GNU long names and pax
// path/size records), as WebDataset shards use them.
//
// Thread-safety: ScanTar only reads its source; a TarWriter is used by one
// thread.
#ifndef PREPFLOW_PIPELINE_DATA_TAR_H_
#define PREPFLOW_PIPELINE_DATA_TAR_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pipeline/data/byte_source.h"

namespace prepflow {

struct TarMember {
  std::string name;
  uint64_t offset = 0;  // of the member's data in the archive
  uint64_t size = 0;
};

// Calls `visit` for every regular file in the archive `source`, in archive
// order, reading only the headers. Errors: DataLoss naming the source and the
// offset of a bad header or a member that runs past the end of the archive;
// the source's own read errors.
absl::Status ScanTar(const ByteSource& source,
                     const std::function<absl::Status(const TarMember&)>& visit);

// Writes a tar archive. Names must be at most 100 bytes. Entries get mode
// 0644 and mtime 0, so the same input always gives the same bytes.
class TarWriter {
 public:
  TarWriter() = default;
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  absl::Status Open(const std::string& path);
  absl::Status Add(absl::string_view name, const void* data, size_t size);
  // Writes the end-of-archive blocks and closes the file.
  absl::Status Close();
  // Closes the file as it is, after a failure; the caller removes it.
  void Abandon();
  uint64_t bytes_written() const { return bytes_; }
  // What Add wrote since Open, with each member's data offset.
  const std::vector<TarMember>& members() const { return members_; }

 private:
  absl::Status Write(const void* data, size_t size);

  std::FILE* file_ = nullptr;
  std::string path_;
  uint64_t bytes_ = 0;
  std::vector<TarMember> members_;
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_TAR_H_
