// `prepflow ops`.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/text.h"
#include "client/cli/commands.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/op_schema.h"
#include "pipeline/ops/plugins.h"

namespace prepflow::cli {

namespace {

Json OpsJson() {
  Json ops = Json::array();
  for (const OpSchema& op : OpSchemas()) {
    Json fields = Json::array();
    for (const FieldSchema& f : op.fields) {
      fields.push_back(Json{{"name", f.name},
                            {"type", f.type},
                            {"default", f.default_value},
                            {"summary", f.summary},
                            {"choices", f.choices}});
    }
    ops.push_back(Json{{"name", op.name},
                       {"summary", op.summary},
                       {"torchvision", op.torchvision},
                       {"random", op.random},
                       {"input", op.input},
                       {"output", op.output},
                       {"parity", op.parity},
                       {"fields", std::move(fields)}});
  }
  Json plugin_ops = Json::array();
  for (const PluginOpInfo& op : LoadedPluginOps()) {
    plugin_ops.push_back(Json{{"name", op.name},
                              {"summary", SafeText(op.summary)},
                              {"random", op.random},
                              {"plugin", SafeText(op.file)}});
  }
  return Json{{"command", "ops"}, {"ops", std::move(ops)}, {"plugin_ops", std::move(plugin_ops)}};
}

// The loaded plugins' ops, as `prepflow ops` lists them after the built-in ones.
std::string PluginOpsText() {
  const std::vector<PluginOpInfo> ops = LoadedPluginOps();
  if (ops.empty()) return "";
  std::string out =
      "\nplugin ops (stages { custom { name: \"...\" params { key: ... value: ... } } }):\n";
  for (const PluginOpInfo& op : ops) {
    absl::StrAppend(&out, "\n", op.name, op.random ? "  (random)" : "", "  from ",
                    SafeText(op.file), "\n    ", SafeText(op.summary), "\n");
  }
  return out;
}

}  // namespace

int OpsCommand(Console& console, int argc, char** argv) {
  bool markdown = false, json = false;
  FlagSet flags("prepflow ops",
                "Lists every op a pipeline may use, with its fields, their defaults and docs, and "
                "what it matches in torchvision.");
  std::string plugins;
  flags.Bool("markdown", &markdown, "print docs/ops.md instead");
  flags.Bool("json", &json, "print one JSON object instead");
  flags.String("plugin", &plugins, "also list these plugins' ops (FILE[,FILE...])");
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (absl::Status s = LoadPluginFlag(plugins); !s.ok()) return console.Failure("ops", s);
  if (json) {
    console.PrintJson(OpsJson());
  } else {
    std::fputs((markdown ? OpsMarkdown() : OpsText()).c_str(), stdout);
    if (!markdown) std::fputs(PluginOpsText().c_str(), stdout);
  }
  return kOk;
}

}  // namespace prepflow::cli
