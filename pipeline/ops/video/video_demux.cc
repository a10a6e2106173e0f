#include "pipeline/ops/video/video_demux.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
}

namespace prepflow::video {
namespace {

// Frame rates above this are no camera's: a header claiming more frames than
// this per second is refused (a tiny file that would decode to millions).
constexpr double kMaxFps = 1000;
// The containers prepflow reads (libavformat's demuxer names).
constexpr char kFormats[] = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi";

// A container may name other files (an MP4's data references, a playlist's
// entries): none is ever opened.
int RefuseOpen(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) {
  return AVERROR(EPERM);
}

double Rate(AVRational r) { return r.num > 0 && r.den > 0 ? av_q2d(r) : 0; }

// The video stream's duration in seconds, else the container's; 0 unknown.
double Seconds(const AVFormatContext& f, const AVStream& st) {
  if (st.duration != AV_NOPTS_VALUE && st.duration > 0 && st.time_base.den > 0) {
    return static_cast<double>(st.duration) * av_q2d(st.time_base);
  }
  if (f.duration != AV_NOPTS_VALUE && f.duration > 0) {
    return static_cast<double>(f.duration) / AV_TIME_BASE;
  }
  return 0;
}

absl::Status CheckLimits(const VideoInfo& v, const VideoLimits& limits) {
  if (static_cast<double>(v.width) * v.height > static_cast<double>(limits.max_pixels)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("video: %dx%d frames are over the limit of %d pixels (--max-pixels)",
                        v.width, v.height, limits.max_pixels));
  }
  if (!(v.seconds <= limits.max_seconds)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("video: %g s is over the limit of %g s (--max-video-seconds)", v.seconds,
                        limits.max_seconds));
  }
  const double most = std::max(v.seconds, 1.0) * kMaxFps;
  if (static_cast<double>(v.frames) > most || v.fps > kMaxFps) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "video: the header declares %d frames in %g s at %g fps, over %g frames a second", v.frames,
        v.seconds, v.fps, kMaxFps));
  }
  return absl::OkStatus();
}

}  // namespace

std::string AvError(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, text, sizeof(text));
  return text;
}

void QuietAvLog() {
  static const bool kQuiet = [] {
    av_log_set_level(AV_LOG_QUIET);
    return true;
  }();
  (void)kQuiet;
}

int MemoryReader::Read(void* opaque, uint8_t* buf, int n) {
  auto* r = static_cast<MemoryReader*>(opaque);
  const size_t k = std::min(r->size - r->pos, static_cast<size_t>(std::max(n, 0)));
  if (k == 0) return AVERROR_EOF;
  std::memcpy(buf, r->data + r->pos, k);
  r->pos += k;
  return static_cast<int>(k);
}

int64_t MemoryReader::Seek(void* opaque, int64_t offset, int whence) {
  auto* r = static_cast<MemoryReader*>(opaque);
  if (whence & AVSEEK_SIZE) return static_cast<int64_t>(r->size);
  whence &= ~AVSEEK_FORCE;
  const int64_t base = whence == SEEK_SET   ? 0
                       : whence == SEEK_CUR ? static_cast<int64_t>(r->pos)
                       : whence == SEEK_END ? static_cast<int64_t>(r->size)
                                            : -1;
  if (base < 0 || offset < -base || offset > static_cast<int64_t>(r->size) - base) {
    return AVERROR(EINVAL);
  }
  r->pos = static_cast<size_t>(base + offset);
  return base + offset;
}

Demuxer::~Demuxer() {
  avformat_close_input(&format_);
  if (io_ != nullptr) av_freep(&io_->buffer);
  avio_context_free(&io_);
}

absl::Status Demuxer::Open(const uint8_t* bytes, size_t size) {
  constexpr int kBufferBytes = 64 << 10;
  reader_ = {bytes, size, 0};
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferBytes));
  if (buffer == nullptr) return absl::ResourceExhaustedError("video: out of memory");
  io_ = avio_alloc_context(buffer, kBufferBytes, 0, &reader_, MemoryReader::Read, nullptr,
                           MemoryReader::Seek);
  format_ = avformat_alloc_context();
  if (io_ == nullptr || format_ == nullptr) {
    if (io_ == nullptr) av_free(buffer);
    return absl::ResourceExhaustedError("video: out of memory");
  }
  format_->pb = io_;
  format_->flags |= AVFMT_FLAG_CUSTOM_IO;
  format_->io_open = RefuseOpen;
  format_->probesize = 1 << 20;
  AVDictionary* options = nullptr;
  av_dict_set(&options, "format_whitelist", kFormats, 0);
  const int opened = avformat_open_input(&format_, nullptr, nullptr, &options);
  av_dict_free(&options);
  if (opened < 0) {  // libavformat has freed format_ and set it to null
    return absl::InvalidArgumentError(
        absl::StrCat("video: not a container prepflow reads (", AvError(opened), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<VideoInfo> ReadVideoInfo(const AVFormatContext& f, const VideoLimits& limits) {
  VideoInfo v;
  v.container = f.iformat != nullptr ? f.iformat->name : "";
  v.streams = static_cast<int>(f.nb_streams);
  if (v.streams > limits.max_streams) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("video: the container holds %d streams, over the limit of %d", v.streams,
                        limits.max_streams));
  }
  for (int i = 0; i < v.streams; ++i) {
    const AVStream& st = *f.streams[i];
    const AVMediaType type = st.codecpar->codec_type;
    v.has_audio = v.has_audio || type == AVMEDIA_TYPE_AUDIO;
    if (type == AVMEDIA_TYPE_VIDEO && v.video_stream < 0 &&
        !(st.disposition & AV_DISPOSITION_ATTACHED_PIC)) {
      v.video_stream = i;
    }
  }
  if (v.video_stream < 0) return absl::InvalidArgumentError("video: the container has no video");
  const AVStream& st = *f.streams[v.video_stream];
  v.codec = avcodec_get_name(st.codecpar->codec_id);
  v.width = st.codecpar->width;
  v.height = st.codecpar->height;
  if (v.width <= 0 || v.height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("video: the header gives frames of %dx%d", v.width, v.height));
  }
  v.fps = Rate(st.avg_frame_rate) > 0 ? Rate(st.avg_frame_rate) : Rate(st.r_frame_rate);
  v.seconds = Seconds(f, st);
  v.frames = std::max<int64_t>(st.nb_frames, 0);
  if (absl::Status s = CheckLimits(v, limits); !s.ok()) return s;
  return v;
}

}  // namespace prepflow::video
