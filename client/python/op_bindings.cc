// The op schema, plugins, and what the parity tests draw, for Python.
#include "client/python/op_bindings.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/text.h"
#include "client/python/errors.h"
#include "google/protobuf/text_format.h"
#include "pipeline/core/op.h"
#include "pipeline/core/op_schema.h"
#include "pipeline/core/rng.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/ops/image/augment.h"
#include "pipeline/ops/plugins.h"

namespace py = pybind11;

namespace prepflow::python {
namespace {

// The schema of every op, for prepflow.ops and the torchvision translation.
py::list OpsSchema() {
  py::list ops;
  for (const OpSchema& op : OpSchemas()) {
    py::list fields;
    for (const FieldSchema& f : op.fields) {
      fields.append(py::dict(py::arg("name") = f.name, py::arg("type") = f.type,
                             py::arg("summary") = f.summary, py::arg("default") = f.default_value,
                             py::arg("choices") = f.choices));
    }
    ops.append(py::dict(py::arg("name") = op.name, py::arg("summary") = op.summary,
                        py::arg("torchvision") = op.torchvision, py::arg("random") = op.random,
                        py::arg("input") = op.input, py::arg("output") = op.output,
                        py::arg("parity") = op.parity, py::arg("batch") = op.batch,
                        py::arg("fields") = std::move(fields)));
  }
  return ops;
}

}  // namespace

// The op schema, plugins, and what the parity tests draw.
void BindOps(py::module_& m) {
  m.def("ops_schema", &OpsSchema,
        "Every op a pipeline may use, with its fields (as `prepflow ops --json`).");
  m.def(
      "load_plugin",
      [](const std::string& path) {
        if (absl::Status s = LoadPlugin(path); !s.ok()) Raise(s);
      },
      "Loads a plugin of custom ops (pipeline/ops/plugin_api.h).");
  m.def("plugin_ops", [] {
    py::list out;
    for (const PluginOpInfo& op : LoadedPluginOps()) {
      py::dict d;
      d["name"] = op.name;
      d["summary"] = SafeText(op.summary);
      d["random"] = op.random;
      d["plugin"] = SafeText(op.file);
      out.append(d);
    }
    return out;
  });
}

// For tests/python/test_parity.py: what random stages draw for one sample,
// so that torchvision's kernels can be run with the same draws.
void BindDraws(py::module_& m) {
  m.def(
      "_decode_plan",
      [](const std::string& stage_text, uint64_t seed, uint64_t epoch, uint64_t index,
         uint32_t stage, int width, int height) {
        proto::Stage spec;
        if (!google::protobuf::TextFormat::ParseFromString(stage_text, &spec)) {
          throw py::value_error("stage: not a Stage in text format");
        }
        auto op = BuiltinOps().Create(spec);
        if (!op.ok()) Raise(op.status());
        if (!(*op)->PlansDecode()) throw py::value_error("stage: its op plans no decode");
        if (height < 1 || width < 1) throw py::value_error("height, width: must be positive");
        SampleRng rng(seed, epoch, index, stage);
        const DecodeHint h = (*op)->PlanDecode(width, height, rng);
        return py::make_tuple(h.x, h.y, h.width, h.height, h.min_width, h.min_height);
      },
      "(x, y, width, height, min_width, min_height): the region and smallest decode a "
      "resizing or cropping stage asks of the decoder for one sample of a width x height image.");
  m.def(
      "_aug_mix_draws",
      [](uint64_t seed, uint64_t epoch, uint64_t index, uint32_t stage, int height, int width,
         int severity, int mixture_width, int chain_depth, double alpha, bool all_ops) {
        const AugMixParams params{severity, mixture_width, chain_depth, alpha, all_ops};
        if (absl::Status s = CheckAugMixParams(params); !s.ok()) {
          Raise(s);
        }
        if (height < 1 || width < 1) throw py::value_error("height, width: must be positive");
        SampleRng rng(seed, epoch, index, stage);
        const AugMixDraw d = DrawAugMix(rng, params, height, width);
        py::list chains;
        for (const AugmentSteps& chain : d.chains) {
          py::list steps;
          for (const AugmentStep& s : chain) {
            steps.append(py::make_tuple(AugmentOpName(s.op), s.magnitude));
          }
          chains.append(steps);
        }
        return py::make_tuple(d.original_weight,
                              std::vector<float>(d.chain_weights.begin(), d.chain_weights.end()),
                              chains);
      },
      "(original weight, chain weights, chains of (op, magnitude)) of an aug_mix stage.");
}

}  // namespace prepflow::python
