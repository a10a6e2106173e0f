// tokenize: a caption or document to int32 token ids, with SentencePiece
// (sentencepiece_model.h: the library python3-sentencepiece wraps) or
// byte-level BPE (bpe.h). The model is read and checked when the pipeline
// is built (Op::Open); a text that cannot be tokenized fails its sample.
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "pipeline/ops/text/bpe.h"
#include "pipeline/ops/text/sentencepiece_model.h"
#include "pipeline/ops/text/text_family.h"
#include "pipeline/ops/text/unicode_text.h"

namespace prepflow {
namespace {

using proto::Stage;
using proto::Tokenize;

constexpr int kMaxJsonDepth = 64;
constexpr int32_t kMaxContextLength = 1 << 20;

// The string under one top-level key of a JSON object, read as a stream
// (nothing built but the strings), nested at most kMaxJsonDepth deep; a key
// given twice is its last value's, as json.loads keeps.
class CaptionReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit CaptionReader(const std::string& key) : key_(key) {}
  std::string error;
  std::string value;
  bool found = false;

  bool start_object(std::size_t) override { return Open(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_object() override { return --depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool key(string_t& k) override {
    at_key_ = depth_ == 1 && k == key_;
    return true;
  }
  bool string(string_t& s) override {
    if (Taking()) value = std::move(s), found = true;
    return true;
  }
  bool null() override { return Other("null"); }
  bool boolean(bool) override { return Other("a boolean"); }
  bool number_integer(number_integer_t) override { return Other("a number"); }
  bool number_unsigned(number_unsigned_t) override { return Other("a number"); }
  bool number_float(number_float_t, const string_t&) override { return Other("a number"); }
  bool binary(binary_t&) override { return Other("binary data"); }
  bool parse_error(std::size_t at, const std::string&,
                   const nlohmann::detail::exception& e) override {
    if (error.empty()) error = absl::StrCat("not JSON at byte ", at, " (", e.what(), ")");
    return false;
  }

 private:
  bool Open() {
    if (Taking()) return Fail("an object or array");
    if (++depth_ > kMaxJsonDepth) {
      error = absl::StrCat("nested deeper than ", kMaxJsonDepth, " levels");
      return false;
    }
    return true;
  }
  bool Taking() {
    const bool taking = at_key_ && depth_ == 1;
    at_key_ = false;
    return taking;
  }
  bool Other(const char* what) { return !Taking() || Fail(what); }
  bool Fail(const char* what) {
    error = absl::StrCat("json_key '", key_, "' is ", what, ", not a string");
    return false;
  }
  const std::string& key_;
  int depth_ = 0;
  bool at_key_ = false;
};

class TokenizeOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const Tokenize& p = stage.tokenize();
    if (absl::Status s = Check(p); !s.ok()) return s;
    return std::unique_ptr<Op>(new TokenizeOp(p));
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (in.kind != ValueKind::kEncoded) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expects a text (a record's .txt or .json member) but gets ", in.DebugString()));
    }
    return ValueType{ValueKind::kTokens, {p_.pad() ? p_.context_length() : -1}};
  }

  absl::Status Open(const OpEnvironment& env) override;
  absl::Status Apply(const StageContext& ctx, Sample& s) const override;

 private:
  explicit TokenizeOp(Tokenize p) : p_(std::move(p)) {}
  static absl::Status Check(const Tokenize& p);
  absl::StatusOr<std::string> Read(const OpEnvironment& env, const std::string& path,
                                   const char* field) const;
  absl::Status OpenBpe(const OpEnvironment& env);
  absl::Status OpenSentencePiece(const OpEnvironment& env);
  absl::StatusOr<absl::string_view> Text(const Sample& s, std::string* scratch) const;
  absl::Status Ids(absl::string_view text, std::vector<int32_t>* ids) const;
  // Makes the `n` ids at `out` the sample's value.
  static void SetTokens(Sample& s, int32_t* out, size_t n);

  const Tokenize p_;
  std::unique_ptr<text::BpeTokenizer> bpe_;
  std::unique_ptr<text::SentencePieceModel> sp_;
  int32_t bos_ = -1, eos_ = -1;
};

absl::Status TokenizeOp::Check(const Tokenize& p) {
  const auto bad = [](const std::string& m) { return absl::InvalidArgumentError(m); };
  switch (p.kind()) {
    case Tokenize::KIND_SENTENCEPIECE:
      if (p.model().empty()) return bad("model: name the SentencePiece .model file");
      if (!p.vocab().empty() || !p.merges().empty()) {
        return bad("vocab, merges: a SentencePiece model is one file (model)");
      }
      break;
    case Tokenize::KIND_BPE:
      if (p.vocab().empty() || p.merges().empty()) {
        return bad("vocab, merges: BPE needs vocab.json and merges.txt");
      }
      break;
    case Tokenize::KIND_CLIP:
      if (p.merges().empty()) return bad("merges: name CLIP's merges (bpe_simple_vocab)");
      if (!p.vocab().empty()) return bad("vocab: CLIP's vocabulary follows from its merges");
      break;
    default:
      return bad("kind: KIND_SENTENCEPIECE, KIND_BPE or KIND_CLIP");
  }
  if (p.kind() != Tokenize::KIND_SENTENCEPIECE && !p.model().empty()) {
    return bad("model: only for KIND_SENTENCEPIECE (BPE reads vocab and merges)");
  }
  if (p.context_length() < 0 || p.context_length() > kMaxContextLength) {
    return bad(absl::StrCat("context_length: 0 (no limit) to ", kMaxContextLength));
  }
  if (p.pad() && p.context_length() == 0) return bad("pad: needs a context_length to pad to");
  if (p.context_length() > 0 && p.context_length() < int{p.add_bos()} + int{p.add_eos()}) {
    return bad("context_length: too short for BOS and EOS");
  }
  if (p.has_max_text_bytes() && p.max_text_bytes() <= 0) return bad("max_text_bytes: must be > 0");
  if (p.has_max_model_bytes() && p.max_model_bytes() <= 0) {
    return bad("max_model_bytes: must be > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TokenizeOp::Read(const OpEnvironment& env, const std::string& path,
                                             const char* field) const {
  int64_t limit = p_.has_max_model_bytes() ? p_.max_model_bytes() : int64_t{64} << 20;
  const char* limit_name = "max_model_bytes";
  // A worker holds a job's model within its share of memory, whatever the
  // job asks (as add_noise's set).
  if (env.max_data_bytes > 0 && env.max_data_bytes < limit) {
    limit = env.max_data_bytes;
    limit_name = "this worker's limit for an op's data (a quarter of its --max-memory-bytes)";
  }
  absl::StatusOr<std::string> bytes = env.read_file(path, limit);
  if (!bytes.ok()) {
    const bool over = bytes.status().code() == absl::StatusCode::kResourceExhausted;
    return absl::Status(bytes.status().code(),
                        absl::StrCat(field, ": ", bytes.status().message(),
                                     over ? absl::StrCat(" (", limit_name, ")") : ""));
  }
  return bytes;
}

absl::Status TokenizeOp::Open(const OpEnvironment& env) {
  if (!env.read_file) {
    return absl::FailedPreconditionError(
        "tokenize: its model cannot be read here (no file access)");
  }
  if (p_.kind() == Tokenize::KIND_SENTENCEPIECE) return OpenSentencePiece(env);
  return OpenBpe(env);
}

absl::Status TokenizeOp::OpenBpe(const OpEnvironment& env) {
  std::string vocab;
  if (p_.kind() == Tokenize::KIND_BPE) {
    absl::StatusOr<std::string> v = Read(env, p_.vocab(), "vocab");
    if (!v.ok()) return v.status();
    vocab = *std::move(v);
  }
  absl::StatusOr<std::string> merges = Read(env, p_.merges(), "merges");
  if (!merges.ok()) return merges.status();
  const auto flavor =
      p_.kind() == Tokenize::KIND_CLIP ? text::BpeFlavor::kClip : text::BpeFlavor::kGpt2;
  auto bpe = text::BpeTokenizer::Load(flavor, {vocab, p_.vocab(), *merges, p_.merges()});
  if (!bpe.ok()) return bpe.status();
  bpe_ = *std::move(bpe);
  if (flavor == text::BpeFlavor::kClip) {
    bos_ = bpe_->clip_start();
    eos_ = bpe_->clip_end();
    return absl::OkStatus();
  }
  const auto token = [](const std::string& t) { return t.empty() ? "<|endoftext|>" : t; };
  bos_ = bpe_->Id(token(p_.bos_token()));
  eos_ = bpe_->Id(token(p_.eos_token()));
  if (p_.add_bos() && bos_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bos_token: ", p_.vocab(), " has no token '", token(p_.bos_token()), "'"));
  }
  if (p_.add_eos() && eos_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_token: ", p_.vocab(), " has no token '", token(p_.eos_token()), "'"));
  }
  return absl::OkStatus();
}

absl::Status TokenizeOp::OpenSentencePiece(const OpEnvironment& env) {
  absl::StatusOr<std::string> model = Read(env, p_.model(), "model");
  if (!model.ok()) return model.status();
  std::string error;
  sp_ = text::SentencePieceModel::Load(*model, &error);
  if (sp_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", p_.model(), " ", error));
  }
  bos_ = sp_->bos_id();
  eos_ = sp_->eos_id();
  if ((p_.add_bos() && bos_ < 0) || (p_.add_eos() && eos_ < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(p_.add_bos() && bos_ < 0 ? "add_bos" : "add_eos", ": ", p_.model(), " has no ",
                     p_.add_bos() && bos_ < 0 ? "BOS" : "EOS", " piece (its id is -1)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::string_view> TokenizeOp::Text(const Sample& s, std::string* scratch) const {
  absl::string_view text(reinterpret_cast<const char*>(s.data), s.size);
  if (!p_.json_key().empty()) {
    CaptionReader reader(p_.json_key());
    const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
    if (!ok || !reader.error.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenize: json_key: ", reader.error.empty() ? "not JSON" : reader.error));
    }
    if (!reader.found) {
      return absl::NotFoundError(
          absl::StrCat("tokenize: json_key: the JSON has no key '", p_.json_key(), "'"));
    }
    *scratch = std::move(reader.value);
    text = *scratch;
  }
  const int64_t limit = p_.has_max_text_bytes() ? p_.max_text_bytes() : int64_t{1} << 20;
  if (static_cast<int64_t>(text.size()) > limit) {
    return absl::ResourceExhaustedError(absl::StrCat("tokenize: the text has ", text.size(),
                                                     " bytes, over max_text_bytes ", limit));
  }
  if (const int64_t bad = text::InvalidUtf8At(text); bad >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenize: the text is not UTF-8 (at byte ", bad, ")"));
  }
  return text;
}

absl::Status TokenizeOp::Ids(absl::string_view text, std::vector<int32_t>* ids) const {
  if (p_.add_bos()) ids->push_back(bos_);
  if (bpe_ != nullptr) {
    bpe_->Encode(text, ids);
  } else {
    std::string error;
    if (!sp_->Encode(std::string_view(text.data(), text.size()), ids, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenize: ", error));
    }
  }
  if (p_.add_eos()) ids->push_back(eos_);
  // Cut to the context, the last id EOS again where EOS is added (CLIP's
  // truncate=True).
  if (const size_t context = p_.context_length(); context > 0 && ids->size() > context) {
    ids->resize(context);
    if (p_.add_eos()) ids->back() = eos_;
  }
  return absl::OkStatus();
}

absl::Status TokenizeOp::Apply(const StageContext& ctx, Sample& s) const {
  std::string scratch;
  absl::StatusOr<absl::string_view> text = Text(s, &scratch);
  if (!text.ok()) return text.status();
  // Reused per thread: no allocation per sample once grown (a hostile
  // text's ids are not kept).
  thread_local std::vector<int32_t> ids;
  ids.clear();
  absl::Status st = Ids(*text, &ids);
  const size_t n = p_.pad() ? static_cast<size_t>(p_.context_length()) : ids.size();
  if (st.ok()) {
    auto* out = reinterpret_cast<int32_t*>(ctx.Output(s.data, std::max<size_t>(n, 1) * 4));
    std::copy(ids.begin(), ids.end(), out);
    std::fill(out + ids.size(), out + n, p_.pad_id());
    SetTokens(s, out, n);
  }
  if (ids.capacity() > (size_t{1} << 16)) ids = {};
  return st;
}

void TokenizeOp::SetTokens(Sample& s, int32_t* out, size_t n) {
  s.kind = ValueKind::kTokens;
  s.data = reinterpret_cast<uint8_t*>(out);
  s.size = n * sizeof(int32_t);
  s.shape = {static_cast<int64_t>(n)};
  s.view = ImageView();
  s.sample_rate = 0;
}

}  // namespace

void RegisterTextOps(OpRegistry* registry) {
  registry->Register(Stage::kTokenize, FactoryOf<TokenizeOp>());
}

}  // namespace prepflow
