/* prepflow's plugin interface: pipeline ops written in C or C++, built as a
 * shared library and loaded with --plugin FILE (prepflow run/plan/profile,
 * prepflow-worker, Python's plugins=). A pipeline names a plugin op as
 *
 *     stages { custom { name: "sepia" params { key: "strength" value: "0.8" } } }
 *
 * This header is the whole interface: plain C types and function pointers,
 * no prepflow, Abseil or protobuf types, so a plugin builds with a compiler
 * alone and keeps working across prepflow versions of the same ABI version.
 * The C++ helpers at the end (prepflow::plugin::Op and PREPFLOW_PLUGIN) are
 * header-only conveniences over it; examples/plugin/ is a complete plugin.
 *
 * What prepflow promises an op:
 *   - create() runs once per pipeline (on the client and on each worker that
 *     runs the op), with the stage's params; apply() then runs on many samples
 *     from many threads at once, so it must only read its state.
 *   - Randomness: draw only from the pf_rng handed to apply(), the sample's
 *     own stream keyed by (seed, epoch, sample, stage). An op that does so
 *     (and uses no other state) gives the same bytes wherever it runs, as
 *     prepflow's own ops do, so its samples stay bit-identical across
 *     placements.
 *   - Memory: apply() writes its output into out->data, which prepflow has
 *     allocated with the dimensions output_dims() gave for this input (never
 *     the input's memory). Dimensions over --max-pixels are refused first.
 *
 * What prepflow expects: no exceptions across the interface (the C++ helper
 * catches them), errors as a non-zero return with a message in the buffer
 * given (it is shown to the user with the stage and the file), and nothing
 * kept beyond a call but the op's state.
 *
 * Thread-safety: create() runs once per stage; apply() on many threads at
 * once, reading only the state; destroy() after the last apply().
 */
#ifndef PREPFLOW_PLUGIN_API_H_
#define PREPFLOW_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to the structs or functions below; prepflow refuses a
 * plugin built for another version, naming both. */
#define PREPFLOW_PLUGIN_ABI_VERSION 1

/* What flows between stages. */
typedef enum {
  PF_IMAGE = 0,  /* uint8 RGB, height x width x 3, row-major */
  PF_TENSOR = 1, /* float32, channels x height x width, row-major */
} pf_kind;

/* A value's kind and dimensions: an image's are (height, width, 3), a
 * tensor's (channels, height, width). In output_dims(), a dimension that
 * varies from sample to sample is -1. */
typedef struct {
  pf_kind kind;
  int64_t dims[3];
} pf_type;

typedef struct {
  pf_type type;
  void* data; /* uint8_t* for images, float* for tensors */
} pf_value;

/* The sample's random stream (opaque). */
typedef struct pf_rng pf_rng;

/* What prepflow gives apply() besides the value. */
typedef struct {
  /* Uniform in [0, 1), 53 random bits. */
  double (*uniform)(pf_rng* rng);
  /* Uniform integer in [lo, hi]. */
  int64_t (*uniform_int)(pf_rng* rng, int64_t lo, int64_t hi);
  /* Standard normal. */
  double (*normal)(pf_rng* rng);
} pf_rng_api;

/* The stage's params, as written in the pipeline (values are text). */
typedef struct {
  size_t count;
  const char* const* keys;
  const char* const* values;
} pf_params;

typedef struct {
  /* As written in pipelines: custom { name: "..." }. Letters, digits, '_',
   * '.', '-'. */
  const char* name;
  const char* summary; /* one line, for `prepflow ops` */
  int random;          /* 1 if apply() draws from the rng */

  /* Parses and validates params; returns the op's state (never null on
   * success: return any non-null pointer if there is none), or null with a
   * message naming the bad param in error. */
  void* (*create)(const pf_params* params, char* error, size_t error_size);
  void (*destroy)(void* state);
  /* The output type for input type `in` (dims -1 where they vary); non-zero
   * with a message if the op cannot take `in`. Also called per sample with
   * the sample's actual dims, to size its output. */
  int (*output_type)(const void* state, const pf_type* in, pf_type* out, char* error,
                     size_t error_size);
  /* out->type is what output_type() said for in->type; out->data is
   * allocated. Non-zero with a message on failure (the sample fails, naming
   * the file; the job goes on or stops as --on-error says). */
  int (*apply)(const void* state, const pf_value* in, pf_value* out, pf_rng* rng,
               const pf_rng_api* rng_api, char* error, size_t error_size);
} pf_op;

