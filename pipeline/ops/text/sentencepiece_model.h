// A SentencePiece model: unigram models (T5, mT5, ALBERT, XLNet and what
// spm_train makes by default) are encoded natively (sentencepiece_unigram.h),
// the other kinds (BPE, as Llama's; word; char) by libsentencepiece
// (sentencepiece_library.h), which sanitizer builds cannot load.
//
// Thread-safety: a loaded model is immutable; Encode may be called
// concurrently.
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_MODEL_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace prepflow::text {

class SentencePieceLibrary;
class SentencePieceUnigram;

class SentencePieceModel {
 public:
  enum class Engine {
    kAuto,     // native for unigram models, the library for the rest
    kLibrary,  // the library for every model (the reference in tests)
  };
  // The model from a .model file's bytes; null with `*error` set (a phrase
  // that follows the file's name) when they are not one, or its kind needs
  // the library and it cannot be loaded or refuses it.
  static std::unique_ptr<SentencePieceModel> Load(std::string_view bytes, std::string* error,
                                                  Engine engine = Engine::kAuto);
  ~SentencePieceModel();

  // Appends the ids of `text` (encode(text) of python3-sentencepiece, no
  // sampling); false with `*error` set when the library refuses it.
  bool Encode(std::string_view text, std::vector<int32_t>* ids, std::string* error) const;
  // The model's BOS and EOS ids; -1 where it has none.
  int32_t bos_id() const;
  int32_t eos_id() const;
  // Whether prepflow's own encoder runs it.
  bool native() const { return unigram_ != nullptr; }

 private:
  SentencePieceModel();
  std::unique_ptr<SentencePieceUnigram> unigram_;
  std::unique_ptr<SentencePieceLibrary> library_;
};

}  // namespace prepflow::text

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_MODEL_H_
