// _prepflow: the C++ side of the `prepflow` Python package (see
// prepflow/__init__.py, which is the API users see).
//
// It wraps one Loader (client/loader.h) and hands out its batches without
// copying: a batch's images and labels are exported as DLPack capsules (for
// torch.utils.dlpack.from_dlpack) or NumPy arrays, each holding a reference
// to the batch; the batch returns to the Loader's pool when the last of them
// is freed, from whatever thread. Next() releases the GIL while it waits.
//
// GPU delivery (client/gpu): with gpu_normalize the loader runs its pipeline
// without the final normalize, into page-locked batches, and a
// DeviceNormalizer copies each uint8 batch to the GPU and normalizes it there
// into a tensor the package allocates with torch.
//
// Errors from C++ arrive as Python exceptions carrying the C++ message:
// InvalidArgument -> ValueError, NotFound -> FileNotFoundError,
// PermissionDenied -> PermissionError, everything else -> RuntimeError.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/text.h"
#include "client/loader.h"
#include "client/loader_stats.h"
#include "client/metrics.h"
#include "client/packed_loader.h"
#include "client/python/errors.h"
#include "client/python/op_bindings.h"
#include "client/python/options.h"
#include "google/protobuf/text_format.h"
#include "gpu.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/op.h"
#include "pipeline/core/op_schema.h"
#include "pipeline/data/dataset.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/ops/image/augment.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/pipeline.h"
#include "prometheus/exposer.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"
#include "storage/options.h"

namespace py = pybind11;

namespace prepflow::python {

[[noreturn]] void Raise(const absl::Status& s) {
  // Messages quote file names, which need not be UTF-8.
  const std::string message = SafeText(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw py::value_error(message);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, message.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kPermissionDenied:
      PyErr_SetString(PyExc_PermissionError, message.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(absl::StrCat(absl::StatusCodeToString(s.code()), ": ", message));
  }
}

namespace {

// The keyword `key`, or `fallback`; a value of the wrong type or out of
// the C++ type's range raises ValueError naming the keyword (pybind11's own
// "Unable to cast" named none).
template <typename T>
T Get(const py::dict& d, const char* key, T fallback) {
  if (!d.contains(key) || d[key].is_none()) return fallback;
  try {
    return d[key].cast<T>();
  } catch (const py::cast_error&) {
    throw py::value_error(absl::StrCat(key, ": ", py::repr(d[key]).cast<std::string>(),
                                       " is of the wrong type or out of range"));
  }
}

// Python keyword arguments to LoaderOptions: the data and the pipeline
// here, every other option by its row of the table (options.h).
LoaderOptions ToOptions(const py::dict& d) {
  LoaderOptions o;
  o.dataset.set_path(Get<std::string>(d, "data", ""));
  auto spec = LoadPipelineSpec(Get<std::string>(d, "pipeline", "imagenet-train"));
  if (!spec.ok())
    Raise(absl::InvalidArgumentError(absl::StrCat("pipeline: ", spec.status().message())));
  o.pipeline = *spec;
  SetKeywordOptions(d, &o);
  return o;
}

// With gpu_normalize: the pipeline's last stage (a normalize) is taken off
// and returned, to run on the GPU; batches go to page-locked memory.
// The normalize is validated here, as Loader::Create would validate it had it
// stayed in the pipeline (wrong counts or a zero std must not reach the GPU).
std::optional<gpu::NormalizeParams> SplitForGpu(LoaderOptions& o) {
  const int n = o.pipeline.stages_size();
  if (n == 0 || !o.pipeline.stages(n - 1).has_normalize()) return std::nullopt;
  if (auto op = BuiltinOps().Create(o.pipeline.stages(n - 1)); !op.ok()) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat("pipeline: stage ", n - 1, " (normalize): ", op.status().message())));
  }
  // Batch ops (MixUp, CutMix) mix normalized floats on the CPU.
  if (o.pipeline.batch_stages_size() > 0) {
    spdlog::info("the pipeline has batch ops: normalize stays on the CPU, batches are copied");
    return std::nullopt;
  }
  gpu::NormalizeParams params;  // the op's defaults: ImageNet's
  const proto::Normalize& p = o.pipeline.stages(n - 1).normalize();
  for (int c = 0; c < 3 && c < p.mean_size(); ++c) params.mean[c] = static_cast<float>(p.mean(c));
  for (int c = 0; c < 3 && c < p.std_size(); ++c) params.std[c] = static_cast<float>(p.std(c));
  o.pipeline.mutable_stages()->RemoveLast();
  o.batch_allocator = {gpu::AllocatePinned, gpu::FreePinned};
  // The normalizer's copies in flight and the batch prepflow/__init__.py
  // keeps aside (the first, for the image size, and one past an epoch's
  // end): made up front, no page-locked allocation mid-training.
  o.held_batches = gpu::DeviceNormalizer::kBatchesInFlight + 1;
  return params;
}

