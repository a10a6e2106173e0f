// A prepflow plugin with one op, `cutout` (DeVries & Taylor, "Improved
// Regularization of Convolutional Neural Networks with Cutout", 2017): with
// probability p, a size x size square centred at a uniformly drawn pixel
// (clipped at the borders) is filled with one colour. A common CIFAR
// augmentation that torchvision lacks (RandomErasing draws a rectangle of
// random area and aspect instead).
//
//   stages { custom { name: "cutout" params { key: "size" value: "16" } } }
//   prepflow.ops.Custom("cutout", size=16, p=1.0, fill=0)
//
// It needs nothing but pipeline/ops/plugin_api.h and a C++17 compiler:
//
//   c++ -std=c++17 -O2 -fPIC -shared -I<prepflow>/pipeline cutout.cc -o libprepflow_cutout.so
//   prepflow run --plugin ./libprepflow_cutout.so --pipeline cutout.txt --data ...
//
// Draws: one uniform for p, then the centre row and column as integers, from
// the sample's own stream, so the op gives the same bytes on the trainer and
// on any worker.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "plugin_api.h"

namespace {

using prepflow::plugin::Number;
using prepflow::plugin::Params;
using prepflow::plugin::Rng;

class Cutout {
 public:
  static constexpr char kName[] = "cutout";
  static constexpr char kSummary[] =
      "Cutout: with probability p (default 1), fill a size x size square (default 16) centred "
      "at a uniform pixel, clipped at the borders, with the grey level fill (default 0).";
  static constexpr bool kRandom = true;

  static std::unique_ptr<Cutout> Create(const Params& params) {
    for (const auto& [key, value] : params) {
      if (key != "size" && key != "p" && key != "fill") {
        throw std::invalid_argument("no param '" + key + "' (cutout takes size, p, fill)");
      }
    }
    const double size = Number(params, "size", 16);
    const double p = Number(params, "p", 1);
    const double fill = Number(params, "fill", 0);
    if (!(size >= 1 && size <= 1 << 16) || size != static_cast<int>(size)) {
      throw std::invalid_argument("size: must be an integer in [1, 65536], got " +
                                  params.at("size"));
    }
    if (!(p >= 0 && p <= 1)) throw std::invalid_argument("p: must be in [0, 1]");
    if (!(fill >= 0 && fill <= 255) || fill != static_cast<int>(fill)) {
      throw std::invalid_argument("fill: must be an integer in [0, 255]");
    }
    return std::unique_ptr<Cutout>(
        new Cutout(static_cast<int>(size), p, static_cast<uint8_t>(fill)));
  }

  pf_type OutputType(const pf_type& in) const {
    if (in.kind != PF_IMAGE) throw std::invalid_argument("cutout takes images (before normalize)");
    return in;
  }

  void Apply(const pf_value& in, pf_value& out, Rng& rng) const {
    const int64_t h = in.type.dims[0], w = in.type.dims[1];
    const size_t bytes = static_cast<size_t>(h * w * 3);
    std::memcpy(out.data, in.data, bytes);
    if (!(rng.Uniform() < p_)) return;
    const int64_t cy = rng.UniformInt(0, h - 1), cx = rng.UniformInt(0, w - 1);
    const int64_t y0 = std::max<int64_t>(0, cy - size_ / 2), y1 = std::min(h, cy + (size_ + 1) / 2);
    const int64_t x0 = std::max<int64_t>(0, cx - size_ / 2), x1 = std::min(w, cx + (size_ + 1) / 2);
    auto* pixels = static_cast<uint8_t*>(out.data);
    for (int64_t y = y0; y < y1; ++y) {
      std::memset(pixels + (y * w + x0) * 3, fill_, static_cast<size_t>(x1 - x0) * 3);
    }
  }

 private:
  Cutout(int size, double p, uint8_t fill) : size_(size), p_(p), fill_(fill) {}
  int size_;
  double p_;
  uint8_t fill_;
};

}  // namespace

PREPFLOW_PLUGIN(Cutout)
