#include "tests/testing/test_util.h"

// clang-format off
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <jpeglib.h>
// clang-format on
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "pipeline/core/wire.h"
#include "pipeline/data/synthetic.h"

namespace prepflow::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/prepflow-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> Jpeg(int width, int height, uint64_t seed, int quality) {
  return SyntheticImage(width, height, seed, static_cast<int>(seed * 37 % 180),
                        SyntheticFormat::kJpeg, quality);
}

namespace {

// A JPEG from libjpeg directly: `configure` sets what jpeg_set_defaults
// leaves (colour space, quality, a scan script), `fill` writes row y.
std::vector<uint8_t> CompressJpeg(int width, int height, int components, J_COLOR_SPACE space,
                                  const std::function<void(jpeg_compress_struct*)>& configure,
                                  const std::function<void(int y, uint8_t* row)>& fill) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = space;
  jpeg_set_defaults(&cinfo);
  configure(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(width) * components);
  while (cinfo.next_scanline < cinfo.image_height) {
    fill(static_cast<int>(cinfo.next_scanline), row.data());
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> bytes(out, out + size);
  free(out);
  return bytes;
}

}  // namespace

std::vector<uint8_t> CmykJpeg(int width, int height, uint8_t c, uint8_t m, uint8_t y, uint8_t k) {
  return CompressJpeg(
      width, height, 4, JCS_CMYK,
      [](jpeg_compress_struct* cinfo) {
        jpeg_set_colorspace(cinfo, JCS_YCCK);  // writes an Adobe marker
        jpeg_set_quality(cinfo, 95, TRUE);
      },
      [&](int, uint8_t* row) {
        for (int x = 0; x < width; ++x) {
          row[4 * x] = c;
          row[4 * x + 1] = m;
          row[4 * x + 2] = y;
          row[4 * x + 3] = k;
        }
      });
}

std::vector<uint8_t> ManyScanJpeg(int width, int height) {
  // DC, then each of the 63 AC coefficients in a band of its own, each sent
  // in three passes of successive approximation (Al 2, then refined to 1, 0).
  std::vector<jpeg_scan_info> script;
  for (int k = 0; k <= 63; ++k) {
    for (int al = 2; al >= 0; --al) {
      script.push_back({1, {0, 0, 0, 0}, k, k, al == 2 ? 0 : al + 1, al});
    }
  }
  return CompressJpeg(
      width, height, 1, JCS_GRAYSCALE,
      [&](jpeg_compress_struct* cinfo) {
        cinfo->scan_info = script.data();
        cinfo->num_scans = static_cast<int>(script.size());
      },
      [&](int y, uint8_t* row) {
        for (int x = 0; x < width; ++x) row[x] = static_cast<uint8_t>((x * 7 + y * 3) & 0xFF);
      });
}

std::vector<uint8_t> SolidPng(int width, int height, int channels, int depth, uint8_t r, uint8_t g,
                              uint8_t b) {
  const int type = CV_MAKETYPE(depth == 16 ? CV_16U : CV_8U, channels);
  const double scale = depth == 16 ? 257.0 : 1.0;
  cv::Scalar bgra(b * scale, g * scale, r * scale, 255 * scale);
  if (channels == 1) bgra = cv::Scalar(r * scale);
  cv::Mat img(height, width, type, bgra);
  std::vector<uint8_t> bytes;
  cv::imencode(".png", img, bytes);
  return bytes;
}

Output RunPipeline(const Pipeline& pipeline, const std::vector<uint8_t>& bytes, int64_t index,
                   uint64_t epoch, int end) {
  Workspace ws;
  Sample s;
  s.index = index;
  s.epoch = epoch;
  uint8_t* p = ws.encoded.Reserve(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), p);
  s.data = p;
  s.size = bytes.size();
  s.shape = {static_cast<int64_t>(bytes.size())};
  Output out;
  out.status = pipeline.Run(0, end < 0 ? pipeline.num_stages() : end, s, ws);
  if (out.status.ok()) {
    out.bytes.assign(s.data, s.data + s.size);
    out.shape = s.shape;
    out.kind = s.kind;
    out.view = s.view;
  }
  return out;
}

