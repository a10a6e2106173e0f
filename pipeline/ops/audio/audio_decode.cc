#include "pipeline/ops/audio/audio_decode.h"

#include <sndfile.h>
#include <vorbis/vorbisfile.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"

namespace prepflow {
namespace {

// libsndfile's virtual I/O over bytes in memory: `size` of them, of a file
// `length` long (-1: size; more when only its first bytes are here, and
// reads past them find nothing).
struct MemoryFile {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos;
  sf_count_t length = -1;
  bool missed = false;  // a read wanted bytes of the file that are not here
};

sf_count_t Length(void* user) {
  const auto* f = static_cast<MemoryFile*>(user);
  return f->length >= 0 ? f->length : f->size;
}

sf_count_t Seek(sf_count_t offset, int whence, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  const sf_count_t end = Length(user);
  sf_count_t base = whence == SEEK_CUR ? f->pos : whence == SEEK_END ? end : 0;
  // Saturating: a crafted offset must not overflow.
  const sf_count_t to = offset > 0 && base > SF_COUNT_MAX - offset ? end : base + offset;
  f->pos = std::clamp<sf_count_t>(to, 0, end);
  return f->pos;
}

sf_count_t Read(void* ptr, sf_count_t count, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  const sf_count_t n = std::clamp<sf_count_t>(count, 0, std::max<sf_count_t>(f->size - f->pos, 0));
  if (n < count && f->pos + n < Length(user)) f->missed = true;
  // Empty input may come with no data at all (AudioSeconds of 0 bytes).
  if (n > 0) std::memcpy(ptr, f->data + f->pos, static_cast<size_t>(n));
  f->pos += n;
  return n;
}

sf_count_t Write(const void*, sf_count_t, void*) { return 0; }
sf_count_t Tell(void* user) { return static_cast<MemoryFile*>(user)->pos; }

// libvorbisfile's callbacks over the same memory.
size_t OvRead(void* ptr, size_t size, size_t n, void* user) {
  return static_cast<size_t>(Read(ptr, static_cast<sf_count_t>(size * n), user)) /
         std::max<size_t>(size, 1);
}
int OvSeek(void* user, ogg_int64_t offset, int whence) {
  Seek(offset, whence, user);
  return 0;
}
long OvTell(void* user) { return static_cast<long>(Tell(user)); }

// Whether `bytes` are an Ogg stream that is not Ogg Opus: libsndfile takes
// any Ogg stream it does not recognise for Vorbis (and leaks on it, below),
// so these all go to libvorbisfile, which refuses what is not Vorbis.
bool IsOggNotOpus(const uint8_t* bytes, size_t size) {
  return size >= 4 && std::memcmp(bytes, "OggS", 4) == 0 &&
         !(size >= 36 && std::memcmp(bytes + 28, "OpusHead", 8) == 0);
}

struct CloseFile {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using File = std::unique_ptr<SNDFILE, CloseFile>;

absl::Status CheckHeader(const SF_INFO& info, const DecodeOptions& options, int64_t* max_frames) {
  if (info.channels < 1 || info.channels > options.max_audio_channels) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("audio: %d channels, outside 1 to %d (--max-audio-channels)", info.channels,
                        options.max_audio_channels));
  }
  if (info.samplerate < 1 || info.samplerate > kMaxAudioRate) {
    return absl::InvalidArgumentError(absl::StrFormat("audio: sample rate %d Hz, outside 1 to %d",
                                                      info.samplerate, kMaxAudioRate));
  }
  *max_frames = static_cast<int64_t>(options.max_audio_seconds * info.samplerate);
  // libsndfile gives SF_COUNT_MAX where a format does not say.
  if (info.frames != SF_COUNT_MAX && info.frames > *max_frames) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "audio: the header claims %.1f s (%d frames at %d Hz), over the limit of %g s "
        "(--max-audio-seconds)",
        static_cast<double>(info.frames) / info.samplerate, info.frames, info.samplerate,
        options.max_audio_seconds));
  }
  return absl::OkStatus();
}

