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
    bool seen = false;
    for (const auto& f : files_) seen = seen || f == p.file;
    if (!seen) files_.push_back(p.file);
    places_.push_back(std::move(p));
  }
}

at::Tensor FileBacked::values(const ParamSlot& slot, const Place& p) const {
  if (p.in_place) {
    std::shared_ptr<io::MappedFile> keep = p.file;  // the mapping lives as long as any view of it
    return at::from_blob(const_cast<char*>(p.file->data() + p.offset), slot.shape, [keep](void*) {},
                         at::TensorOptions().dtype(compute_dtype_));
  }
  at::Tensor fp32 = at::empty({slot.numel}, at::kFloat);
  source_->read(slot, 0, slot.numel, fp32);
  return fp32.to(compute_dtype_).view(slot.shape);
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
    at::Tensor dst = buffer.narrow(0, p.converted_offset, slots[i].numel);
    at::Tensor fp32 = at::empty({slots[i].numel}, at::kFloat);  // one parameter at a time
    source_->read(slots[i], 0, slots[i].numel, fp32);
    dst.copy_(fp32);  // rounded once, as FlatParam::materialize rounds a Memory shard
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