// What a DLPack tensor or NumPy array of a batch keeps alive.
struct BatchView {
  BatchPtr batch;
  std::vector<int64_t> shape;
};

// Whether a batch's samples are float32 (tensors, audio); else uint8 images.
bool Floats(const ValueType& t) {
  return t.kind == ValueKind::kTensor || t.kind == ValueKind::kAudio;
}

DLDataType DTypeOf(const ValueType& t) {
  if (Floats(t)) return {kDLFloat, 32, 1};
  if (t.kind == ValueKind::kTokens) return {kDLInt, 32, 1};
  return {kDLUInt, 8, 1};  // kImage: uint8 HWC
}

const char* DTypeName(const ValueType& t) {
  return Floats(t) ? "float32" : t.kind == ValueKind::kTokens ? "int32" : "uint8";
}

// A NumPy array of values of type `t` at `data`, kept alive by `owner`.
py::array ArrayOf(const ValueType& t, const std::vector<int64_t>& shape, const uint8_t* data,
                  const py::capsule& owner) {
  if (Floats(t)) return py::array_t<float>(shape, reinterpret_cast<const float*>(data), owner);
  if (t.kind == ValueKind::kTokens) {
    return py::array_t<int32_t>(shape, reinterpret_cast<const int32_t*>(data), owner);
  }
  return py::array_t<uint8_t>(shape, data, owner);
}

// A DLPack capsule ("dltensor") over `data`, owned by `view`.
py::capsule ToDLPack(std::unique_ptr<BatchView> view, void* data, DLDataType dtype) {
  auto* tensor = new DLManagedTensor{};
  tensor->dl_tensor.data = data;
  tensor->dl_tensor.device = {kDLCPU, 0};
  tensor->dl_tensor.ndim = static_cast<int>(view->shape.size());
  tensor->dl_tensor.dtype = dtype;
  tensor->dl_tensor.shape = view->shape.data();
  tensor->dl_tensor.strides = nullptr;  // compact, row-major
  tensor->dl_tensor.byte_offset = 0;
  tensor->manager_ctx = view.release();
  tensor->deleter = [](DLManagedTensor* self) {
    delete static_cast<BatchView*>(self->manager_ctx);
    delete self;
  };
  // The consumer renames the capsule "used_dltensor" and owns the tensor from
  // then on; a capsule never consumed frees it here.
  return py::capsule(tensor, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      t->deleter(t);
    } else {
      PyErr_Clear();
    }
  });
}

class PyBatch {
 public:
  explicit PyBatch(BatchPtr batch) : batch_(std::move(batch)) {}

