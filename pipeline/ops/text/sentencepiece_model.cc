#include "pipeline/ops/text/sentencepiece_model.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "pipeline/ops/text/sentencepiece_library.h"
#include "pipeline/ops/text/sentencepiece_unigram.h"
#include "proto/sentencepiece_model.pb.h"

namespace prepflow::text {

SentencePieceModel::SentencePieceModel() = default;
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(std::string_view bytes,
                                                             std::string* error, Engine engine) {
  spm::ModelProto proto;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    *error = "is not a SentencePiece model (not a ModelProto message)";
    return nullptr;
  }
  auto model = std::unique_ptr<SentencePieceModel>(new SentencePieceModel);
  if (engine == Engine::kAuto && proto.trainer_spec().model_type() == spm::TrainerSpec::UNIGRAM) {
    absl::StatusOr<std::unique_ptr<SentencePieceUnigram>> unigram =
        SentencePieceUnigram::Load(proto);
    if (!unigram.ok()) {
      *error = absl::StrCat("is not a SentencePiece model (", unigram.status().message(), ")");
      return nullptr;
    }
    model->unigram_ = *std::move(unigram);
    return model;
  }
  model->library_ = SentencePieceLibrary::Load(bytes, error);
  if (model->library_ == nullptr) {
    *error = absl::StrCat("is a SentencePiece ",
                          spm::TrainerSpec::ModelType_Name(proto.trainer_spec().model_type()),
                          " model, which libsentencepiece encodes: ", *error);
    return nullptr;
  }
  return model;
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int32_t>* ids,
                                std::string* error) const {
  if (unigram_ != nullptr) {
    unigram_->Encode(text, ids);
    return true;
  }
  return library_->Encode(text, ids, error);
}

int32_t SentencePieceModel::bos_id() const {
  return unigram_ != nullptr ? unigram_->bos_id() : library_->bos_id();
}

int32_t SentencePieceModel::eos_id() const {
  return unigram_ != nullptr ? unigram_->eos_id() : library_->eos_id();
}

}  // namespace prepflow::text
