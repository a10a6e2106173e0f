#include "pipeline/ops/video/video_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "pipeline/ops/video/video_demux.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace prepflow {
namespace {

// Times within this of a frame's timestamp are at it (seconds).
constexpr double kTimeSlack = 1e-6;

struct FreeFrame {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct FreePacket {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FreeCodec {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
using FramePtr = std::unique_ptr<AVFrame, FreeFrame>;
using PacketPtr = std::unique_ptr<AVPacket, FreePacket>;
using CodecPtr = std::unique_ptr<AVCodecContext, FreeCodec>;

// This thread's libswscale context, kept from frame to frame and clip to clip
// while the frames' format and size stay the same. (Not sws_getCachedContext: a context made for a
// full-range format, yuvj420p, records it as yuv420p at full range, and would be reused for
// limited-range yuv420p frames after it.)
struct ThreadScaler {
  ~ThreadScaler() { sws_freeContext(context); }

  // The context for `frame`, made anew when its format or size changes.
  SwsContext* For(const AVFrame& frame) {
    const auto f = static_cast<AVPixelFormat>(frame.format);
    if (context == nullptr || f != format || frame.width != width || frame.height != height) {
      sws_freeContext(context);
      context = sws_getContext(frame.width, frame.height, f, frame.width, frame.height,
                               AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
      format = f;
      width = frame.width;
      height = frame.height;
    }
    return context;
  }

  SwsContext* context = nullptr;
  AVPixelFormat format = AV_PIX_FMT_NONE;
  int width = 0, height = 0;
};

// libswscale's SIMD converters write whole blocks of pixels: into rows
// padded as a frame's are (PyAV's included), the last pixels of a row whose
// width is no multiple of the block come out right; into packed rows they
// are left unwritten.
constexpr int kRowAlign = 64;

// `frame` as RGB24 into `dst` (rows packed), as PyAV's to_ndarray("rgb24");
// `rows` holds the padded rows where they are needed.
absl::Status ToRgb(const AVFrame& frame, uint8_t* dst, Buffer* rows) {
  thread_local ThreadScaler scaler;
  const auto format = static_cast<AVPixelFormat>(frame.format);
  SwsContext* context = scaler.For(frame);
  if (context == nullptr) {
    const char* name = av_get_pix_fmt_name(format);
    return absl::InvalidArgumentError(absl::StrFormat(
        "video: frames in pixel format %s do not convert to RGB", name != nullptr ? name : "?"));
  }
  const int packed = frame.width * 3;
  const int padded = (packed + kRowAlign - 1) / kRowAlign * kRowAlign;
  uint8_t* out = dst;
  if (padded != packed) out = rows->Reserve(static_cast<size_t>(padded) * frame.height);
  uint8_t* planes[4] = {out, nullptr, nullptr, nullptr};
  int strides[4] = {padded, 0, 0, 0};
  sws_scale(context, frame.data, frame.linesize, 0, frame.height, planes, strides);
  if (out != dst) {
    for (int y = 0; y < frame.height; ++y) {
      std::memcpy(dst + static_cast<size_t>(packed) * y, out + static_cast<size_t>(padded) * y,
                  packed);
    }
  }
  return absl::OkStatus();
}

// Resolves a clip's times to the frames shown at them as decoded frames
// arrive in presentation order, converting each chosen frame once.
class FramePicker {
 public:
  FramePicker(std::vector<double> times, uint8_t* out, size_t frame_bytes, Buffer* rows,
              std::vector<double>* shown)
      : times_(std::move(times)),
        out_(out),
        frame_bytes_(frame_bytes),
        rows_(rows),
        shown_(shown) {}

  bool done() const { return next_ == times_.size(); }
  double first_time() const { return times_[0]; }
  const std::vector<double>& times() const { return times_; }
  bool empty() const { return held_ == nullptr; }

  // A decoded frame at time t: the times before it were showing the frame
  // held so far (or, before the first frame, this one).
  absl::Status Offer(AVFrame* frame, double t) {
    while (!done() && times_[next_] + kTimeSlack < t) {
      AVFrame* shown = held_ != nullptr ? held_.get() : frame;
      if (absl::Status s = Write(shown, held_ != nullptr ? held_t_ : t); !s.ok()) return s;
    }
    if (held_ == nullptr) held_.reset(av_frame_alloc());
    if (held_ == nullptr) return absl::ResourceExhaustedError("video: out of memory");
    av_frame_unref(held_.get());
    av_frame_move_ref(held_.get(), frame);
    held_t_ = t;
    ++held_id_;
    return absl::OkStatus();
  }