  std::vector<int64_t> image_shape() const {
    const Shape s = batch_->shape();
    return std::vector<int64_t>(s.begin(), s.end());
  }
  py::capsule images_dlpack() const {
    auto view = std::make_unique<BatchView>(BatchView{batch_, image_shape()});
    return ToDLPack(std::move(view), const_cast<uint8_t*>(batch_->data()),
                    DTypeOf(batch_->sample_type()));
  }
  // int64 [n], or float32 [n, classes] soft labels after MixUp/CutMix.
  py::capsule labels_dlpack() const {
    if (batch_->num_classes() > 0) {
      auto view =
          std::make_unique<BatchView>(BatchView{batch_, {batch_->size(), batch_->num_classes()}});
      return ToDLPack(std::move(view), const_cast<float*>(batch_->soft_labels().data()),
                      {kDLFloat, 32, 1});
    }
    auto view = std::make_unique<BatchView>(BatchView{batch_, {batch_->size()}});
    return ToDLPack(std::move(view), const_cast<int64_t*>(batch_->labels().data()),
                    {kDLInt, 64, 1});
  }
  py::array images_numpy() const {
    auto* view = new BatchView{batch_, image_shape()};
    py::capsule owner(view, [](void* p) { delete static_cast<BatchView*>(p); });
    return ArrayOf(batch_->sample_type(), view->shape, batch_->data(), owner);
  }
  py::array labels_numpy() const {
    const bool soft = batch_->num_classes() > 0;
    auto* view = new BatchView{batch_, {batch_->size()}};
    if (soft) view->shape.push_back(batch_->num_classes());
    py::capsule owner(view, [](void* p) { delete static_cast<BatchView*>(p); });
    if (soft) return py::array_t<float>(view->shape, batch_->soft_labels().data(), owner);
    return py::array_t<int64_t>(view->shape, batch_->labels().data(), owner);
  }
  // A ragged batch's lengths (int64 [n]: each value's length along the dimension
  // that varies, before padding); None for a fixed batch.
  py::object lengths_dlpack() const {
    if (!batch_->ragged()) return py::none();
    auto view = std::make_unique<BatchView>(BatchView{batch_, {batch_->size()}});
    return ToDLPack(std::move(view), const_cast<int64_t*>(batch_->lengths().data()),
                    {kDLInt, 64, 1});
  }
  py::object lengths_numpy() const {
    if (!batch_->ragged()) return py::none();
    auto* view = new BatchView{batch_, {batch_->size()}};
    py::capsule owner(view, [](void* p) { delete static_cast<BatchView*>(p); });
    return py::array_t<int64_t>(view->shape, batch_->lengths().data(), owner);
  }
  // A record's field f (0: the values above): its tensor, its lengths (None
  // unless ragged), or a bytes field's values.
  py::capsule field_dlpack(int f) const {
    const Shape s = batch_->field_shape(CheckField(f));
    auto view = std::make_unique<BatchView>(BatchView{batch_, {s.begin(), s.end()}});
    return ToDLPack(std::move(view), const_cast<uint8_t*>(batch_->field_data(f)),
                    DTypeOf(batch_->field(f).type));
  }
  py::array field_numpy(int f) const {
    const Shape s = batch_->field_shape(CheckField(f));
    auto* view = new BatchView{batch_, {s.begin(), s.end()}};
    py::capsule owner(view, [](void* p) { delete static_cast<BatchView*>(p); });
    return ArrayOf(batch_->field(f).type, view->shape, batch_->field_data(f), owner);
  }
  py::object field_lengths_dlpack(int f) const {
    if (!batch_->field_ragged(CheckField(f))) return py::none();
    auto view = std::make_unique<BatchView>(BatchView{batch_, {batch_->size()}});
    return ToDLPack(std::move(view), const_cast<int64_t*>(batch_->field_lengths(f).data()),
                    {kDLInt, 64, 1});
  }
  py::object field_lengths_numpy(int f) const {
    if (!batch_->field_ragged(CheckField(f))) return py::none();
    auto* view = new BatchView{batch_, {batch_->size()}};
    py::capsule owner(view, [](void* p) { delete static_cast<BatchView*>(p); });
    return py::array_t<int64_t>(view->shape, batch_->field_lengths(f).data(), owner);
  }
  py::list field_bytes(int f) const {
    py::list out;
    for (int64_t i = 0; i < batch_->size(); ++i) {
      const absl::string_view b = batch_->field_bytes(CheckField(f), i);
      out.append(py::bytes(b.data(), b.size()));
    }
    return out;
  }
  const BatchPtr& batch() const { return batch_; }
  // Each sample's transcript (a dataset with texts), else empty.
  std::vector<std::string> texts;

 private:
  int CheckField(int f) const {
    if (f < 0 || f >= batch_->num_fields()) throw py::index_error("no such field");
    return f;
  }

