#include "shard/file_backed.h"

#include "shard/flat_param.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <stdexcept>

namespace zeroshard::shard {

std::shared_ptr<io::MappedFile> MappedFiles::get(const std::string& path) {
  auto& f = files_[path];
  if (!f) f = std::make_shared<io::MappedFile>(path);
  return f;
}

bool FileBacked::in_place(const ParamLocation& loc, int64_t numel, at::ScalarType compute_dtype, uint64_t file_size) {
  const uint64_t es = c10::elementSize(compute_dtype);
  return loc.whole && loc.dtype == compute_dtype && loc.offset % es == 0 &&
         loc.offset + static_cast<uint64_t>(numel) * es <= file_size;
}

FileBacked::FileBacked(const std::vector<ParamSlot>& slots, std::shared_ptr<ParamSource> source, MappedFiles& files,
                       at::ScalarType compute_dtype)
    : source_(std::move(source)), compute_dtype_(compute_dtype) {
  const uint64_t es = c10::elementSize(compute_dtype);
  for (const auto& s : slots) {
    const ParamLocation loc = source_->locate(s);
    if (!loc.in_file()) {
      throw std::logic_error("FrozenStorage::File: parameter '" + s.name + "' is not read from a file");
    }
    Place p;
    p.file = files.get(loc.file);
    const uint64_t bytes = static_cast<uint64_t>(s.numel) * es;
    if (in_place(loc, s.numel, compute_dtype, p.file->size())) {
      p.in_place = true;
      p.offset = loc.offset;
      p.bytes = bytes;
      mapped_bytes_ += static_cast<int64_t>(bytes);
    } else {
      p.converted_offset = converted_numel_;
      converted_numel_ += s.numel;
    }
    // Every file the values come from is checked for changes, also the further pieces of one.
    std::vector<std::shared_ptr<io::MappedFile>> read_from = {p.file};
    for (const auto& other : loc.also_reads) read_from.push_back(files.get(other));
    for (const auto& f : read_from) {
      if (std::find(files_.begin(), files_.end(), f) == files_.end()) files_.push_back(f);
    }
    places_.push_back(std::move(p));
  }
}

at::Tensor FileBacked::values(const ParamSlot& slot, const Place& p) const {
  if (p.in_place) {
    std::shared_ptr<io::MappedFile> keep = p.file;  // the mapping lives as long as any view of it
    return at::from_blob(const_cast<char*>(p.file->data() + p.offset), slot.shape, [keep](void*) {},
                         at::TensorOptions().dtype(compute_dtype_));
  }
  at::Tensor out = at::empty({slot.numel}, compute_dtype_);
  convert(slot, out);
  return out.view(slot.shape);
}

void FileBacked::convert(const ParamSlot& slot, const at::Tensor& dst) const {
  // Through a bounded float32 scratch: the transient bytes of a conversion do not grow with the
  // parameter (a FLUX.1 single block's fused 66M-element projection would need 264 MB of fp32
  // at each gather, freed into the step's heap between the activations).
  const int64_t chunk = std::min<int64_t>(slot.numel, kConvertChunk);
  at::Tensor scratch = dst.scalar_type() == at::kFloat ? at::Tensor() : at::empty({chunk}, at::kFloat);
  for (int64_t begin = 0; begin < slot.numel; begin += chunk) {
    const int64_t n = std::min(chunk, slot.numel - begin);
    at::Tensor part = dst.narrow(0, begin, n);
    if (!scratch.defined()) {
      source_->read(slot, begin, begin + n, part);
      continue;
    }
    at::Tensor fp32 = scratch.narrow(0, 0, n);
    source_->read(slot, begin, begin + n, fp32);
    part.copy_(fp32);  // rounded once, as FlatParam::materialize rounds a Memory shard
  }
}

void FileBacked::bind(std::vector<ParamSlot>& slots, const at::Tensor& buffer) const {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Place& p = places_[i];
    at::Tensor data = p.in_place ? values(slots[i], p)
                                 : buffer.narrow(0, p.converted_offset, slots[i].numel).view(slots[i].shape);
    slots[i].param.set_data(data);
  }
}

void FileBacked::load(const std::vector<ParamSlot>& slots, const at::Tensor& buffer) const {
  RECORD_FUNCTION("zs::frozen_load", std::vector<c10::IValue>());  // train/op_profile.h
  for (const auto& f : files_) f->check_unchanged();
  for (const Place& p : places_) {
    if (p.in_place) p.file->will_need(p.offset, p.bytes);
  }
  if (converted_numel_ == 0) return;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Place& p = places_[i];
    if (p.in_place) continue;
    convert(slots[i], buffer.narrow(0, p.converted_offset, slots[i].numel));
  }
}

void FileBacked::done() const {
  for (const Place& p : places_) {
    if (p.in_place) p.file->done_with(p.offset, p.bytes);
  }
}

at::Tensor FileBacked::read_flat(const std::vector<ParamSlot>& slots, int64_t begin, int64_t end) const {
  for (const auto& f : files_) f->check_unchanged();
  at::NoGradGuard no_grad;
  at::Tensor out = at::zeros({end - begin}, compute_dtype_);
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot& s = slots[i];
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    out.narrow(0, lo - begin, hi - lo).copy_(values(s, places_[i]).reshape({-1}).narrow(0, lo - s.offset, hi - lo));
  }
  return out;
}

}  // namespace zeroshard::shard
