#include "pipeline/core/image_decode.h"

// clang-format off
#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "pipeline/core/working_memory.h"

namespace prepflow {
namespace {

uint32_t ReadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
int32_t ReadLe32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) |
                              (uint32_t{p[3]} << 24));
}

// True when an end-of-image marker follows the last start-of-scan marker.
// Entropy-coded data never contains 0xFF followed by 0xD9 or 0xDA (0xFF is
// stuffed as FF 00), so scanning back from the end for either settles it; a
// complete file finds its EOI within the last few bytes.
bool HasEndOfImage(const uint8_t* data, size_t size) {
  size_t end = size;
  while (end >= 2) {
    const void* ff = memrchr(data, 0xFF, end - 1);
    if (ff == nullptr) return false;
    const size_t i = static_cast<const uint8_t*>(ff) - data;
    if (data[i + 1] == 0xD9) return true;
    if (data[i + 1] == 0xDA) return false;
    end = i + 1;
  }
  return false;
}

bool IsCorruptionWarning(int code) {
  switch (code) {
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_JPEG_EOF:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
      return true;
    default:
      return false;
  }
}

std::string HexPrefix(const uint8_t* data, size_t size) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    absl::StrAppendFormat(&s, "%s%02x", i ? " " : "", data[i]);
  }
  return s;
}

// Records the consumer's planned crop in the view, when it asked for one.
void SetPlannedCrop(const DecodeHint& hint, ImageView* view) {
  if (!hint.carries_crop) return;
  view->has_crop = true;
  view->crop_x = hint.x;
  view->crop_y = hint.y;
  view->crop_width = hint.width;
  view->crop_height = hint.height;
}

// Maps [lo, lo + len) in source pixels to scaled pixels at 1/denom, rounding
// outward so the scaled span covers the source span.
void ScaleSpan(int lo, int len, int denom, int limit, int* slo, int* shi) {
  *slo = lo / denom;
  *shi = std::min(limit, (lo + len + denom - 1) / denom);
}

}  // namespace

ImageFormat SniffImageFormat(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::kJpeg;
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::kPng;
  if (size >= 2 && data[0] == 'B' && data[1] == 'M') return ImageFormat::kBmp;
  // Netpbm: P1-P6 (bitmap, graymap, pixmap; ASCII or binary).
  if (size >= 2 && data[0] == 'P' && data[1] >= '1' && data[1] <= '6') return ImageFormat::kPnm;
  if (size >= 4 && ((data[0] == 'I' && data[1] == 'I' && data[2] == 42 && data[3] == 0) ||
                    (data[0] == 'M' && data[1] == 'M' && data[2] == 0 && data[3] == 42))) {
    return ImageFormat::kTiff;
  }
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebp;
  }
  return ImageFormat::kUnknown;
}

namespace {

const char* FormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kPnm:
      return "PPM/PGM";
    case ImageFormat::kTiff:
      return "TIFF";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kUnknown:
      break;
  }
  return "image";
}

// A Netpbm header's width and height: after the magic, whitespace-separated
// decimal numbers, with '#' comments to the end of the line. Only the first
// 1 KiB is looked at.
absl::Status PnmSize(const uint8_t* data, size_t size, int64_t* w, int64_t* h) {
  const size_t end = std::min<size_t>(size, 1024);
  size_t i = 2;
  int64_t* fields[2] = {w, h};
  for (int64_t* field : fields) {
    while (i < end && (std::isspace(data[i]) || data[i] == '#')) {
      if (data[i] == '#') {
        while (i < end && data[i] != '\n') ++i;
      } else {
        ++i;
      }
    }
    int digits = 0;
    *field = 0;
    while (i < end && std::isdigit(data[i]) && digits < 10) {
      *field = *field * 10 + (data[i++] - '0');
      ++digits;
    }
    if (digits == 0 || (i < end && std::isdigit(data[i]))) {
      return absl::DataLossError("bad or truncated PPM/PGM header");
    }
  }
  return absl::OkStatus();
}