typedef struct pf_registrar pf_registrar;
struct pf_registrar {
  int abi_version; /* PREPFLOW_PLUGIN_ABI_VERSION of the prepflow loading it */
  /* Registers an op (copied: `op` need not outlive the call, its strings
   * must live as long as the library). Non-zero if refused: a bad or
   * duplicate name, or a missing function. */
  int (*register_op)(pf_registrar* self, const pf_op* op);
  void* host; /* prepflow's */
};

/* Every plugin exports this; prepflow calls it once, after loading. Return
 * non-zero to refuse (e.g. registrar->abi_version is not the one built
 * for). */
typedef int (*pf_plugin_init_fn)(pf_registrar* registrar);
#define PREPFLOW_PLUGIN_INIT_SYMBOL "prepflow_plugin_init"

#ifdef __cplusplus
} /* extern "C" */

#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace prepflow::plugin {

// A C++ op: derive, give Create(const Params&) a static factory, and list the
// class in PREPFLOW_PLUGIN(...). Errors are exceptions (std::exception's
// what() becomes the message).
using Params = std::map<std::string, std::string>;

class Rng {
 public:
  Rng(pf_rng* rng, const pf_rng_api* api) : rng_(rng), api_(api) {}
  double Uniform() { return api_->uniform(rng_); }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  int64_t UniformInt(int64_t lo, int64_t hi) { return api_->uniform_int(rng_, lo, hi); }
  double Normal() { return api_->normal(rng_); }

 private:
  pf_rng* rng_;
  const pf_rng_api* api_;
};

// Params helpers: the value of `key` as a number, or `fallback` when absent.
inline double Number(const Params& p, const std::string& key, double fallback) {
  auto it = p.find(key);
  if (it == p.end()) return fallback;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != it->second.size() || it->second.empty()) {
    throw std::invalid_argument(key + ": expected a number, got '" + it->second + "'");
  }
  return v;
}

namespace detail {

inline void Message(const char* text, char* error, size_t size) {
  if (error != nullptr && size > 0) std::snprintf(error, size, "%s", text);
}

// T: static std::unique_ptr<T> Create(const Params&); pf_type OutputType(const
// pf_type&) const; void Apply(const pf_value& in, pf_value& out, Rng& rng) const.
template <typename T>
struct Adapter {
  static void* Create(const pf_params* p, char* error, size_t size) {
    try {
      Params params;
      for (size_t i = 0; i < p->count; ++i) params[p->keys[i]] = p->values[i];
      return T::Create(params).release();
    } catch (const std::exception& e) {
      Message(e.what(), error, size);
      return nullptr;
    }
  }
  static void Destroy(void* state) { delete static_cast<T*>(state); }
  static int OutputType(const void* state, const pf_type* in, pf_type* out, char* error,
                        size_t size) {
    try {
      *out = static_cast<const T*>(state)->OutputType(*in);
      return 0;
    } catch (const std::exception& e) {
      Message(e.what(), error, size);
      return 1;
    }
  }
  static int Apply(const void* state, const pf_value* in, pf_value* out, pf_rng* rng,
                   const pf_rng_api* api, char* error, size_t size) {
    try {
      Rng r(rng, api);
      static_cast<const T*>(state)->Apply(*in, *out, r);
      return 0;
    } catch (const std::exception& e) {
      Message(e.what(), error, size);
      return 1;
    }
  }
  static pf_op Describe() {
    return pf_op{T::kName, T::kSummary, T::kRandom ? 1 : 0, Create, Destroy, OutputType, Apply};
  }
};

template <typename... Ts>
int RegisterAll(pf_registrar* r) {
  if (r->abi_version != PREPFLOW_PLUGIN_ABI_VERSION) return 1;
  const pf_op ops[] = {Adapter<Ts>::Describe()...};
  for (const pf_op& op : ops) {
    if (r->register_op(r, &op) != 0) return 1;
  }
  return 0;
}

}  // namespace detail
}  // namespace prepflow::plugin

// Defines the plugin's entry point, registering each op class listed. Each
// class has static constexpr const char kName[], kSummary[] and bool kRandom.
#define PREPFLOW_PLUGIN(...)                                                  \
  extern "C" __attribute__((visibility("default"))) int prepflow_plugin_init( \
      pf_registrar* registrar) {                                              \
    return ::prepflow::plugin::detail::RegisterAll<__VA_ARGS__>(registrar);   \
  }

#endif /* __cplusplus */

#endif /* PREPFLOW_PLUGIN_API_H_ */
