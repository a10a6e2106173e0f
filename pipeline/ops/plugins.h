// Plugin ops: shared libraries written against pipeline/ops/plugin_api.h, loaded
// with --plugin FILE and named in pipelines as `custom { name: "..." }`.
//
// A loaded plugin stays loaded for the life of the process (ops built from it
// may be running anywhere). The ops it registers are process-wide: every
// OpRegistry builds `custom` stages from them.
//
// Thread-safety: every function may be called from any thread.
#ifndef PREPFLOW_PIPELINE_OPS_PLUGINS_H_
#define PREPFLOW_PIPELINE_OPS_PLUGINS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline/core/op.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

// Loads the plugin at `path` and registers its ops. Loading the same file
// again does nothing. Errors name the file: NotFound (no such file),
// InvalidArgument (not a loadable library, no prepflow_plugin_init, another
// ABI version, an op refused, an op name another plugin has).
absl::Status LoadPlugin(const std::string& path);

// Loads each of `paths` in turn; the first error, naming its flag.
absl::Status LoadPlugins(const std::vector<std::string>& paths);

struct PluginOpInfo {
  std::string name;
  std::string summary;
  std::string file;  // the plugin it came from
  bool random = false;
};

// The plugin ops loaded in this process, by name.
std::vector<PluginOpInfo> LoadedPluginOps();
bool PluginOpLoaded(absl::string_view name);

// The op of a `custom` stage: InvalidArgument when no loaded plugin has it
// (listing those that are) or its params are refused (the plugin's message).
absl::StatusOr<std::unique_ptr<Op>> CreatePluginOp(const proto::Custom& stage);

// The first stage of `spec` whose op no loaded plugin provides, with why in
// `*why`; -1 when every op is available here.
int FirstMissingOp(const proto::PipelineSpec& spec, std::string* why);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_PLUGINS_H_
