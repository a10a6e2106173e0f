#include "pipeline/ops/plugins.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/text.h"
#include "pipeline/ops/compose_ops.h"
#include "pipeline/ops/image/image_op.h"
#include "pipeline/ops/plugin_api.h"

namespace prepflow {
namespace {

constexpr size_t kErrorBytes = 1024;

struct LoadedOp {
  pf_op op;  // its strings live as long as the library: forever
  std::string file;
};

struct Plugins {
  absl::Mutex mu;
  std::set<std::string> files ABSL_GUARDED_BY(mu);  // real paths loaded
  std::map<std::string, LoadedOp, std::less<>> ops ABSL_GUARDED_BY(mu);
};

Plugins& Loaded() {
  static Plugins* const plugins = new Plugins;  // never destroyed: ops may outlive main
  return *plugins;
}

constexpr size_t kMaxNameBytes = 64;

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// An op name from a job (anyone's bytes, any length) as messages and logs
// show it: printable, and no longer than a loadable name can be.
std::string Shown(absl::string_view name) {
  if (name.size() <= kMaxNameBytes) return SafeText(name);
  return absl::StrCat(SafeText(name.substr(0, kMaxNameBytes)), "...");
}

// A plugin's error buffer: the plugin fills it, and may leave it
// unterminated or not UTF-8. Only its first byte is cleared up front (it is
// on every sample's path).
class ErrorBuffer {
 public:
  ErrorBuffer() { text_[0] = '\0'; }
  char* data() { return text_; }
  size_t size() const { return sizeof(text_); }
  // InvalidArgument "custom op 'NAME': the plugin's message" (or `fallback`).
  absl::Status Error(absl::string_view op, absl::string_view fallback = "") {
    text_[sizeof(text_) - 1] = '\0';
    const absl::string_view said = text_[0] != '\0' ? absl::string_view(text_) : fallback;
    return absl::InvalidArgumentError(
        absl::StrCat("custom op '", Shown(op), "': ", SafeText(said)));
  }

 private:
  char text_[kErrorBytes];
};

// What register_op collects while a plugin's init runs.
struct Registration {
  pf_registrar registrar;
  std::vector<pf_op> ops;
  std::string error;
};

int RegisterOp(pf_registrar* self, const pf_op* op) {
  auto* r = static_cast<Registration*>(self->host);
  if (op == nullptr || op->name == nullptr || !ValidName(op->name)) {
    r->error = "an op with a missing or bad name (letters, digits, '_', '.', '-'; 1 to 64)";
    return 1;
  }
  if (op->create == nullptr || op->destroy == nullptr || op->output_type == nullptr ||
      op->apply == nullptr) {
    r->error = absl::StrCat("op '", op->name, "' lacks a function");
    return 1;
  }
  r->ops.push_back(*op);
  return 0;
}

// The plugin's view of a value type; InvalidArgument for what plugins cannot take.
absl::StatusOr<pf_type> ToPlugin(const ValueType& in, absl::string_view op) {
  pf_type t{};
  if (in.kind == ValueKind::kImage && in.shape.size() == 3) {
    t.kind = PF_IMAGE;
  } else if (in.kind == ValueKind::kTensor && in.shape.size() == 3) {
    t.kind = PF_TENSOR;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom op '", op, "' takes an image or a 3-d tensor but gets ", in.DebugString(),
        in.kind == ValueKind::kEncoded ? " (put a decode stage before it)" : ""));
  }
  for (int i = 0; i < 3; ++i) t.dims[i] = in.shape[i];
  return t;
}

// The plugin's output type checked: a known kind, images with 3 channels,
// each dimension positive or -1 (varies) where `fixed` is false.
absl::StatusOr<ValueType> FromPlugin(const pf_type& t, bool fixed, absl::string_view op) {
  const bool kind_ok = t.kind == PF_IMAGE || t.kind == PF_TENSOR;
  bool dims_ok = kind_ok && (t.kind != PF_IMAGE || t.dims[2] == 3);
  for (int64_t d : t.dims) dims_ok = dims_ok && (d > 0 || (!fixed && d == -1)) && d < (1 << 24);
  if (!dims_ok) {
    return absl::InternalError(absl::StrCat("custom op '", op, "': its output_type gave kind ",
                                            static_cast<int>(t.kind), " and dims ", t.dims[0], "x",
                                            t.dims[1], "x", t.dims[2], ", which is not a value"));
  }
  ValueType v;
  v.kind = t.kind == PF_IMAGE ? ValueKind::kImage : ValueKind::kTensor;
  v.shape = {t.dims[0], t.dims[1], t.dims[2]};
  return v;
}