  BatchPtr batch_;
};

py::object ToPython(const StatValue& value) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, value);
}

// One record from its field table. Paths come out as os.listdir gives names
// (undecodable bytes as surrogates, so that os.fsencode(path) is the file's
// name); other text through SafeText.
template <typename Record>
py::dict RecordDict(const Record& record, const std::vector<StatField<Record>>& fields) {
  py::dict d;
  for (const StatField<Record>& f : fields) {
    const StatValue value = f.get(record);
    const auto* text = std::get_if<std::string>(&value);
    if (text != nullptr && std::string(f.key) == "path") {
      d[f.key] = py::reinterpret_steal<py::str>(
          PyUnicode_DecodeFSDefaultAndSize(text->data(), static_cast<Py_ssize_t>(text->size())));
    } else if (text != nullptr) {
      d[f.key] = SafeText(*text);
    } else {
      d[f.key] = ToPython(value);
    }
  }
  return d;
}

template <typename Record>
py::list ListOf(const std::vector<Record>& records, const std::vector<StatField<Record>>& fields) {
  py::list out;
  for (const Record& r : records) out.append(RecordDict(r, fields));
  return out;
}

// The stats as a dict: the same field tables as the CLI's JSON and the
// Prometheus collector (client/loader_stats.h).
py::dict StatsDict(const LoaderStats& st) {
  py::dict d = RecordDict(st, LoaderStatFields());
  VisitStatLists(st, [&d](const char* key, const auto& records, const auto& fields) {
    d[key] = ListOf(records, fields);
  });
  return d;
}

// Every key StatsDict gives, from the table alone (tests compare the two).
py::list StatKeys() {
  py::list keys;
  for (const auto& f : LoaderStatFields()) keys.append(f.key);
  VisitStatLists(LoaderStats(),
                 [&keys](const char* key, const auto&, const auto&) { keys.append(key); });
  return keys;
}

// A packed batch as Python gets it: int64 [rows, length] tokens,
// position_ids and segment_ids (as models index with), int32 cu_seqlens (as
// flash-attention takes them), the pieces' documents, and where the next
// batch starts.
py::dict PackedDict(const PackedBatch& b) {
  const auto widen = [&b](const std::vector<int32_t>& v) {
    py::array_t<int64_t> a({b.rows, b.length});
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
  };
  const auto pieces = [&b](const std::vector<int64_t>& v) {
    py::array_t<int64_t> a({b.rows, b.max_pieces});
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
  };
  py::dict d;
  d["tokens"] = widen(b.tokens);
  d["position_ids"] = widen(b.position_ids);
  d["segment_ids"] = widen(b.segment_ids);
  py::array_t<int32_t> cu(static_cast<py::ssize_t>(b.cu_seqlens.size()));
  std::copy(b.cu_seqlens.begin(), b.cu_seqlens.end(), cu.mutable_data());
  d["cu_seqlens"] = cu;
  d["max_seqlen"] = b.max_seqlen;
  d["document_index"] = pieces(b.piece_index);
  d["document_offset"] = pieces(b.piece_offset);
  d["epoch"] = b.epoch;
  d["number"] = b.number;
  d["padding_tokens"] = b.padding_tokens;
  d["checksum"] = b.checksum;
  d["next"] = py::make_tuple(b.next.position, b.next.skip_tokens, b.next.skip_rows);
  return d;
}