  // The stream has ended: the times left show its last frame.
  absl::Status Finish() {
    while (!done()) {
      if (absl::Status s = Write(held_.get(), held_t_); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Write(AVFrame* frame, double t) {
    uint8_t* dst = out_ + next_ * frame_bytes_;
    // The frame written last time, again (a clip sampled faster than the video's rate).
    const uint64_t id = frame == held_.get() ? held_id_ : 0;
    if (next_ > 0 && id != 0 && id == written_id_) {
      std::memcpy(dst, dst - frame_bytes_, frame_bytes_);
    } else if (absl::Status s = ToRgb(*frame, dst, rows_); !s.ok()) {
      return s;
    }
    written_id_ = id;
    if (shown_ != nullptr) shown_->push_back(t);
    ++next_;
    return absl::OkStatus();
  }

  std::vector<double> times_;
  uint8_t* out_;
  size_t frame_bytes_;
  Buffer* rows_;
  std::vector<double>* shown_;
  size_t next_ = 0;  // the first time not yet resolved
  FramePtr held_;    // the last frame decoded
  double held_t_ = 0;
  uint64_t held_id_ = 0, written_id_ = 0;
};

// A decoder for `st`, on the calling thread only.
absl::StatusOr<CodecPtr> OpenCodec(const AVStream& st) {
  const AVCodec* codec = avcodec_find_decoder(st.codecpar->codec_id);
  if (codec == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("video: no decoder for the codec %s",
                                                      avcodec_get_name(st.codecpar->codec_id)));
  }
  CodecPtr c(avcodec_alloc_context3(codec));
  if (c == nullptr) return absl::ResourceExhaustedError("video: out of memory");
  if (avcodec_parameters_to_context(c.get(), st.codecpar) < 0) {
    return absl::InvalidArgumentError("video: the stream's codec parameters are invalid");
  }
  c->thread_count = 1;
  c->pkt_timebase = st.time_base;
  if (const int r = avcodec_open2(c.get(), codec, nullptr); r < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("video: the %s decoder does not open (%s)",
                                                      codec->name, video::AvError(r)));
  }
  return c;
}

// Seeking to this decodes from the stream's start.
constexpr int64_t kFromStart = AV_NOPTS_VALUE;

}  // namespace

struct VideoReader::State {
  video::Demuxer demuxer;
  VideoInfo info;
  VideoLimits limits;
  const AVStream* stream = nullptr;
  int64_t origin = 0;  // the stream's first timestamp
  double seconds_per_tick = 0;
  int64_t decoded = 0;    // frames decoded for the clip so far
  bool read_any = false;  // whether packets were read since the header