// A TIFF's first image size: ImageWidth (256) and ImageLength (257) in its
// first directory, read with the file's byte order and every offset checked.
absl::Status TiffSize(const uint8_t* data, size_t size, int64_t* w, int64_t* h) {
  const bool le = data[0] == 'I';
  auto u16 = [&](size_t at) -> uint32_t {
    return le ? data[at] | data[at + 1] << 8 : data[at] << 8 | data[at + 1];
  };
  auto u32 = [&](size_t at) -> uint32_t { return le ? ReadLe32(data + at) : ReadBe32(data + at); };
  if (size < 8) return absl::DataLossError("truncated TIFF header");
  const uint64_t ifd = u32(4);
  if (ifd + 2 > size) return absl::DataLossError("TIFF directory offset past the end");
  const uint32_t entries = u16(ifd);
  if (ifd + 2 + uint64_t{entries} * 12 > size) {
    return absl::DataLossError("truncated TIFF directory");
  }
  *w = *h = 0;
  for (uint32_t e = 0; e < entries; ++e) {
    const size_t at = ifd + 2 + e * 12;
    const uint32_t tag = u16(at), type = u16(at + 2);
    if (tag != 256 && tag != 257) continue;
    const int64_t value = type == 3 ? u16(at + 8) : type == 4 ? u32(at + 8) : -1;
    (tag == 256 ? *w : *h) = value;
  }
  if (*w <= 0 || *h <= 0) return absl::DataLossError("TIFF without its image size");
  return absl::OkStatus();
}

// A WebP's canvas size, from its first chunk: VP8X (extended), VP8L
// (lossless) or "VP8 " (lossy).
absl::Status WebpSize(const uint8_t* data, size_t size, int64_t* w, int64_t* h) {
  if (size < 30) return absl::DataLossError("truncated WebP header");
  const uint8_t* chunk = data + 12;
  if (std::memcmp(chunk, "VP8X", 4) == 0) {
    *w = 1 + (data[24] | data[25] << 8 | data[26] << 16);
    *h = 1 + (data[27] | data[28] << 8 | data[29] << 16);
  } else if (std::memcmp(chunk, "VP8L", 4) == 0) {
    if (data[20] != 0x2F) return absl::DataLossError("bad WebP lossless signature");
    const uint32_t bits = ReadLe32(data + 21);
    *w = 1 + (bits & 0x3FFF);
    *h = 1 + ((bits >> 14) & 0x3FFF);
  } else if (std::memcmp(chunk, "VP8 ", 4) == 0) {
    if (data[23] != 0x9D || data[24] != 0x01 || data[25] != 0x2A) {
      return absl::DataLossError("bad WebP frame start code");
    }
    *w = (data[26] | data[27] << 8) & 0x3FFF;
    *h = (data[28] | data[29] << 8) & 0x3FFF;
  } else {
    return absl::DataLossError("WebP without a VP8, VP8L or VP8X chunk");
  }
  return absl::OkStatus();
}

}  // namespace

struct ImageDecoder::Jpeg {
  struct Error {
    jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    int corrupt_warnings;
    char warning[JMSG_LENGTH_MAX];
    int max_scans;
    bool too_many_scans;
  };
  jpeg_decompress_struct cinfo;
  Error err;
  jpeg_progress_mgr progress;
  int region_x = 0, region_y = 0;  // where ReadJpegRegion's rows start, scaled

  // Called as the decoder works through the input: stops a file whose scans
  // go past the limit (the check libjpeg-turbo's TJFLAG_LIMITSCANS makes).
  static void Progress(j_common_ptr c) {
    auto* d = reinterpret_cast<j_decompress_ptr>(c);
    auto* e = reinterpret_cast<Error*>(c->err);
    if (d->progressive_mode && d->input_scan_number > e->max_scans) {
      e->too_many_scans = true;
      std::snprintf(e->message, sizeof(e->message),
                    "progressive JPEG with more than %d scans (--max-jpeg-scans)", e->max_scans);
      longjmp(e->jump, 1);
    }
  }

  static void ErrorExit(j_common_ptr c) {
    auto* e = reinterpret_cast<Error*>(c->err);
    c->err->format_message(c, e->message);
    longjmp(e->jump, 1);
  }
  static void EmitMessage(j_common_ptr c, int level) {
    if (level >= 0) return;  // trace messages
    auto* e = reinterpret_cast<Error*>(c->err);
    if (IsCorruptionWarning(c->err->msg_code) && e->corrupt_warnings++ == 0) {
      c->err->format_message(c, e->warning);
    }
    c->err->num_warnings++;
  }
  static void OutputMessage(j_common_ptr) {}