// Reads every frame, interleaved, into `buf` (grown as needed, to at most
// max_frames + 1 frames); returns the frame count or an error.
absl::Status ReadFrames(SNDFILE* f, const SF_INFO& info, int64_t max_frames, Buffer* buf,
                        int64_t* frames) {
  const size_t frame_bytes = sizeof(float) * info.channels;
  int64_t capacity =
      std::min<int64_t>(info.frames == SF_COUNT_MAX ? 65536 : info.frames + 1, max_frames + 1);
  capacity = std::max<int64_t>(capacity, 1);
  float* data = reinterpret_cast<float*>(buf->Reserve(capacity * frame_bytes));
  int64_t total = 0;
  while (true) {
    const sf_count_t got = sf_readf_float(f, data + total * info.channels, capacity - total);
    total += std::max<sf_count_t>(got, 0);
    if (total > max_frames) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "audio: longer than the limit of %g s (--max-audio-seconds), whatever its header "
          "says",
          static_cast<double>(max_frames) / info.samplerate));
    }
    if (got <= 0 || total < capacity) break;
    // Full (a format that does not say its length): grow, keeping what was
    // read, since Reserve does not; `buf` stays the workspace's (metered).
    const std::vector<float> kept(data, data + total * info.channels);
    capacity = std::min<int64_t>(capacity * 2, max_frames + 1);
    data = reinterpret_cast<float*>(buf->Reserve(capacity * frame_bytes));
    std::memcpy(data, kept.data(), kept.size() * sizeof(float));
  }
  if (sf_error(f) != SF_ERR_NO_ERROR) {
    return absl::DataLossError(absl::StrCat("audio: ", sf_strerror(f)));
  }
  const bool estimated = (info.format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG;
  if (!estimated && info.frames != SF_COUNT_MAX && total < info.frames) {
    return absl::DataLossError(
        absl::StrFormat("audio: ends after %d of the %d frames its header claims (truncated?)",
                        total, info.frames));
  }
  *frames = total;
  return absl::OkStatus();
}

// The decoded samples as `*audio`, unless one is NaN or infinite.
absl::Status Decoded(bool finite, float* data, int channels, int64_t frames, int rate,
                     DecodedAudio* audio) {
  if (!finite) return absl::InvalidArgumentError("audio: has NaN or infinite samples");
  audio->data = data;
  audio->channels = channels;
  audio->frames = frames;
  audio->sample_rate = rate;
  return absl::OkStatus();
}

// Ogg Vorbis through libvorbisfile, the reference decoder: libsndfile 1.2.0
// leaks the Vorbis setup it allocated (about 6 KB a file) when a stream's
// headers or first packets do not read (tests/fuzz/audio_fuzz.cc found two
// such files), so a hostile dataset could drain a worker's memory file by
// file. The same limits as libsndfile's path; the samples are the floats
// libsndfile gives (both take vorbis_synthesis_pcmout's).
absl::Status DecodeOggVorbis(const uint8_t* bytes, size_t size, const DecodeOptions& options,
                             Buffer* out, DecodedAudio* audio) {
  MemoryFile mem{bytes, static_cast<sf_count_t>(size), 0};
  OggVorbis_File vf;
  const ov_callbacks io{OvRead, OvSeek, nullptr, OvTell};
  if (ov_open_callbacks(&mem, &vf, nullptr, 0, io) != 0) {
    return absl::InvalidArgumentError("audio: an Ogg Vorbis file whose headers do not read");
  }
  struct Clear {
    OggVorbis_File* vf;
    ~Clear() { ov_clear(vf); }
  } clear{&vf};
  const vorbis_info* vi = ov_info(&vf, -1);
  const ogg_int64_t total = ov_pcm_total(&vf, -1);
  if (vi == nullptr || total < 0) {
    return absl::InvalidArgumentError("audio: an Ogg Vorbis file whose length does not read");
  }
  SF_INFO info{};
  info.frames = total;
  info.channels = vi->channels;
  info.samplerate = static_cast<int>(std::min<long>(vi->rate, INT_MAX));
  int64_t max_frames = 0;
  if (absl::Status s = CheckHeader(info, options, &max_frames); !s.ok()) return s;
  const int channels = info.channels;
  auto* dst = reinterpret_cast<float*>(out->Reserve(sizeof(float) * channels * total + 1));
  int64_t got = 0;
  bool finite = true;
  int section = 0;
  while (true) {
    float** pcm = nullptr;
    const long n = ov_read_float(&vf, &pcm, 4096, &section);
    if (n == 0) break;
    const vorbis_info* now = ov_info(&vf, section);
    if (n < 0 || now == nullptr || now->channels != channels || got + n > total) {
      return absl::DataLossError(
          absl::StrFormat("audio: an Ogg Vorbis stream that breaks after %d frames (%s)", got,
                          n < 0 ? "a damaged packet" : "its sections disagree with its header"));
    }
    for (int c = 0; c < channels; ++c) {
      for (long t = 0; t < n; ++t) finite &= std::isfinite(pcm[c][t]);
      std::memcpy(dst + c * total + got, pcm[c], sizeof(float) * n);
    }
    got += n;
  }
  if (got < total) {
    return absl::DataLossError(absl::StrFormat(
        "audio: ends after %d of the %d frames its header claims (truncated?)", got, total));
  }
  return Decoded(finite, dst, channels, total, info.samplerate, audio);
}

