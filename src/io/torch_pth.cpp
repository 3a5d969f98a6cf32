#include "io/torch_pth.h"

#include "io/safetensors.h"

#include "io/file.h"
#include "io/mapped_file.h"
#include "zeroshard/nn/deferred.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>

namespace zeroshard::io {

bool is_torch_save_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0;  // a zip archive's first local header
}

namespace {

class TorchPthSource : public ParamSource {
 public:
  explicit TorchPthSource(const std::string& path) : path_(path) {
    if (!is_torch_save_file(path)) {
      throw std::runtime_error(path + ": not a torch.save zip archive (files from PyTorch >= 1.6 are; re-save an "
                               "older one with torch.save(torch.load(f), f), or convert it to safetensors)");
    }
    file_ = std::make_shared<MappedFile>(path);
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (!reader.hasRecord("data.pkl")) throw std::runtime_error(path + ": a zip archive without data.pkl (not torch.save)");
    auto [pickle, pickle_size] = reader.getRecord("data.pkl");
    size_t pos = 0;
    auto read_pickle = [&, data = static_cast<const char*>(pickle.get())](char* out, size_t n) {
      const size_t take = std::min(n, pickle_size - pos);
      std::memcpy(out, data + pos, take);
      pos += take;
      return take;
    };
    std::shared_ptr<MappedFile> keep = file_;
    auto read_record = [&reader, keep, this](const std::string& key) {
      const std::string name = "data/" + key;
      if (!reader.hasRecord(name)) throw std::runtime_error(path_ + ": the pickle names storage '" + key + "', which the archive lacks");
      const size_t offset = reader.getRecordOffset(name);
      if (offset > keep->size()) throw std::runtime_error(path_ + ": storage '" + key + "' lies past the end of the file");
      // A view on the mapping (no deleter): the tensors live no longer than this source.
      return at::DataPtr(const_cast<char*>(keep->data()) + offset, at::Device(at::kCPU));
    };
    auto no_classes = [this](const c10::QualifiedName& name) -> c10::StrongTypePtr {
      throw std::runtime_error(path_ + ": holds an object of class " + name.qualifiedName() +
                               "; only a state dict (names to tensors) loads");
    };
    torch::jit::Unpickler unpickler(read_pickle, no_classes, nullptr, read_record, c10::nullopt);
    unpickler.set_version(reader.version());
    c10::IValue root;
    try {
      root = unpickler.parse_ivalue();
    } catch (const c10::Error& e) {
      throw std::runtime_error(path_ + ": its pickle cannot be read as a state dict (libtorch's unpickler: " +
                               e.what_without_backtrace() + "); only a dict of names to tensors loads");
    }
    if (!root.isGenericDict()) {
      throw std::runtime_error(path_ + ": holds a " + root.tagKind() + ", not a state dict (names to tensors)");
    }
    for (const auto& item : root.toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor()) {
        throw std::runtime_error(path_ + ": the state dict has an entry that is not name -> tensor (" +
                                 item.key().tagKind() + " -> " + item.value().tagKind() + ")");
      }
      tensors_[item.key().toStringRef()] = item.value().toTensor();
    }
  }

  void check(const std::vector<ParamInfo>& params) override {
    std::map<std::string, bool> wanted;
    for (const auto& p : params) {
      wanted[p.name] = true;
      auto it = tensors_.find(p.name);
      if (it == tensors_.end()) {
        throw std::runtime_error(path_ + ": has no tensor '" + p.name + "' (the model's parameter, shape " +
                                 shape_text(p.shape) + "); it holds " + std::to_string(tensors_.size()) + " tensors" +
                                 (tensors_.empty() ? "" : ", e.g. '" + tensors_.begin()->first + "'"));
      }
      const at::Tensor& t = it->second;
      if (t.sizes().vec() != p.shape) {
        throw std::runtime_error(path_ + ": tensor '" + p.name + "' has shape " + shape_text(t.sizes().vec()) +
                                 " but the model expects " + shape_text(p.shape));
      }
      if (!at::isFloatingType(t.scalar_type())) {
        throw std::runtime_error(path_ + ": tensor '" + p.name + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
                                 "; parameters load from float32, bfloat16, float16 or float64");
      }
    }
    for (const auto& [name, t] : tensors_) {
      if (!wanted.count(name)) {
        throw std::runtime_error(path_ + ": tensor '" + name +
                                 "' is not a parameter of this model (wrong model config, or a file for another model)");
      }
    }
  }

  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    auto it = tensors_.find(param.name);
    if (it == tensors_.end()) throw std::runtime_error(path_ + ": has no tensor '" + param.name + "'");
    // reshape is a view for the contiguous tensors a state dict holds; narrow touches only the
    // range's pages of the mapping; the copy widens bf16 / f16 exactly.
    out.copy_(it->second.reshape({-1}).narrow(0, begin, end - begin));
  }

  ParamLocation locate(const ParamInfo& param) const override {
    auto it = tensors_.find(param.name);
    if (it == tensors_.end()) return {};
    const at::Tensor& t = it->second;
    ParamLocation l;
    l.file = path_;
    l.whole = t.is_contiguous();
    l.offset = static_cast<uint64_t>(static_cast<const char*>(t.data_ptr()) - file_->data());
    l.dtype = t.scalar_type();
    return l;
  }

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, at::Tensor> tensors_;
};

}  // namespace

