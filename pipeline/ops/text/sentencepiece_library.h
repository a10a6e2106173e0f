// A SentencePiece model in libsentencepiece (loaded at run time: see the
// .cc): the encoder of models sentencepiece_unigram.h does not encode (BPE,
// word, char), and the reference its native encoder is tested against.
// Behind an interface of standard types only: Debian's Abseil has its own
// absl::string_view class, which SentencePiece's header collides with, so
// this is the one translation unit that includes it (and no Abseil header).
//
// Thread-safety: a loaded model is immutable; Encode may be called
// concurrently (SentencePieceProcessor::Encode is const and keeps no state).
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_LIBRARY_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_LIBRARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace prepflow::text {

class SentencePieceLibrary {
 public:
  // The model from a .model file's bytes; null with `*error` set when they
  // are not one, or the library cannot be loaded here (sanitizer builds).
  static std::unique_ptr<SentencePieceLibrary> Load(std::string_view bytes, std::string* error);
  ~SentencePieceLibrary();

  // Appends the ids of `text` (encode(text) of python3-sentencepiece, no
  // sampling); false with `*error` set when the library refuses it.
  bool Encode(std::string_view text, std::vector<int32_t>* ids, std::string* error) const;
  // The model's BOS and EOS ids; -1 where it has none.
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  SentencePieceLibrary();
  sentencepiece::SentencePieceProcessor* sp_ = nullptr;  // owned
};

}  // namespace prepflow::text

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_LIBRARY_H_