double RngUniform(pf_rng* rng) { return reinterpret_cast<SampleRng*>(rng)->Uniform(); }
int64_t RngUniformInt(pf_rng* rng, int64_t lo, int64_t hi) {
  return lo <= hi ? reinterpret_cast<SampleRng*>(rng)->UniformInt(lo, hi) : lo;
}
double RngNormal(pf_rng* rng) { return reinterpret_cast<SampleRng*>(rng)->Normal(); }
constexpr pf_rng_api kRngApi = {RngUniform, RngUniformInt, RngNormal};

// An op of a plugin, with the state its create() made from the stage's params.
class PluginOp : public Op {
 public:
  PluginOp(const LoadedOp& op, void* state) : op_(op), state_(state) {}
  ~PluginOp() override { op_.op.destroy(state_); }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    auto types = TypesFor(in, /*fixed=*/false);
    if (!types.ok()) return types.status();
    return types->value;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    auto types = TypesFor(ValueType{s.kind, s.shape}, /*fixed=*/true);
    if (!types.ok()) return types.status();
    const ValueType* out = &types->value;
    const int64_t h = out->kind == ValueKind::kImage ? out->shape[0] : out->shape[1];
    const int64_t w = out->kind == ValueKind::kImage ? out->shape[1] : out->shape[2];
    if (absl::Status st = detail::CheckOutputArea(ctx, op_.op.name, w, h); !st.ok()) return st;
    const size_t bytes = out->bytes();
    uint8_t* data = ctx.Output(s.data, bytes);
    const pf_value in_value{types->in, s.data};
    pf_value out_value{types->out, data};
    SampleRng rng = ctx.Rng(s);
    ErrorBuffer error;
    if (op_.op.apply(state_, &in_value, &out_value, reinterpret_cast<pf_rng*>(&rng), &kRngApi,
                     error.data(), error.size()) != 0) {
      return error.Error(op_.op.name);
    }
    if (out->kind == ValueKind::kImage) {
      detail::SetImage(s, data, static_cast<int>(h), static_cast<int>(w),
                       ImageView::Whole(static_cast<int>(w), static_cast<int>(h)));
    } else {
      s.kind = ValueKind::kTensor;
      s.data = data;
      s.size = bytes;
      s.shape = out->shape;
    }
    return absl::OkStatus();
  }

 private:
  // The plugin's view of `in`, the output type it gives for it, and that
  // type checked (every dimension known when `fixed`).
  struct Types {
    pf_type in, out;
    ValueType value;
  };
  absl::StatusOr<Types> TypesFor(const ValueType& in, bool fixed) const {
    auto t = ToPlugin(in, op_.op.name);
    if (!t.ok()) return t.status();
    pf_type out{};
    ErrorBuffer error;
    if (op_.op.output_type(state_, &*t, &out, error.data(), error.size()) != 0) {
      return error.Error(op_.op.name);
    }
    auto value = FromPlugin(out, fixed, op_.op.name);
    if (!value.ok()) return value.status();
    return Types{*t, out, *value};
  }

  LoadedOp op_;
  void* state_;
};

std::string LoadedNames(const Plugins& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
  std::vector<std::string> names;
  for (const auto& [name, op] : p.ops) names.push_back(name);
  return names.empty() ? "none is loaded" : absl::StrCat("loaded: ", absl::StrJoin(names, ", "));
}

}  // namespace