absl::Status CreateAfterDecode(const std::string& stage) {
  proto::PipelineSpec spec;
  const std::string text = absl::StrCat("stages { decode {} } stages { ", stage, " }");
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec)) << text;
  return Pipeline::Create(spec, PipelineOptions()).status();
}

void ExpectSpecErrors(std::initializer_list<SpecError> cases) {
  for (const SpecError& c : cases) {
    const std::string message(CreateAfterDecode(c.stage).message());
    EXPECT_NE(message.find(c.message), std::string::npos)
        << c.stage << "\n  says: " << message << "\n  wanted: " << c.message;
  }
}

std::unique_ptr<Pipeline> MakePipeline(const std::string& text, uint64_t seed,
                                       DecodeOptions decode) {
  proto::PipelineSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec)) << text;
  PipelineOptions options;
  options.seed = seed;
  options.decode = decode;
  auto p = Pipeline::Create(spec, options);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

std::vector<uint8_t> TarHeader(const std::string& name, const std::vector<uint8_t>& size_field) {
  std::vector<uint8_t> h(512, 0);
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(h.data() + 100, "0000644", 7);
  std::memcpy(h.data() + 124, size_field.data(), std::min<size_t>(size_field.size(), 12));
  h[156] = '0';
  std::memcpy(h.data() + 257, "ustar", 6);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t c : h) sum += c;
  std::snprintf(reinterpret_cast<char*>(h.data()) + 148, 8, "%06o", sum);
  return h;
}

std::vector<uint8_t> TarWithWrappingMember(const std::vector<uint8_t>& jpeg) {
  auto octal = [](size_t n) {
    char text[13];
    std::snprintf(text, sizeof(text), "%011zo", n);
    return std::vector<uint8_t>(text, text + 12);
  };
  auto pad = [](std::vector<uint8_t>* v) { v->resize((v->size() + 511) / 512 * 512, 0); };
  std::vector<uint8_t> tar = TarHeader("000.jpg", octal(jpeg.size()));
  tar.insert(tar.end(), jpeg.begin(), jpeg.end());
  pad(&tar);
  const std::vector<uint8_t> cls = TarHeader("000.cls", octal(1));
  tar.insert(tar.end(), cls.begin(), cls.end());
  tar.push_back('1');
  pad(&tar);
  const std::vector<uint8_t> wrap =
      TarHeader("001.jpg", {0x80, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, 0x00});
  tar.insert(tar.end(), wrap.begin(), wrap.end());
  tar.resize(tar.size() + 1024, 0);
  return tar;
}

void ExpectEveryCutSame(const Pipeline& p, const std::vector<uint8_t>& bytes,
                        const std::vector<int64_t>& shape) {
  const int n = p.num_stages();
  auto reference = RunPipeline(p, bytes, 3, 1);
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  ASSERT_EQ(std::vector<int64_t>(reference.shape.begin(), reference.shape.end()), shape);
  for (int cut = 1; cut < n; ++cut) {
    Workspace remote, local;
    Sample s;
    s.index = 3;
    s.epoch = 1;
    s.data = remote.encoded.Reserve(bytes.size());
    std::memcpy(s.data, bytes.data(), bytes.size());
    s.size = bytes.size();
    s.shape = {static_cast<int64_t>(bytes.size())};
    ASSERT_TRUE(p.Run(0, cut, s, remote).ok());
    proto::SampleValue value;
    ToWire(s, &value);
    proto::SampleValue received;
    ASSERT_TRUE(received.ParseFromString(value.SerializeAsString()));
    Sample t;
    t.index = 3;
    t.epoch = 1;
    ASSERT_TRUE(FromWire(received, local, t).ok());
    EXPECT_EQ(t.sample_rate, s.sample_rate);
    ASSERT_TRUE(p.Run(cut, n, t, local).ok()) << cut;
    ASSERT_EQ(t.size, reference.bytes.size());
    EXPECT_EQ(0, std::memcmp(t.data, reference.bytes.data(), t.size)) << "cut " << cut;
  }
}

}  // namespace prepflow::testing