std::shared_ptr<ParamSource> torch_pth_param_source(const std::string& path) {
  return std::make_shared<TorchPthSource>(path);
}

std::shared_ptr<ParamSource> checkpoint_param_source(const std::string& path) {
  return is_torch_save_file(path) ? torch_pth_param_source(path) : safetensors_param_source(path);
}

uint64_t write_torch_save(const std::string& path, const std::vector<std::vector<TensorEntry>>& groups,
                          const std::function<std::vector<at::Tensor>(size_t group)>& values) {
  AtomicFileWriter file(path);
  // libtorch's zip writer (the one torch.save uses) into our atomic file. Its callback never
  // throws: the zip writer may finish the archive in its destructor, where an exception would end
  // the process. The first failed write is kept (later bytes are dropped) and thrown below; the
  // temporary file is then removed, never committed.
  std::string write_error;
  caffe2::serialize::PyTorchStreamWriter zip([&file, &write_error](const void* data, size_t n) -> size_t {
    if (write_error.empty()) {
      try {
        file.write(data, n);
      } catch (const std::exception& e) {
        write_error = e.what();
      }
    }
    return n;
  });
  c10::impl::GenericDict state(c10::StringType::get(), c10::TensorType::get());
  std::map<const void*, std::string> key_of;  // a stand-in tensor's storage -> its record's key
  size_t next = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<at::Tensor> vs = values(g);
    if (vs.size() != groups[g].size()) {
      throw std::logic_error(path + ": group " + std::to_string(g) + " produced " + std::to_string(vs.size()) +
                             " tensors for " + std::to_string(groups[g].size()) + " entries");
    }
    for (size_t i = 0; i < vs.size(); ++i) {
      const TensorEntry& e = groups[g][i];
      if (vs[i].sizes().vec() != e.shape) {
        throw std::logic_error(path + ": tensor '" + e.name + "' produced with shape " + shape_text(vs[i].sizes().vec()) +
                               ", its entry says " + shape_text(e.shape));
      }
      const at::Tensor v = vs[i].to(e.dtype).contiguous();
      const std::string key = std::to_string(next++);
      zip.writeRecord("data/" + key, v.data_ptr(), v.nbytes());
      // The pickle needs only each tensor's dtype, shape and storage key.
      at::Tensor stand_in = nn::deferred_empty(e.shape, e.dtype);
      key_of[stand_in.storage().unsafeGetStorageImpl()] = key;
      state.insert(e.name, stand_in);
    }
  }
  std::string pickle;
  torch::jit::Pickler pickler(
      [&pickle](const char* data, size_t n) { pickle.append(data, n); }, /*tensor_table=*/nullptr,
      /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      [&key_of](const at::Tensor& t) { return key_of.at(t.storage().unsafeGetStorageImpl()); },
      /*tag_aggregates=*/false);  // a plain dict, as torch.save writes a state dict
  pickler.protocol();
  pickler.pushIValue(state);
  pickler.stop();
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  zip.writeEndOfFile();
  if (!write_error.empty()) throw std::runtime_error(write_error);
  const uint64_t bytes = file.bytes_written();
  file.commit();
  return bytes;
}

}  // namespace zeroshard::io