// libsndfile on `mem`, its header in `*info`; InvalidArgument when it
// cannot read it.
absl::StatusOr<File> OpenSndfile(MemoryFile* mem, SF_INFO* info) {
  SF_VIRTUAL_IO io{Length, Seek, Read, Write, Tell};
  *info = SF_INFO{};
  File f(sf_open_virtual(&io, SFM_READ, info, mem));
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("audio: libsndfile cannot read it: ", sf_strerror(nullptr)));
  }
  return f;
}

}  // namespace

absl::Status DecodeAudio(const uint8_t* bytes, size_t size, const DecodeOptions& options,
                         Buffer* out, Buffer* scratch, DecodedAudio* audio) {
  if (IsOggNotOpus(bytes, size)) return DecodeOggVorbis(bytes, size, options, out, audio);
  MemoryFile mem{bytes, static_cast<sf_count_t>(size), 0};
  SF_INFO info;
  absl::StatusOr<File> opened = OpenSndfile(&mem, &info);
  if (!opened.ok()) return opened.status();
  File f = *std::move(opened);
  int64_t max_frames = 0;
  if (absl::Status s = CheckHeader(info, options, &max_frames); !s.ok()) return s;
  sf_command(f.get(), SFC_SET_NORM_FLOAT, nullptr, SF_TRUE);
  int64_t frames = 0;
  if (absl::Status s = ReadFrames(f.get(), info, max_frames, scratch, &frames); !s.ok()) return s;
  // Interleaved to channels first, checking every sample is finite.
  const int channels = info.channels;
  const auto* in = reinterpret_cast<const float*>(scratch->data());
  auto* dst = reinterpret_cast<float*>(out->Reserve(sizeof(float) * channels * frames + 1));
  bool finite = true;
  for (int c = 0; c < channels; ++c) {
    float* row = dst + static_cast<size_t>(c) * frames;
    for (int64_t t = 0; t < frames; ++t) {
      const float v = in[t * channels + c];
      finite &= std::isfinite(v);
      row[t] = v;
    }
  }
  return Decoded(finite, dst, channels, frames, info.samplerate, audio);
}

bool HeaderHoldsLength(const uint8_t* bytes, size_t size) {
  if (size < 4) return false;
  for (const char* magic : {"RIFF", "RF64", "FORM", "fLaC"}) {
    if (std::memcmp(bytes, magic, 4) == 0) return true;
  }
  return false;
}

absl::StatusOr<double> AudioSeconds(const uint8_t* bytes, size_t size, uint64_t whole) {
  MemoryFile mem{bytes, static_cast<sf_count_t>(size), 0};
  if (whole > size) {
    if (!HeaderHoldsLength(bytes, size) || whole > static_cast<uint64_t>(SF_COUNT_MAX)) {
      return absl::FailedPreconditionError("audio: its length needs the whole file");
    }
    mem.length = static_cast<sf_count_t>(whole);
  }
  if (IsOggNotOpus(bytes, size)) {
    OggVorbis_File vf;
    const ov_callbacks io{OvRead, OvSeek, nullptr, OvTell};
    if (ov_open_callbacks(&mem, &vf, nullptr, 0, io) != 0) {
      return absl::InvalidArgumentError("audio: an Ogg Vorbis file whose headers do not read");
    }
    const vorbis_info* vi = ov_info(&vf, -1);
    const ogg_int64_t total = ov_pcm_total(&vf, -1);
    const double rate = vi != nullptr ? static_cast<double>(vi->rate) : 0;
    ov_clear(&vf);
    if (total < 0 || rate <= 0) {
      return absl::InvalidArgumentError("audio: an Ogg Vorbis file whose length does not read");
    }
    return static_cast<double>(total) / rate;
  }
  SF_INFO info;
  absl::StatusOr<File> f = OpenSndfile(&mem, &info);
  if (mem.missed) {  // what it read past the first bytes was not there: no answer
    return absl::FailedPreconditionError("audio: its header runs past the bytes read");
  }
  if (!f.ok()) return f.status();
  if (info.samplerate <= 0 || info.frames < 0 || info.frames == SF_COUNT_MAX) {
    return absl::InvalidArgumentError("audio: its header declares no length");
  }
  return static_cast<double>(info.frames) / info.samplerate;
}

}  // namespace prepflow