  Jpeg() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = ErrorExit;
    err.pub.emit_message = EmitMessage;
    err.pub.output_message = OutputMessage;
    jpeg_create_decompress(&cinfo);
    progress.progress_monitor = Progress;
    cinfo.progress = &progress;
  }
  ~Jpeg() { jpeg_destroy_decompress(&cinfo); }
};

namespace {

// What libjpeg allocates for an image once it starts: a progressive (or
// multi-scan) file keeps every coefficient of every component until its last
// scan, 64 of 2 bytes per block; any other, rows of a few MCUs.
int64_t LibjpegBytes(jpeg_decompress_struct& cinfo) {
  if (!jpeg_has_multiple_scans(&cinfo)) return int64_t{cinfo.image_width} * 96;
  int64_t bytes = 0;
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    bytes += (int64_t{comp.width_in_blocks} + comp.h_samp_factor) *
             (int64_t{comp.height_in_blocks} + comp.v_samp_factor) * DCTSIZE2 *
             static_cast<int64_t>(sizeof(JCOEF));
  }
  return bytes;
}

// The largest DCT scale (1/8, 1/4, 1/2) that keeps the planned region at
// least as large as its consumer asked, or 1.
int ScaleDenominator(const DecodeHint& planned, const DecodeOptions& options) {
  if (!options.use_dct_scaling || planned.min_width <= 0 || planned.min_height <= 0) return 1;
  for (int d : {8, 4, 2}) {
    if (planned.width / d >= planned.min_width && planned.height / d >= planned.min_height) {
      return d;
    }
  }
  return 1;
}

// CMYK (4 bytes a pixel) to RGB in place, front to back. libjpeg hands Adobe
// CMYK inverted (as Photoshop writes it): with inverted c, k the RGB value is
// c * k / 255, as Pillow converts it.
void CmykToRgb(uint8_t* pixels, size_t n, bool inverted) {
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = pixels + 4 * i;
    uint8_t* q = pixels + 3 * i;  // q <= p: safe in place
    const int k = inverted ? p[3] : 255 - p[3];
    for (int c = 0; c < 3; ++c) {
      const int v = inverted ? p[c] : 255 - p[c];
      q[c] = static_cast<uint8_t>((v * k + 127) / 255);
    }
  }
}

}  // namespace

ImageDecoder::ImageDecoder() : jpeg_(std::make_unique<Jpeg>()) {}

absl::Status ImageDecoder::ChargeInternals(int64_t bytes) {
  if (meter_ == nullptr || bytes <= 0) return absl::OkStatus();
  if (absl::Status s = meter_->Charge(bytes); !s.ok()) return s;
  charged_ = bytes;
  return absl::OkStatus();
}

void ImageDecoder::UnchargeInternals() {
  if (meter_ != nullptr) meter_->Uncharge(charged_);
  charged_ = 0;
}
ImageDecoder::~ImageDecoder() = default;

absl::Status ImageDecoder::Decode(const uint8_t* data, size_t size, const DecodeOptions& options,
                                  const DecodePlanner* planner, Buffer* out, DecodedImage* image) {
  if (size == 0) return absl::DataLossError("empty file");
  const ImageFormat format = SniffImageFormat(data, size);
  switch (format) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(data, size, options, planner, out, image);
    case ImageFormat::kPng:
    case ImageFormat::kBmp:
    case ImageFormat::kPnm:
    case ImageFormat::kTiff:
    case ImageFormat::kWebp:
      return DecodeOther(data, size, format, options, planner, out, image);
    case ImageFormat::kUnknown:
      break;
  }
  return absl::DataLossError(
      absl::StrCat("not a supported image (JPEG, PNG, BMP, PPM/PGM, TIFF or WebP); first bytes: ",
                   HexPrefix(data, size)));
}

