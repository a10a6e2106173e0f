#include "pipeline/data/synthetic.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "pipeline/core/rng.h"

namespace prepflow {

std::vector<uint8_t> SyntheticImage(int width, int height, uint64_t seed, int hue,
                                    SyntheticFormat format, int quality) {
  SampleRng rng(seed, 0, static_cast<uint64_t>(width) << 32 | static_cast<uint32_t>(height), 0);
  cv::Mat hsv(height, width, CV_8UC3);
  // Sky-to-ground style gradient with a drifting hue.
  const double tilt = rng.Uniform(-0.5, 0.5);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double t = (y + tilt * x) / static_cast<double>(height + width);
      hsv.at<cv::Vec3b>(y, x) =
          cv::Vec3b(static_cast<uint8_t>((hue + static_cast<int>(40 * t)) % 180),
                    static_cast<uint8_t>(80 + 120 * t), static_cast<uint8_t>(200 - 110 * t));
    }
  }
  cv::Mat bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  // Soft shapes: trees, rocks, clouds.
  const int shapes = 6 + static_cast<int>(rng.UniformInt(0, 10));
  for (int i = 0; i < shapes; ++i) {
    const cv::Point c(static_cast<int>(rng.UniformInt(0, width - 1)),
                      static_cast<int>(rng.UniformInt(0, height - 1)));
    const cv::Size axes(1 + static_cast<int>(rng.UniformInt(0, width / 4)),
                        1 + static_cast<int>(rng.UniformInt(0, height / 4)));
    const cv::Scalar color(rng.UniformInt(0, 255), rng.UniformInt(0, 255), rng.UniformInt(0, 255));
    cv::ellipse(bgr, c, axes, rng.Uniform(0, 180), 0, 360, color, cv::FILLED, cv::LINE_AA);
  }
  cv::GaussianBlur(bgr, bgr, cv::Size(0, 0), 1.0 + rng.Uniform(0, 2));
  // Fine texture and sensor noise: what makes real JPEGs large.
  cv::Mat noise(height, width, CV_16SC3);
  cv::RNG cvrng(rng.NextU64());
  cvrng.fill(noise, cv::RNG::NORMAL, cv::Scalar::all(0), cv::Scalar::all(10));
  cv::Mat img16;
  bgr.convertTo(img16, CV_16SC3);
  img16 += noise;
  img16.convertTo(bgr, CV_8UC3);

  std::vector<int> params = {cv::IMWRITE_JPEG_QUALITY, quality};
  std::string ext = ".jpg";
  cv::Mat out = bgr;
  switch (format) {
    case SyntheticFormat::kJpeg:
      break;
    case SyntheticFormat::kProgressiveJpeg:
      params.insert(params.end(), {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
      break;
    case SyntheticFormat::kGrayJpeg:
      cv::cvtColor(bgr, out, cv::COLOR_BGR2GRAY);
      break;
    case SyntheticFormat::kPng:
      ext = ".png";
      params = {cv::IMWRITE_PNG_COMPRESSION, 1};
      break;
  }
  std::vector<uint8_t> encoded;
  cv::imencode(ext, out, encoded, params);
  return encoded;
}

absl::StatusOr<int64_t> WriteSyntheticImageFolder(const std::string& dir,
                                                  const SyntheticFolderOptions& options) {
  auto make_dir = [](const std::string& path) -> absl::Status {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", ec.message()));
    return absl::OkStatus();
  };
  if (absl::Status s = make_dir(dir); !s.ok()) return s;
  SampleRng rng(options.seed, 0, 0, 1);
  int64_t n = 0;
  for (int c = 0; c < options.classes; ++c) {
    const std::string class_dir = absl::StrFormat("%s/class%03d", dir, c);
    if (absl::Status s = make_dir(class_dir); !s.ok()) return s;
    const int hue = (c * 47) % 180;
    for (int i = 0; i < options.images_per_class; ++i, ++n) {
      const int long_side = static_cast<int>(rng.UniformInt(options.min_side, options.max_side));
      const int short_side = static_cast<int>(long_side * rng.Uniform(0.6, 1.0));
      const bool landscape = rng.Uniform() < 0.7;
      const int w = landscape ? long_side : short_side;
      const int h = landscape ? short_side : long_side;
      SyntheticFormat format = SyntheticFormat::kJpeg;
      if (options.mixed_formats) {
        if (n % 13 == 12) {
          format = SyntheticFormat::kPng;
        } else if (n % 11 == 10) {
          format = SyntheticFormat::kGrayJpeg;
        } else if (n % 8 == 7) {
          format = SyntheticFormat::kProgressiveJpeg;
        }
      }
      const int quality = 75 + static_cast<int>(rng.UniformInt(0, 20));
      const std::vector<uint8_t> bytes =
          SyntheticImage(w, h, options.seed * 1000003 + n, hue, format, quality);
      const bool png_name = format == SyntheticFormat::kPng && !options.png_as_jpg;
      const std::string path =
          absl::StrFormat("%s/img%06d.%s", class_dir, n, png_name ? "png" : "jpg");
      std::FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
          std::fclose(f) != 0) {
        return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
      }
    }
  }
  return n;
}

}  // namespace prepflow