class PyLoader {
 public:
  explicit PyLoader(const py::dict& options) {
    LoaderOptions o = ToOptions(options);
    if (Get<bool>(options, "gpu_normalize", false)) {
      // Validate first: a bad normalize is the same error with or without a
      // device.
      LoaderOptions split = o;
      std::optional<gpu::NormalizeParams> normalize = SplitForGpu(split);
      std::string why;
      if (!gpu::Available(&why)) Raise(absl::FailedPreconditionError(why));
      o = std::move(split);
      normalize_ = normalize;
    }
    absl::Status opened;
    {
      py::gil_scoped_release release;  // opening the dataset and the workers
      opened = Open(o);
    }
    if (!opened.ok()) Raise(opened);
    if (const int port = Get<int>(options, "metrics_port", -1); port >= 0) {
      try {
        exposer_ = std::make_unique<prometheus::Exposer>(absl::StrCat("0.0.0.0:", port));
      } catch (const std::exception& e) {
        Raise(absl::UnavailableError(absl::StrCat("metrics_port ", port, ": ", e.what())));
      }
      metrics_ = std::make_shared<LoaderMetrics>(any_.loader);
      exposer_->RegisterCollectable(metrics_);
      spdlog::info("serving metrics on port {} (/metrics), job {}",
                   exposer_->GetListeningPorts()[0], any_.loader->job_id());
    }
  }
  // The loader's threads may wait for the GIL as they stop (a library
  // calling back into Python: PyAV's log callback, where the user imported
  // av, takes it for FFmpeg's error messages): it is released while they
  // are joined, or they and this thread would wait for each other.
  ~PyLoader() {
    exposer_.reset();  // no longer scraping the loader
    metrics_.reset();
    py::gil_scoped_release release;
    any_ = AnyLoader();
  }
  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;

  // The port /metrics is served on; -1 without metrics.
  int metrics_port() const {
    return exposer_ != nullptr ? static_cast<int>(exposer_->GetListeningPorts()[0]) : -1;
  }

  // The next batch, or None after the last.
  std::optional<PyBatch> Next() {
    if (any_.packed != nullptr)
      Raise(absl::FailedPreconditionError("a packed loader: next_packed()"));
    absl::StatusOr<BatchPtr> batch;
    {
      py::gil_scoped_release release;
      batch = any_.loader->Next();
    }
    if (!batch.ok()) Raise(batch.status());
    if (*batch == nullptr) return std::nullopt;
    PyBatch out(*std::move(batch));
    const Dataset& dataset = any_.loader->dataset();
    if (dataset.has_texts()) {
      for (int64_t index : out.batch()->indices()) out.texts.push_back(dataset.text(index));
    }
    return out;
  }

  // Packed: the next batch of rows as a dict, or None after the last.
  py::object NextPacked() {
    if (any_.packed == nullptr) Raise(absl::FailedPreconditionError("the loader does not pack"));
    absl::StatusOr<std::unique_ptr<PackedBatch>> batch;
    {
      py::gil_scoped_release release;
      batch = any_.packed->Next();
    }
    if (!batch.ok()) Raise(batch.status());
    if (*batch == nullptr) return py::none();
    return PackedDict(**batch);
  }
  bool packed() const { return any_.packed != nullptr; }
  py::dict PackedCounts() const {
    py::dict d;
    d["documents"] = any_.packed ? any_.packed->documents() : 0;
    d["remote_documents"] = any_.packed ? any_.packed->remote_documents() : 0;
    return d;
  }

  py::dict Stats() const {
    LoaderStats st;
    {
      py::gil_scoped_release release;
      st = any_.loader->Stats();
    }
    return StatsDict(st);
  }
  const Loader& loader() const { return *any_.loader; }
  Loader& loader() { return *any_.loader; }
  // Set when the pipeline's normalize was split off for the GPU.
  const std::optional<gpu::NormalizeParams>& normalize() const { return normalize_; }

 private:
  absl::Status Open(const LoaderOptions& o) {
    auto any = OpenAnyLoader(o);
    if (!any.ok()) return any.status();
    any_ = *std::move(any);
    return absl::OkStatus();
  }

  AnyLoader any_;
  std::optional<gpu::NormalizeParams> normalize_;
  // After the loader: destroyed (and no longer scraping it) first.
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<LoaderMetrics> metrics_;
};