  double Time(int64_t pts) const { return static_cast<double>(pts - origin) * seconds_per_tick; }
  // Positions the demuxer at the keyframe at or before `target` (kFromStart:
  // the start); sets *seeked when it went anywhere but the start.
  absl::Status Seek(int64_t target, bool* seeked);
  // Reads the stream's packets from where the demuxer stands to the first
  // that shows after `last` seconds (or the end); *key_dts: the first's dts.
  absl::Status ReadAhead(double last, std::vector<PacketPtr>* packets, int64_t* key_dts);
  // Which of `packets` hold a frame some time of `times` shows; empty where
  // that cannot be told (a packet without a timestamp).
  std::vector<bool> Shown(const std::vector<PacketPtr>& packets,
                          const std::vector<double>& times) const;
  // Decodes from `target` into `picker`: false when the keyframe found
  // shows after the clip's first time (*key_dts: its packet's dts).
  absl::StatusOr<bool> DecodeFrom(int64_t target, FramePicker& picker, int64_t* key_dts);
  // Takes the frames the decoder has ready; false as DecodeFrom.
  absl::StatusOr<bool> Receive(AVCodecContext* codec, AVFrame* frame, FramePicker& picker,
                               bool check_first);
};

VideoReader::VideoReader(std::unique_ptr<State> state, const VideoInfo& info,
                         const VideoLimits& limits)
    : state_(std::move(state)), info_(info), limits_(limits) {}

VideoReader::~VideoReader() = default;

absl::StatusOr<std::unique_ptr<VideoReader>> VideoReader::Open(const uint8_t* bytes, size_t size,
                                                               const VideoLimits& limits) {
  video::QuietAvLog();
  auto state = std::make_unique<State>();
  if (absl::Status s = state->demuxer.Open(bytes, size); !s.ok()) return s;
  auto info = video::ReadVideoInfo(*state->demuxer.format(), limits);
  if (!info.ok()) return info.status();
  state->info = *info;
  state->limits = limits;
  state->stream = state->demuxer.format()->streams[info->video_stream];
  const AVStream& st = *state->stream;
  if (st.time_base.num <= 0 || st.time_base.den <= 0) {
    return absl::InvalidArgumentError("video: the stream has no time base");
  }
  state->origin = st.start_time != AV_NOPTS_VALUE ? st.start_time : 0;
  state->seconds_per_tick = av_q2d(st.time_base);
  return std::unique_ptr<VideoReader>(new VideoReader(std::move(state), *info, limits));
}

absl::Status VideoReader::State::Seek(int64_t target, bool* seeked) {
  AVFormatContext* f = demuxer.format();
  *seeked = false;
  if (target != kFromStart && target > origin) {
    if (av_seek_frame(f, stream->index, target, AVSEEK_FLAG_BACKWARD) >= 0) {
      *seeked = true;
      return absl::OkStatus();
    }
  }
  if (!read_any) return absl::OkStatus();  // still at the start
  if (av_seek_frame(f, stream->index, origin, AVSEEK_FLAG_BACKWARD) < 0 &&
      av_seek_frame(f, -1, 0, AVSEEK_FLAG_BYTE) < 0) {
    return absl::DataLossError("video: the container does not seek back to its start");
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> VideoReader::State::Receive(AVCodecContext* codec, AVFrame* frame,
                                                 FramePicker& picker, bool check_first) {
  for (bool first = check_first;; first = false) {
    const int r = avcodec_receive_frame(codec, frame);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return true;
    if (r < 0) {
      return absl::DataLossError(
          absl::StrFormat("video: a frame does not decode (%s)", video::AvError(r)));
    }
    if (++decoded > limits.max_frames) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("video: the clip needs more than %d frames decoded (--max-video-frames)",
                          limits.max_frames));
    }
    if (frame->width != info.width || frame->height != info.height) {
      return absl::DataLossError(
          absl::StrFormat("video: a frame of %dx%d in a stream of %dx%d frames", frame->width,
                          frame->height, info.width, info.height));
    }
    if (frame->best_effort_timestamp == AV_NOPTS_VALUE) {
      return absl::DataLossError("video: a frame has no timestamp");
    }
    const double t = Time(frame->best_effort_timestamp);
    if (first && t > picker.first_time() + kTimeSlack) return false;
    if (absl::Status s = picker.Offer(frame, t); !s.ok()) return s;
    if (picker.done()) return true;
  }
}

absl::Status VideoReader::State::ReadAhead(double last, std::vector<PacketPtr>* packets,
                                           int64_t* key_dts) {
  // Packets come in decode order: once one decodes (dts) after the clip's
  // last time, every later one shows after it; without a dts, a packet
  // shown after it may still be followed by earlier frames (B-frames), as
  // many as a codec reorders.
  constexpr int kReorder = 16;
  int after = 0;
  *key_dts = AV_NOPTS_VALUE;
  while (after < kReorder) {
    PacketPtr packet(av_packet_alloc());
    if (packet == nullptr) return absl::ResourceExhaustedError("video: out of memory");
    const int r = av_read_frame(demuxer.format(), packet.get());
    read_any = true;
    if (r == AVERROR_EOF) return absl::OkStatus();
    if (r < 0) {
      return absl::DataLossError(
          absl::StrFormat("video: the container does not read (%s)", video::AvError(r)));
    }
    if (packet->stream_index != stream->index) continue;
    if (*key_dts == AV_NOPTS_VALUE) *key_dts = packet->dts;
    if (packet->dts != AV_NOPTS_VALUE && Time(packet->dts) > last + kTimeSlack) after = kReorder;
    if (packet->pts != AV_NOPTS_VALUE && Time(packet->pts) > last + kTimeSlack) ++after;
    packets->push_back(std::move(packet));
    if (static_cast<int64_t>(packets->size()) > limits.max_frames + kReorder) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("video: the clip needs more than %d frames decoded (--max-video-frames)",
                          limits.max_frames));
    }
  }
  return absl::OkStatus();
}

std::vector<bool> VideoReader::State::Shown(const std::vector<PacketPtr>& packets,
                                            const std::vector<double>& times) const {
  for (const PacketPtr& p : packets) {
    if (p->pts == AV_NOPTS_VALUE) return {};  // no telling: every packet decodes
  }
  std::vector<bool> shown(packets.size(), false);
  for (double t : times) {
    // The latest frame at or before t; the earliest where none is.
    int best = -1, first = -1;
    for (size_t i = 0; i < packets.size(); ++i) {
      const int64_t pts = packets[i]->pts;
      if (first < 0 || pts < packets[first]->pts) first = static_cast<int>(i);
      if (Time(pts) <= t + kTimeSlack && (best < 0 || pts > packets[best]->pts)) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0 || first >= 0) shown[best >= 0 ? best : first] = true;
  }
  return shown;
}

absl::StatusOr<bool> VideoReader::State::DecodeFrom(int64_t target, FramePicker& picker,
                                                    int64_t* key_dts) {
  bool seeked = false;
  if (absl::Status s = Seek(target, &seeked); !s.ok()) return s;
  auto codec = OpenCodec(*stream);
  if (!codec.ok()) return codec.status();
  FramePtr frame(av_frame_alloc());
  if (frame == nullptr) return absl::ResourceExhaustedError("video: out of memory");
  std::vector<PacketPtr> packets;
  if (absl::Status s = ReadAhead(picker.times().back(), &packets, key_dts); !s.ok()) return s;
  // Frames no time of the clip shows need not be decoded, where nothing
  // refers to them: the decoder skips those (non-reference frames), and the
  // frames shown are the same bytes.
  const std::vector<bool> shown = Shown(packets, picker.times());
  bool check_first = seeked;
  for (size_t i = 0; i < packets.size() && !picker.done(); ++i) {
    (*codec)->skip_frame = shown.empty() || shown[i] ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
    const int sent = avcodec_send_packet(codec->get(), packets[i].get());
    if (sent < 0) {
      return absl::DataLossError(
          absl::StrFormat("video: a packet does not decode (%s)", video::AvError(sent)));
    }
    auto more = Receive(codec->get(), frame.get(), picker, check_first);
    if (!more.ok() || !*more) return more;
    check_first = check_first && picker.empty();
  }
  if (picker.done()) return true;
  avcodec_send_packet(codec->get(), nullptr);  // the frames the decoder still holds
  auto more = Receive(codec->get(), frame.get(), picker, check_first);
  if (!more.ok() || !*more) return more;
  if (picker.empty()) return absl::DataLossError("video: no frame of the stream decodes");
  if (absl::Status s = picker.Finish(); !s.ok()) return s;
  return true;
}

absl::Status VideoReader::DecodeClip(const ClipTimes& clip, uint8_t* out,
                                     std::vector<double>* shown, Buffer* rows) {
  const double end = clip.start + clip.step * clip.frames;
  if (clip.frames <= 0 || !(clip.start >= 0) || !(clip.step >= 0) || !std::isfinite(end)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "video: no clip: %d frames from %g s every %g s", clip.frames, clip.start, clip.step));
  }
  if (clip.frames > limits_.max_frames) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("video: a clip of %d frames is over the limit of %d (--max-video-frames)",
                        clip.frames, limits_.max_frames));
  }
  std::vector<double> times(clip.frames);
  for (int i = 0; i < clip.frames; ++i) times[i] = clip.start + clip.step * i;
  State& s = *state_;
  s.decoded = 0;
  Buffer own_rows;
  // Past the end the seek finds the last keyframe; the bound keeps the tick count in range.
  const double ticks = std::min(clip.start, info_.seconds + 1) / s.seconds_per_tick;
  int64_t target =
      clip.start > 0 && ticks < 4e18 ? s.origin + static_cast<int64_t>(ticks) : kFromStart;
  for (;;) {
    if (shown != nullptr) shown->clear();
    FramePicker picker(times, out, frame_bytes(), rows != nullptr ? rows : &own_rows, shown);
    int64_t key_dts = AV_NOPTS_VALUE;
    auto done = s.DecodeFrom(target, picker, &key_dts);
    if (!done.ok() || *done) return done.status();
    // The keyframe found shows after the clip's start (its dts is before
    // its pts, as with B-frames): the keyframe before it.
    target = key_dts != AV_NOPTS_VALUE && key_dts - 1 > s.origin ? key_dts - 1 : kFromStart;
  }
}

}  // namespace prepflow
