#include "pipeline/ops/builtin_ops.h"

#include <string>
#include <vector>

#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/compose_ops.h"
#include "pipeline/ops/image/image_family.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/ops/text/text_family.h"
#include "pipeline/ops/video/video_family.h"

namespace prepflow {

const OpRegistry& BuiltinOps() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry;
    RegisterBuiltinOps(r);
    return r;
  }();
  return *registry;
}

void RegisterBuiltinOps(OpRegistry* registry) {
  RegisterImageOps(registry);
  RegisterComposeOps(registry);
  RegisterAudioOps(registry);
  RegisterVideoOps(registry);
  RegisterTextOps(registry);
  // Ops of plugins (--plugin), looked up by name when a stage is built.
  registry->Register(proto::Stage::kCustom,
                     [](const proto::Stage& stage) { return CreatePluginOp(stage.custom()); });
}

std::vector<std::string*> MutableDataPaths(proto::Stage* stage) {
  std::vector<std::string*> paths;
  if (stage->has_add_noise()) paths.push_back(stage->mutable_add_noise()->mutable_path());
  if (auto* inner = MutableInnerStages(stage); inner != nullptr) {
    for (proto::Stage& s : *inner) {
      for (std::string* p : MutableDataPaths(&s)) paths.push_back(p);
    }
  }
  return paths;
}

std::vector<std::string*> MutableFilePaths(proto::Stage* stage) {
  std::vector<std::string*> paths;
  if (stage->has_tokenize()) {
    proto::Tokenize* t = stage->mutable_tokenize();
    for (std::string* p : {t->mutable_model(), t->mutable_vocab(), t->mutable_merges()}) {
      if (!p->empty()) paths.push_back(p);
    }
  }
  if (auto* inner = MutableInnerStages(stage); inner != nullptr) {
    for (proto::Stage& s : *inner) {
      for (std::string* p : MutableFilePaths(&s)) paths.push_back(p);
    }
  }
  return paths;
}

std::vector<std::string> FilePaths(const proto::Stage& stage) {
  proto::Stage copy = stage;
  std::vector<std::string> paths;
  for (std::string* p : MutableFilePaths(&copy)) paths.push_back(*p);
  return paths;
}

std::vector<std::string> DataPaths(const proto::Stage& stage) {
  proto::Stage copy = stage;
  std::vector<std::string> paths;
  for (std::string* p : MutableDataPaths(&copy)) paths.push_back(*p);
  return paths;
}

}  // namespace prepflow