absl::Status LoadPlugin(const std::string& path) {
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) {
    return absl::NotFoundError(absl::StrCat("plugin ", path, ": no such file"));
  }
  Plugins& p = Loaded();
  absl::MutexLock lock(&p.mu);
  if (p.files.count(real) > 0) return absl::OkStatus();
  // RTLD_LOCAL: a plugin's symbols do not leak into prepflow or other plugins.
  void* handle = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::InvalidArgumentError(
        absl::StrCat("plugin ", path, ": cannot be loaded: ", why != nullptr ? why : "?"));
  }
  auto init = reinterpret_cast<pf_plugin_init_fn>(dlsym(handle, PREPFLOW_PLUGIN_INIT_SYMBOL));
  if (init == nullptr) {
    dlclose(handle);
    return absl::InvalidArgumentError(absl::StrCat("plugin ", path, ": has no ",
                                                   PREPFLOW_PLUGIN_INIT_SYMBOL,
                                                   " (is it a prepflow plugin? see "
                                                   "pipeline/ops/plugin_api.h)"));
  }
  Registration r;
  r.registrar = pf_registrar{PREPFLOW_PLUGIN_ABI_VERSION, RegisterOp, &r};
  if (init(&r.registrar) != 0 || !r.error.empty()) {
    // Its ops may be half registered and it may hold state: keep it loaded,
    // use none of it.
    return absl::InvalidArgumentError(
        absl::StrCat("plugin ", path, ": refused to load (built for prepflow's plugin ABI version ",
                     PREPFLOW_PLUGIN_ABI_VERSION, "?)", r.error.empty() ? "" : ": ", r.error));
  }
  for (const pf_op& op : r.ops) {
    if (auto it = p.ops.find(op.name); it != p.ops.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plugin ", path, ": op '", op.name, "' is also in ", it->second.file));
    }
  }
  for (const pf_op& op : r.ops) p.ops[op.name] = LoadedOp{op, real};
  p.files.insert(real);
  return absl::OkStatus();
}

absl::Status LoadPlugins(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (absl::Status s = LoadPlugin(path); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--plugin: ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<PluginOpInfo> LoadedPluginOps() {
  Plugins& p = Loaded();
  absl::MutexLock lock(&p.mu);
  std::vector<PluginOpInfo> out;
  for (const auto& [name, op] : p.ops) {
    out.push_back(
        {name, op.op.summary != nullptr ? op.op.summary : "", op.file, op.op.random != 0});
  }
  return out;
}

bool PluginOpLoaded(absl::string_view name) {
  Plugins& p = Loaded();
  absl::MutexLock lock(&p.mu);
  return p.ops.find(name) != p.ops.end();
}

absl::StatusOr<std::unique_ptr<Op>> CreatePluginOp(const proto::Custom& stage) {
  LoadedOp op;
  {
    Plugins& p = Loaded();
    absl::MutexLock lock(&p.mu);
    auto it = p.ops.find(stage.name());
    if (it == p.ops.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "custom op '", Shown(stage.name()),
          "' is not loaded (load its plugin with --plugin FILE; ", LoadedNames(p), ")"));
    }
    op = it->second;
  }
  // In a fixed order (the map's is not), so create() sees the same params
  // wherever it runs.
  std::map<std::string, std::string> sorted(stage.params().begin(), stage.params().end());
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : sorted) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  const pf_params params{keys.size(), keys.data(), values.data()};
  ErrorBuffer error;
  void* state = op.op.create(&params, error.data(), error.size());
  if (state == nullptr) return error.Error(stage.name(), "refused its params");
  return std::unique_ptr<Op>(new PluginOp(op, state));
}

namespace {

// The name of the first custom op in `stage` (inside compositions too)
// that no loaded plugin provides; "" when there is none.
std::string MissingCustomOp(const proto::Stage& stage) {
  if (stage.has_custom()) return PluginOpLoaded(stage.custom().name()) ? "" : stage.custom().name();
  const google::protobuf::RepeatedPtrField<proto::Stage>* inner = InnerStages(stage);
  if (inner == nullptr) return "";
  for (const proto::Stage& s : *inner) {
    if (std::string name = MissingCustomOp(s); !name.empty()) return name;
  }
  return "";
}

}  // namespace

int FirstMissingOp(const proto::PipelineSpec& spec, std::string* why) {
  for (int i = 0; i < spec.stages_size(); ++i) {
    const std::string missing = MissingCustomOp(spec.stages(i));
    if (!missing.empty()) {
      if (why != nullptr) {
        *why = absl::StrCat("stage ", i, ": custom op '", Shown(missing),
                            "' is not loaded here (start with --plugin FILE)");
      }
      return i;
    }
  }
  return -1;
}

}  // namespace prepflow
