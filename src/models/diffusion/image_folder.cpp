#include "models/diffusion/image_folder.h"

#include "data/image_transforms.h"
#include "io/png.h"

#include <stdexcept>

namespace zeroshard::models::diffusion {

data::MediaDataset load_captioned_images(const std::string& folder, const std::string& metadata, const std::string& key,
                                         bool collect_errors) {
  if (folder.empty()) throw std::invalid_argument(key + ": the dataset folder is required");
  data::MediaDatasetOptions opts;
  opts.media_column = "image";
  opts.collect_errors = collect_errors;
  data::MediaDataset d = data::load_media_dataset(folder, metadata, opts);
  for (const auto& s : d.samples) {
    if (s.kind != data::MediaKind::kImage) {
      throw std::invalid_argument(s.location + ": '" + s.media + "' is not an image (" + key + " takes jpg/png/webp)");
    }
  }
  if (d.samples.empty()) throw std::invalid_argument(key + ": " + folder + " holds no images");
  return d;
}

at::Tensor load_image_tensor(const std::string& path, int64_t height, int64_t width,
                             std::pair<int64_t, int64_t>* source_size) {
  data::ImageSizeRule rule;
  rule.height = height;
  rule.width = width;
  const io::DecodedImage d = io::decode_image_file(path);
  if (source_size) *source_size = {d.image.width, d.image.height};
  const io::RgbImage img = data::fit_image(d.image, rule, path);
  std::vector<float> v = data::to_chw(img);
  return at::from_blob(v.data(), {3, height, width}, at::kFloat).clone();
}

void write_image_row(const std::string& path, const at::Tensor& images) {
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3), gap = 2;
  at::Tensor sheet = at::zeros({3, H, B * W + (B - 1) * gap}, at::kFloat);
  for (int64_t i = 0; i < B; ++i) sheet.narrow(2, i * (W + gap), W).copy_(images[i].to(at::kFloat));
  io::write_png(path, sheet);
}

}  // namespace zeroshard::models::diffusion