// A DeviceNormalizer for Python: batches in, the caller's device tensor
// filled on the normalizer's stream (see prepflow/__init__.py).
class PyNormalizer {
 public:
  PyNormalizer(int device, int64_t max_samples, int h, int w, const gpu::NormalizeParams& p) {
    std::string error;
    normalizer_ = gpu::DeviceNormalizer::Create(device, max_samples, h, w, p, &error);
    if (normalizer_ == nullptr) Raise(absl::UnavailableError(error));
  }
  // Fills `out` (device memory, n x 3 x h x w float32) from `batch` after
  // the work enqueued so far on the stream `after`.
  void Submit(const PyBatch& batch, uintptr_t out, uintptr_t after) {
    const BatchPtr& b = batch.batch();
    const Shape s = b->shape();
    if (b->sample_type().kind != ValueKind::kImage || s.size() != 4 ||
        s[1] != normalizer_->height() || s[2] != normalizer_->width()) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "DeviceNormalizer: the batch is ", b->sample_type().DebugString(), ", expected uint8 [",
          normalizer_->height(), ", ", normalizer_->width(), ", 3] images")));
    }
    std::string error;
    bool ok;
    {
      py::gil_scoped_release release;  // may wait for the batch two before
      ok = normalizer_->Submit(
          b->data(), b->size(), reinterpret_cast<float*>(out), reinterpret_cast<void*>(after),
          [keep = b]() mutable { keep.reset(); }, &error);
    }
    if (!ok) Raise(absl::InternalError(error));
  }
  uintptr_t stream() const { return reinterpret_cast<uintptr_t>(normalizer_->stream()); }
  void Synchronize() {
    std::string error;
    bool ok;
    {
      py::gil_scoped_release release;
      ok = normalizer_->Synchronize(&error);
    }
    if (!ok) Raise(absl::InternalError(error));
  }

 private:
  std::unique_ptr<gpu::DeviceNormalizer> normalizer_;
};

// The core's log lines, for Python's `logging`: kept here by whichever
// thread logs, and handed to the logger "prepflow" by the Python side
// (take_logs) on the thread that holds the GIL, after each call into the
// core. No C++ thread ever waits for the GIL, so a line logged under a lock
// cannot deadlock against Python. Lines past kMaxLines waiting are counted,
// not kept (the core rate-limits its repeated lines as on the command line).
class PendingLines final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr size_t kMaxLines = 1000;
  struct Taken {
    std::vector<std::pair<int, std::string>> lines;  // (spdlog level, text)
    int64_t dropped = 0;
  };
  Taken Take() {
    std::lock_guard<std::mutex> lock(mutex_);
    Taken t{std::move(lines_), dropped_};
    lines_.clear();
    dropped_ = 0;
    return t;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (lines_.size() >= kMaxLines) {
      ++dropped_;
      return;
    }
    lines_.emplace_back(static_cast<int>(msg.level),
                        SafeText(std::string(msg.payload.data(), msg.payload.size())));
  }
  void flush_() override {}

 private:
  std::vector<std::pair<int, std::string>> lines_;
  int64_t dropped_ = 0;
};

std::shared_ptr<PendingLines> RouteLogsToPython() {
  auto pending = std::make_shared<PendingLines>();
  auto logger = std::make_shared<spdlog::logger>("prepflow", pending);
  logger->set_level(spdlog::get_level());
  spdlog::set_default_logger(logger);
  return pending;
}

}  // namespace
}  // namespace prepflow::python

