// libsentencepiece is loaded here at run time, not linked: Debian's build
// bundles its own copy of protobuf-lite and exports its symbols, which in a
// process that also has libprotobuf interpose on libprotobuf's own calls
// (every binary crashed at start when it was linked). Loaded with
// RTLD_LOCAL | RTLD_DEEPBIND, it binds to its own copy and nothing sees it.
// Its C++ API is called through its virtual functions (vtable calls need no
// symbols) and the three out-of-line functions looked up by name below.
// The sanitizers refuse RTLD_DEEPBIND, so sanitizer builds go without.
#include "pipeline/ops/text/sentencepiece_library.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <new>

namespace prepflow::text {
namespace {

using sentencepiece::SentencePieceProcessor;
using sentencepiece::util::Status;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

struct Library {
  void (*construct)(void* self) = nullptr;                   // SentencePieceProcessor()
  void (*destroy_status)(Status* self) = nullptr;            // Status::~Status()
  std::string (*status_text)(const Status* self) = nullptr;  // Status::ToString()
  std::string error;                                         // why it is not loaded
};

Library Load() {
  Library lib;
  if (kSanitized) {
    lib.error =
        "SentencePiece is not available in sanitizer builds (libsentencepiece is loaded with "
        "RTLD_DEEPBIND, which the sanitizers refuse)";
    return lib;
  }
  void* handle = dlopen("libsentencepiece.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) {
    lib.error = std::string("libsentencepiece.so.0 cannot be loaded (") + dlerror() +
                "); install Debian's libsentencepiece0";
    return lib;
  }
  lib.construct = reinterpret_cast<void (*)(void*)>(
      dlsym(handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev"));
  lib.destroy_status =
      reinterpret_cast<void (*)(Status*)>(dlsym(handle, "_ZN13sentencepiece4util6StatusD1Ev"));
  lib.status_text = reinterpret_cast<std::string (*)(const Status*)>(
      dlsym(handle, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev"));
  if (lib.construct == nullptr || lib.destroy_status == nullptr || lib.status_text == nullptr) {
    lib.error = "libsentencepiece.so.0 lacks the functions this build expects (another version?)";
  }
  return lib;
}

const Library& Lib() {
  static const Library* lib = new Library(Load());
  return *lib;
}

// A Status returned by value, held without the compiler destroying it (its
// destructor is the library's): ok() is inline, the rest is looked up.
class HeldStatus {
 public:
  template <typename F>
  explicit HeldStatus(F&& call) {
    status_ = new (storage_) Status(call());
  }
  ~HeldStatus() { Lib().destroy_status(status_); }
  bool ok() const { return status_->ok(); }
  std::string text() const { return Lib().status_text(status_); }

 private:
  alignas(Status) unsigned char storage_[sizeof(Status)];
  Status* status_;
};

}  // namespace

SentencePieceLibrary::SentencePieceLibrary() = default;

SentencePieceLibrary::~SentencePieceLibrary() { delete sp_; }

std::unique_ptr<SentencePieceLibrary> SentencePieceLibrary::Load(std::string_view bytes,
                                                                 std::string* error) {
  if (!Lib().error.empty()) {
    *error = Lib().error;
    return nullptr;
  }
  auto model = std::unique_ptr<SentencePieceLibrary>(new SentencePieceLibrary);
  void* memory = ::operator new(sizeof(SentencePieceProcessor));
  Lib().construct(memory);
  model->sp_ = static_cast<SentencePieceProcessor*>(memory);
  const HeldStatus st([&] { return model->sp_->LoadFromSerializedProto(bytes); });
  if (!st.ok()) {
    *error = st.text();
    return nullptr;
  }
  return model;
}

bool SentencePieceLibrary::Encode(std::string_view text, std::vector<int32_t>* ids,
                                  std::string* error) const {
  std::vector<int> pieces;
  const HeldStatus st([&] { return sp_->Encode(text, &pieces); });
  if (!st.ok()) {
    *error = st.text();
    return false;
  }
  ids->insert(ids->end(), pieces.begin(), pieces.end());
  return true;
}

int32_t SentencePieceLibrary::bos_id() const { return sp_->bos_id(); }
int32_t SentencePieceLibrary::eos_id() const { return sp_->eos_id(); }

}  // namespace prepflow::text
