// Plugins that go wrong, for plugin_test: built once per PLUGIN_MODE.
//   no_init     exports no prepflow_plugin_init
//   refuses     its init returns non-zero (as for another ABI version)
//   duplicate   registers "cutout", which the example plugin also has
//   bad_output  an op whose output_type gives a 2-channel image
//   failing     an op whose apply fails with a message
#include <stdio.h>

#include "plugin_api.h"

#define MODE_no_init 1
#define MODE_refuses 2
#define MODE_duplicate 3
#define MODE_bad_output 4
#define MODE_failing 5
#define CAT(a, b) a##b
#define MODE(m) CAT(MODE_, m)

#if MODE(PLUGIN_MODE) == MODE_no_init
extern "C" int not_a_prepflow_plugin() { return 0; }
#else
namespace {
void* Create(const pf_params*, char*, size_t) {
  static int state;
  return &state;
}
void Destroy(void*) {}
int Same(const void*, const pf_type* in, pf_type* out, char*, size_t) {
  *out = *in;
#if MODE(PLUGIN_MODE) == MODE_bad_output
  out->dims[2] = 2;
#endif
  return 0;
}
int Apply(const void*, const pf_value*, pf_value*, pf_rng*, const pf_rng_api*, char* error,
          size_t size) {
  snprintf(error, size, "the sample is not to this op's taste");
  return 1;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int prepflow_plugin_init(pf_registrar* r) {
#if MODE(PLUGIN_MODE) == MODE_refuses
  (void)r;
  return 1;
#else
#if MODE(PLUGIN_MODE) == MODE_duplicate
  const char* name = "cutout";
#elif MODE(PLUGIN_MODE) == MODE_bad_output
  const char* name = "odd_shape";
#else
  const char* name = "picky";
#endif
  const pf_op op = {name, "a test op", 0, Create, Destroy, Same, Apply};
  return r->register_op(r, &op);
#endif
}
#endif