absl::Status ImageDecoder::DecodeJpeg(const uint8_t* data, size_t size,
                                      const DecodeOptions& options, const DecodePlanner* planner,
                                      Buffer* out, DecodedImage* image) {
  if (!HasEndOfImage(data, size)) {
    return absl::DataLossError("truncated JPEG: no end-of-image marker after the last scan");
  }
  jpeg_decompress_struct& cinfo = jpeg_->cinfo;
  Jpeg::Error& err = jpeg_->err;
  err.corrupt_warnings = 0;
  err.pub.num_warnings = 0;
  err.max_scans = options.max_jpeg_scans;
  err.too_many_scans = false;
  // Everything read after a longjmp lives in cinfo, err or *image.
  if (setjmp(err.jump)) {
    jpeg_abort_decompress(&cinfo);
    UnchargeInternals();
    if (err.too_many_scans) return absl::ResourceExhaustedError(err.message);
    return absl::DataLossError(absl::StrCat("corrupt JPEG: ", err.message));
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const int src_w = static_cast<int>(cinfo.image_width);
  const int src_h = static_cast<int>(cinfo.image_height);
  if (static_cast<int64_t>(src_w) * src_h > options.max_pixels) {
    jpeg_abort_decompress(&cinfo);
    return absl::ResourceExhaustedError(
        absl::StrFormat("image is %dx%d = %d pixels, over the limit of %d (--max-pixels)", src_w,
                        src_h, static_cast<int64_t>(src_w) * src_h, options.max_pixels));
  }

  DecodeHint hint{0, 0, src_w, src_h, 0, 0, false};
  if (planner != nullptr) hint = (*planner)(src_w, src_h);
  const DecodeHint planned = hint;  // the consumer's crop, whatever we decode
  if (!options.use_roi) {
    hint.x = hint.y = 0;
    hint.width = src_w;
    hint.height = src_h;
  }
  const int denom = ScaleDenominator(planned, options);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;  // exact and identical on every CPU
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(denom);
  if (absl::Status s = ChargeInternals(LibjpegBytes(cinfo)); !s.ok()) {
    jpeg_abort_decompress(&cinfo);
    return s;
  }
  jpeg_start_decompress(&cinfo);
  if (absl::Status s = ReadJpegRegion(hint, denom, out, image); !s.ok()) return s;
  UnchargeInternals();  // libjpeg has freed its image's memory
  if (err.corrupt_warnings > 0) {
    return absl::DataLossError(absl::StrCat("corrupt JPEG data: ", err.warning));
  }
  if (cmyk) {
    CmykToRgb(image->data, static_cast<size_t>(image->width) * image->height,
              cinfo.saw_Adobe_marker);
  }
  image->view = ImageView::Whole(src_w, src_h);
  image->view.scale_denom = denom;
  image->view.x0 = jpeg_->region_x;
  image->view.y0 = jpeg_->region_y;
  SetPlannedCrop(planned, &image->view);
  return absl::OkStatus();
}

absl::Status ImageDecoder::ReadJpegRegion(const DecodeHint& hint, int denom, Buffer* out,
                                          DecodedImage* image) {
  jpeg_decompress_struct& cinfo = jpeg_->cinfo;
  const int full_w = static_cast<int>(cinfo.output_width);
  const int full_h = static_cast<int>(cinfo.output_height);
  int sx0, sx1, sy0, sy1;
  ScaleSpan(hint.x, hint.width, denom, full_w, &sx0, &sx1);
  ScaleSpan(hint.y, hint.height, denom, full_h, &sy0, &sy1);
  // Fancy upsampling replicates the edge column of a cropped scanline instead
  // of reading its neighbour, so decode one extra column on each side: the
  // columns the consumer reads are then exactly those of a full decode.
  sx0 = std::max(0, sx0 - 1);
  sx1 = std::min(full_w, sx1 + 1);
  JDIMENSION xoff = static_cast<JDIMENSION>(sx0);
  JDIMENSION width = static_cast<JDIMENSION>(sx1 - sx0);
  if (sx0 > 0 || sx1 < full_w) {
    // Widens the span to iMCU boundaries; xoff moves left, width grows.
    jpeg_crop_scanline(&cinfo, &xoff, &width);
  }
  if (sy0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(sy0));

  const int out_w = static_cast<int>(cinfo.output_width);
  const int rows = sy1 - sy0;
  const size_t stride = static_cast<size_t>(out_w) * cinfo.output_components;
  uint8_t* pixels = nullptr;
  try {
    pixels = out->Reserve(stride * rows);
  } catch (const std::bad_alloc& e) {
    // Leaves libjpeg ready for the next image.
    jpeg_abort_decompress(&cinfo);
    UnchargeInternals();
    return absl::ResourceExhaustedError(OutOfMemoryMessage(e));
  }
  JSAMPROW row_ptrs[16];
  while (static_cast<int>(cinfo.output_scanline) < sy1) {
    const int done = static_cast<int>(cinfo.output_scanline) - sy0;
    const int n = std::min(16, rows - done);
    for (int i = 0; i < n; ++i) row_ptrs[i] = pixels + (done + i) * stride;
    jpeg_read_scanlines(&cinfo, row_ptrs, static_cast<JDIMENSION>(n));
  }
  if (static_cast<int>(cinfo.output_scanline) < full_h) {
    jpeg_abort_decompress(&cinfo);  // rows below the region are never needed
  } else {
    jpeg_finish_decompress(&cinfo);
  }
  image->data = pixels;
  image->width = out_w;
  image->height = rows;
  jpeg_->region_x = static_cast<int>(xoff);
  jpeg_->region_y = sy0;
  return absl::OkStatus();
}

absl::Status ImageDecoder::DecodeOther(const uint8_t* data, size_t size, ImageFormat format,
                                       const DecodeOptions& options, const DecodePlanner* planner,
                                       Buffer* out, DecodedImage* image) {
  // Read the size from the header so an oversized image is refused before
  // OpenCV allocates anything.
  int64_t w = 0, h = 0;
  if (format == ImageFormat::kPng) {
    if (size < 24) return absl::DataLossError("truncated PNG header");
    w = ReadBe32(data + 16);
    h = ReadBe32(data + 20);
  } else if (format == ImageFormat::kBmp) {
    if (size < 26) return absl::DataLossError("truncated BMP header");
    w = ReadLe32(data + 18);
    h = ReadLe32(data + 22);
    if (h < 0) h = -h;  // top-down bitmap
  } else {
    absl::Status s = format == ImageFormat::kPnm    ? PnmSize(data, size, &w, &h)
                     : format == ImageFormat::kTiff ? TiffSize(data, size, &w, &h)
                                                    : WebpSize(data, size, &w, &h);
    if (!s.ok()) return s;
  }
  if (w <= 0 || h <= 0) {
    return absl::DataLossError(absl::StrFormat("bad image size %dx%d in header", w, h));
  }
  // Compared without multiplying: a PNG header's 32-bit sides overflow int64
  // when multiplied (found by tests/fuzz/decode_fuzz).
  if (w > options.max_pixels / h) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("image is %dx%d = %.0f pixels, over the limit of %d (--max-pixels)", w, h,
                        static_cast<double>(w) * static_cast<double>(h), options.max_pixels));
  }
  // What OpenCV holds, counted before it allocates: the 8-bit BGR image it
  // returns and its reader's rows (PNG, BMP, PNM read rows straight into
  // it); TIFF and WebP decode whole RGBA images first.
  const bool whole_rgba = format == ImageFormat::kTiff || format == ImageFormat::kWebp;
  if (absl::Status s = ChargeInternals(w * h * (whole_rgba ? 7 : 3) + (int64_t{1} << 20));
      !s.ok()) {
    return s;
  }
  cv::Mat bgr;
  try {
    const cv::Mat encoded(1, static_cast<int>(size), CV_8UC1, const_cast<uint8_t*>(data));
    bgr = cv::imdecode(encoded, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  } catch (const cv::Exception& e) {
    UnchargeInternals();
    return absl::DataLossError(absl::StrCat("corrupt image: ", e.what()));
  }
  if (bgr.empty() || bgr.cols != w || bgr.rows != h) {
    UnchargeInternals();
    return absl::DataLossError(absl::StrCat("corrupt or truncated ", FormatName(format)));
  }
  uint8_t* pixels = nullptr;
  try {
    pixels = out->Reserve(static_cast<size_t>(w) * h * 3);
  } catch (const std::bad_alloc& e) {
    UnchargeInternals();
    return absl::ResourceExhaustedError(OutOfMemoryMessage(e));
  }
  cv::Mat rgb(bgr.rows, bgr.cols, CV_8UC3, pixels);
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  bgr.release();
  UnchargeInternals();
  image->data = pixels;
  image->width = static_cast<int>(w);
  image->height = static_cast<int>(h);
  image->view = ImageView::Whole(image->width, image->height);
  if (planner != nullptr) {
    SetPlannedCrop((*planner)(image->width, image->height), &image->view);
  }
  return absl::OkStatus();
}

}  // namespace prepflow
