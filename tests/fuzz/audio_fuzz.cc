// Fuzz target: arbitrary bytes as a sample's encoded audio file, through
// decode_audio (libsndfile's WAV, FLAC, Ogg and MP3 parsers behind our
// limits), downmix, resample and fix_length. Whatever the bytes, the result
// is OK or an error Status; never a crash, a hang, or memory read out of
// bounds, and never more than the limits allow allocated.
#include <sndfile.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "google/protobuf/text_format.h"
#include "pipeline/core/sample.h"
#include "pipeline/ops/audio/audio_decode.h"
#include "pipeline/pipeline.h"
#include "tests/fuzz/fuzz_seeds.h"

namespace {

// A short stereo chirp encoded as `format`, read back from a file.
std::string Encoded(const std::string& path, int format, int rate) {
  SF_INFO info{};
  info.channels = 2;
  info.samplerate = rate;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (f == nullptr) std::abort();
  std::vector<float> x(2 * 2000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(0.5 * std::sin(0.01 * i * i));
  sf_writef_float(f, x.data(), 2000);
  sf_close(f);
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

// Seeds: 16-bit and float WAV, FLAC, Ogg Vorbis, and a FLAC cut short.
void WriteSeeds(const std::string& dir) {
  const std::string tmp = dir + "/.gen";
  const struct {
    const char* name;
    int format;
    int rate;
  } kinds[] = {{"wav16", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 8000},
               {"wavfloat", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050},
               {"flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000},
               {"ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 44100}};
  for (const auto& k : kinds) {
    const std::string bytes = Encoded(tmp, k.format, k.rate);
    prepflow::fuzz::WriteSeed(dir, k.name, bytes);
    if (k.format == (SF_FORMAT_FLAC | SF_FORMAT_PCM_16)) {
      prepflow::fuzz::WriteSeed(dir, "flac-truncated", bytes.substr(0, bytes.size() / 2));
    }
  }
  std::filesystem::remove(tmp);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const prepflow::Pipeline* pipeline = [] {
    prepflow::proto::PipelineSpec spec;
    if (!google::protobuf::TextFormat::ParseFromString(
            "stages { decode_audio {} } stages { downmix {} } "
            "stages { resample { rate: 16000 } } stages { fix_length { frames: 4000 } }",
            &spec)) {
      std::abort();
    }
    prepflow::PipelineOptions options;
    options.decode.max_audio_seconds = 5;  // keep each input fast
    auto p = prepflow::Pipeline::Create(spec, options);
    if (!p.ok()) std::abort();
    return p->release();
  }();
  prepflow::fuzz::RunOnBytes(*pipeline, data, size);
  // What batching by length reads of every file at a loader's start.
  (void)prepflow::AudioSeconds(data, size);
  return 0;
}
