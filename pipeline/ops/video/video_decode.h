// Decoding a clip of a video: the frames shown at evenly spaced times,
// decoded from the keyframe before the first to the last one only, as RGB24.
//
// Which frame is shown at time t (seconds from the video stream's start): the
// last frame whose presentation timestamp is at or before t (within a
// microsecond), the first frame before it, the last frame after the end. So
// variable frame rates are read by timestamp, as TorchCodec's
// get_frames_played_at reads them.
//
// Frames are converted by libswscale to RGB24 as PyAV's
// to_ndarray(format="rgb24") converts them (bilinear flags, the context's
// default colour matrix); libavcodec decodes on the calling thread only.
//
// Hostile input: the header is checked as ProbeVideo checks it; a clip that
// needs more than VideoLimits::max_frames frames decoded fails
// (ResourceExhausted) having decoded at most that many; frames whose size
// differs from the header's fail the clip (DataLoss) before anything is
// written for them.
//
// Thread-safety: a VideoReader is one thread's.
#ifndef PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_DECODE_H_
#define PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/core/sample.h"
#include "pipeline/ops/video/video_probe.h"

namespace prepflow {

// A clip: `frames` times `step` seconds apart from `start` (seconds from the
// video's first frame).
struct ClipTimes {
  double start = 0;
  double step = 0;
  int frames = 0;
};

class VideoReader {
 public:
  // Reads and checks the header of the video in `bytes` (which must
  // outlive the reader): as ProbeVideo.
  static absl::StatusOr<std::unique_ptr<VideoReader>> Open(const uint8_t* bytes, size_t size,
                                                           const VideoLimits& limits);
  ~VideoReader();

  const VideoInfo& info() const { return info_; }
  // Bytes of one RGB24 frame: width x height x 3.
  size_t frame_bytes() const { return static_cast<size_t>(info_.width) * info_.height * 3; }

  // Decodes `clip` into `out`: frame i at out + i * frame_bytes(), rows
  // packed. `shown`, if given, gets each frame's timestamp (seconds from the
  // first frame); `rows` (a workspace's, so that it is counted) holds one
  // frame in rows padded for the converter where the width needs it (null:
  // a buffer of the call's own). InvalidArgument for a clip that is no clip
  // (no frames, negative or non-finite times); DataLoss for a stream that
  // does not decode; ResourceExhausted past max_frames.
  absl::Status DecodeClip(const ClipTimes& clip, uint8_t* out, std::vector<double>* shown = nullptr,
                          Buffer* rows = nullptr);

 private:
  struct State;
  explicit VideoReader(std::unique_ptr<State> state, const VideoInfo& info,
                       const VideoLimits& limits);

  std::unique_ptr<State> state_;
  VideoInfo info_;
  VideoLimits limits_;
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_DECODE_H_
