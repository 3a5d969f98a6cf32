// libzs_spm.so: Debian's libsentencepiece behind a C interface, loaded by
// sentencepiece_tokenizer.cpp with dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Why: libsentencepiece.so.0
// bundles its own protobuf-lite and exports its symbols; in a process that also has libtorch (and
// so libprotobuf.so.32) the two protobuf copies bind to each other's functions and the process
// crashes while loading (seen: a SIGSEGV in libprotobuf's static initializers calling
// libsentencepiece's MergeFromImpl). Loaded privately, each copy binds to itself.
#include <sentencepiece_processor.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(char* err, size_t len, const std::string& text) {
  if (err == nullptr || len == 0) return;
  std::strncpy(err, text.c_str(), len - 1);
  err[len - 1] = '\0';
}

}  // namespace

extern "C" {

using zs_spm_int_sink = void (*)(void* ctx, const int* ids, size_t n);
using zs_spm_text_sink = void (*)(void* ctx, const char* text, size_t n);

__attribute__((visibility("default"))) void* zs_spm_load(const char* path, char* err, size_t err_len) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    set_error(err, err_len, status.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void zs_spm_free(void* h) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(h);
}

__attribute__((visibility("default"))) int zs_spm_piece_to_id(void* h, const char* piece) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h)->PieceToId(piece);
}

__attribute__((visibility("default"))) int zs_spm_unk_id(void* h) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h)->unk_id();
}

__attribute__((visibility("default"))) int zs_spm_piece_size(void* h) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h)->GetPieceSize();
}

__attribute__((visibility("default"))) int zs_spm_id_to_piece(void* h, int id, zs_spm_text_sink sink, void* ctx) {
  const std::string p = static_cast<sentencepiece::SentencePieceProcessor*>(h)->IdToPiece(id);
  sink(ctx, p.data(), p.size());
  return 1;
}

__attribute__((visibility("default"))) int zs_spm_encode(void* h, const char* text, size_t len, zs_spm_int_sink sink,
                                                          void* ctx, char* err, size_t err_len) {
  std::vector<int> ids;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Encode(std::string(text, len), &ids);
  if (!status.ok()) {
    set_error(err, err_len, status.ToString());
    return 0;
  }
  sink(ctx, ids.data(), ids.size());
  return 1;
}

__attribute__((visibility("default"))) int zs_spm_decode(void* h, const int* ids, size_t n, zs_spm_text_sink sink,
                                                          void* ctx, char* err, size_t err_len) {
  std::string out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Decode(std::vector<int>(ids, ids + n), &out);
  if (!status.ok()) {
    set_error(err, err_len, status.ToString());
    return 0;
  }
  sink(ctx, out.data(), out.size());
  return 1;
}

}  // extern "C"
