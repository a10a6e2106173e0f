// What the video code shares (internal to pipeline/ops/video/): libavformat's
// demuxer over a file's bytes in memory, and the header read from it.
//
// Thread-safety: a Demuxer is one thread's; the functions are reentrant.
#ifndef PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_DEMUX_H_
#define PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_DEMUX_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/ops/video/video_probe.h"

extern "C" {
#include <libavformat/avformat.h>
}

namespace prepflow::video {

// libavutil's text for an error code.
std::string AvError(int code);

// What libavformat and libavcodec would print of a broken file comes back
// as a status instead: a hostile dataset must not fill a worker's log.
void QuietAvLog();

// The file's bytes as libavformat's input.
struct MemoryReader {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;

  static int Read(void* opaque, uint8_t* buf, int n);
  static int64_t Seek(void* opaque, int64_t offset, int whence);
};

// libavformat's demuxer over bytes in memory (which must outlive it): no
// protocol, no file a container names is opened, only the containers
// prepflow reads, probing bounded.
class Demuxer {
 public:
  Demuxer() = default;
  Demuxer(const Demuxer&) = delete;
  Demuxer& operator=(const Demuxer&) = delete;
  ~Demuxer();

  // InvalidArgument for bytes that are no container prepflow reads.
  absl::Status Open(const uint8_t* bytes, size_t size);

  AVFormatContext* format() const { return format_; }

 private:
  MemoryReader reader_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* format_ = nullptr;
};

// The header of an opened container, checked against `limits`.
absl::StatusOr<VideoInfo> ReadVideoInfo(const AVFormatContext& format, const VideoLimits& limits);

}  // namespace prepflow::video

#endif  // PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_DEMUX_H_
