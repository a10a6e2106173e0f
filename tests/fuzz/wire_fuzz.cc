// Fuzz target: what a hostile or broken worker could send the trainer: bytes
// parsed as a SampleValue (its kind, shape and data), turned back into a
// sample and run through the rest of the pipeline from every boundary whose
// type it claims. Errors are Statuses; never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "pipeline/core/wire.h"
#include "pipeline/pipeline.h"
#include "proto/pipeline.pb.h"
#include "tests/fuzz/fuzz_seeds.h"

// Seeds: a small image and a tensor as a worker would send them, and an
// image whose bytes disagree with its shape.
void WriteSeeds(const std::string& dir) {
  prepflow::proto::SampleValue image;
  image.set_kind(prepflow::proto::SampleValue::KIND_IMAGE);
  for (int64_t d : {8, 6, 3}) image.add_shape(d);
  image.set_data(std::string(8 * 6 * 3, '\x7f'));
  prepflow::fuzz::WriteSeed(dir, "image", image.SerializeAsString());
  prepflow::proto::SampleValue tensor;
  tensor.set_kind(prepflow::proto::SampleValue::KIND_TENSOR);
  for (int64_t d : {3, 2, 2}) tensor.add_shape(d);
  tensor.set_data(std::string(3 * 2 * 2 * 4, '\0'));
  prepflow::fuzz::WriteSeed(dir, "tensor", tensor.SerializeAsString());
  image.set_data("short");
  prepflow::fuzz::WriteSeed(dir, "image-short", image.SerializeAsString());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const prepflow::Pipeline* pipeline = [] {
    auto p = prepflow::Pipeline::Create(*prepflow::LoadPipelineSpec("imagenet-train"), {});
    if (!p.ok()) std::abort();
    return p->release();
  }();
  static prepflow::Workspace* ws = new prepflow::Workspace;
  prepflow::proto::SampleValue value;
  if (!value.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (int cut = 1; cut <= pipeline->num_stages(); ++cut) {
    prepflow::Sample s;
    if (!prepflow::FromWire(value, *ws, s).ok()) return 0;
    // The client checks the type against the boundary before running on.
    const prepflow::ValueType& want = pipeline->boundary_type(cut);
    if (s.kind != want.kind) continue;
    (void)pipeline->Run(cut, pipeline->num_stages(), s, *ws);
  }
  return 0;
}