namespace prepflow::python {
namespace {

namespace gpu = prepflow::gpu;

// take_logs and set_log_level: the core's log lines, routed to Python.
void BindLogs(py::module_& m) {
  // Kept for the module's life (the default logger holds it too).
  static const std::shared_ptr<prepflow::python::PendingLines> pending =
      prepflow::python::RouteLogsToPython();
  m.def(
      "take_logs",
      [] {
        prepflow::python::PendingLines::Taken t = pending->Take();
        return py::make_tuple(std::move(t.lines), t.dropped);
      },
      "The core's log lines since the last call, as (spdlog level, text), and how many were "
      "dropped (over 1000 waiting).");
  m.def(
      "set_log_level",
      [](int level) {
        spdlog::set_level(static_cast<spdlog::level::level_enum>(
            std::clamp(level, 0, static_cast<int>(spdlog::level::off))));
      },
      "The least severe spdlog level (0 trace .. 6 off) the core logs.");
}

void BindBatch(py::module_& m) {
  py::class_<PyBatch>(m, "Batch")
      .def_property_readonly("epoch", [](const PyBatch& b) { return b.batch()->epoch(); })
      .def_property_readonly("number", [](const PyBatch& b) { return b.batch()->number(); })
      .def_property_readonly("end_position",
                             [](const PyBatch& b) { return b.batch()->end_position(); })
      .def_property_readonly("echo", [](const PyBatch& b) { return b.batch()->echo(); })
      .def_property_readonly("size", [](const PyBatch& b) { return b.batch()->size(); })
      .def_property_readonly("remote_samples",
                             [](const PyBatch& b) { return b.batch()->remote_samples(); })
      .def_property_readonly("indices", [](const PyBatch& b) { return b.batch()->indices(); })
      .def_property_readonly("copies", [](const PyBatch& b) { return b.batch()->copies(); })
      .def_property_readonly("checksum",
                             [](const PyBatch& b) {
                               // Its part of the run's checksum (a sum mod 2^64).
                               uint64_t sum = 0;
                               for (uint64_t h : b.batch()->hashes()) sum += h;
                               return sum;
                             })
      .def_property_readonly("image_shape", &PyBatch::image_shape)
      .def_property_readonly(
          "dtype",
          [](const PyBatch& b) { return prepflow::python::DTypeName(b.batch()->sample_type()); })
      .def("images_dlpack", &PyBatch::images_dlpack)
      .def("labels_dlpack", &PyBatch::labels_dlpack)
      .def("images_numpy", &PyBatch::images_numpy)
      .def("labels_numpy", &PyBatch::labels_numpy)
      .def_property_readonly("ragged", [](const PyBatch& b) { return b.batch()->ragged(); })
      // The sample dimension a ragged batch's values vary along (-1: none).
      .def_property_readonly("ragged_dim",
                             [](const PyBatch& b) {
                               return b.batch()->ragged() ? VaryingDim(b.batch()->sample_type())
                                                          : -1;
                             })
      .def_property_readonly("padding_bytes",
                             [](const PyBatch& b) { return b.batch()->padding_bytes(); })
      .def("lengths_dlpack", &PyBatch::lengths_dlpack)
      .def("lengths_numpy", &PyBatch::lengths_numpy)
      // A record's fields: (key, kind) each, 0 the values above; kind is
      // "bytes" for a carried member, else "tensor".
      .def_property_readonly(
          "field_kinds",
          [](const PyBatch& b) {
            py::list out;
            for (int f = 0; f < b.batch()->num_fields(); ++f) {
              const BatchField& field = b.batch()->field(f);
              out.append(py::make_tuple(
                  field.key, field.type.kind == ValueKind::kEncoded ? "bytes" : "tensor"));
            }
            return out;
          })
      .def("field_dlpack", &PyBatch::field_dlpack)
      .def("field_numpy", &PyBatch::field_numpy)
      .def("field_lengths_dlpack", &PyBatch::field_lengths_dlpack)
      .def("field_lengths_numpy", &PyBatch::field_lengths_numpy)
      .def("field_bytes", &PyBatch::field_bytes)
      .def_property_readonly("texts", [](const PyBatch& b) {
        py::list out;
        for (const std::string& t : b.texts) {  // UTF-8; a bad byte becomes U+FFFD
          out.append(py::reinterpret_steal<py::str>(
              PyUnicode_DecodeUTF8(t.data(), static_cast<Py_ssize_t>(t.size()), "replace")));
        }
        return out;
      });
}

void BindLoader(py::module_& m) {
  m.def("stat_keys", &StatKeys, "Every key Loader.stats() returns (from the one field table).");
  py::class_<PyLoader>(m, "Loader")
      .def(py::init<const py::dict&>())
      .def("next", &PyLoader::Next)
      .def("stats", &PyLoader::Stats)
      .def_property_readonly("job_id", [](const PyLoader& l) { return l.loader().job_id(); })
      .def_property_readonly("rank", [](const PyLoader& l) { return l.loader().options().rank; })
      .def_property_readonly("world_size",
                             [](const PyLoader& l) { return l.loader().options().world_size; })
      .def_property_readonly("threads", [](const PyLoader& l) { return l.loader().threads(); })
      .def("next_packed", &PyLoader::NextPacked, "The next batch of packed rows (a dict), or None.")
      .def_property_readonly("packed", &PyLoader::packed)
      .def("packed_counts", &PyLoader::PackedCounts)
      // The key of the pipeline's output (its last stage's field), and
      // how many fields its records have.
      .def_property_readonly(
          "field", [](const PyLoader& l) { return l.loader().pipeline().OutputFields()[0].key; })
      .def_property_readonly(
          "num_fields",
          [](const PyLoader& l) { return static_cast<int>(l.loader().pipeline().fields().size()); })
      // Whether some sample has a label (class folders, key.cls, a
      // manifest's label).
      .def_property_readonly("has_labels",
                             [](const PyLoader& l) {
                               const Dataset& d = l.loader().dataset();
                               for (int64_t i = 0; i < d.size(); ++i) {
                                 if (d.label(i) >= 0) return true;
                               }
                               return false;
                             })
      .def_property_readonly("has_texts",
                             [](const PyLoader& l) { return l.loader().dataset().has_texts(); })
      .def_property_readonly("metrics_port", &PyLoader::metrics_port)
      .def_property_readonly(
          "classes", [](const PyLoader& l) { return l.loader().dataset().classes(); },
          "Class names by label (an ImageFolder's folder names, sorted)")
      .def_property_readonly("samples_per_epoch",
                             [](const PyLoader& l) { return l.loader().samples_per_epoch(); })
      .def_property_readonly("batches_per_epoch",
                             [](const PyLoader& l) { return l.loader().batches_per_epoch(); })
      .def("batches_in_epoch",
           [](const PyLoader& l, int64_t epoch) { return l.loader().BatchesInEpoch(epoch); })
      .def(
          "add_trainer_work",
          [](PyLoader& l, double cpu_seconds) { l.loader().AddTrainerWork(cpu_seconds); },
          "CPU seconds this machine spent on delivered samples outside the pipeline (a Python "
          "tail): charged by the planner to every sample.")
      .def_property_readonly("trainer_cpu_seconds",
                             [](const PyLoader& l) { return l.loader().trainer_cpu_seconds(); })
      .def_property_readonly("gpu_normalize", [](const PyLoader& l) -> py::object {
        // (mean, std) of the normalize split off for the GPU, or None.
        if (!l.normalize()) return py::none();
        const gpu::NormalizeParams& p = *l.normalize();
        return py::make_tuple(std::vector<float>(p.mean, p.mean + 3),
                              std::vector<float>(p.std, p.std + 3));
      });
}

// The device path: whether CUDA is there, and its normalizer.
void BindGpu(py::module_& m) {
  m.def("gpu_available", [] {
    std::string why;
    const bool ok = gpu::Available(&why);
    return py::make_tuple(ok, why);
  });
  py::class_<PyNormalizer>(m, "DeviceNormalizer")
      .def(py::init([](int device, int64_t max_samples, int h, int w, std::vector<float> mean,
                       std::vector<float> std) {
             if (mean.size() != 3 || std.size() != 3)
               throw py::value_error("mean, std: need 3 each");
             gpu::NormalizeParams p;
             for (int c = 0; c < 3; ++c) p.mean[c] = mean[c], p.std[c] = std[c];
             return std::make_unique<PyNormalizer>(device, max_samples, h, w, p);
           }),
           py::arg("device"), py::arg("max_samples"), py::arg("height"), py::arg("width"),
           py::arg("mean"), py::arg("std"))
      .def("submit", &PyNormalizer::Submit, py::arg("batch"), py::arg("out"), py::arg("after"))
      .def_property_readonly("stream", &PyNormalizer::stream)
      .def("synchronize", &PyNormalizer::Synchronize);
}

}  // namespace
}  // namespace prepflow::python

PYBIND11_MODULE(_prepflow, m) {
  m.doc() = "C++ core of the prepflow package; use prepflow.Loader.";
  prepflow::python::BindLogs(m);
  prepflow::python::BindBatch(m);
  prepflow::python::BindLoader(m);
  prepflow::python::BindOps(m);
  prepflow::python::BindDraws(m);
  prepflow::python::BindOptions(m);
  prepflow::python::BindGpu(m);
}
