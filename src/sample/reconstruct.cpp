// `zeroshard sample` on a video VAE run: held-out generated clips through encode → decode
// (posterior mean, chunk by chunk with the feature cache), written as one PNG.
#include "data/shapes.h"
#include "io/png.h"
#include "models/vae/vae.h"
#include "sample/checkpoint_model.h"
#include "sample/sample.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace zeroshard::sample {

std::string reconstruct_clips(const SampleOptions& o, const RendezvousInfo& rdv) {
  if (o.clips < 1) throw std::invalid_argument("--clips must be >= 1, got " + std::to_string(o.clips));
  ckpt::Checkpoint ck(ckpt::resolve_checkpoint(o.checkpoint));
  const train::TrainConfig cfg = model_config_of(ck);
  if (cfg.model_series != "vae") {
    throw std::invalid_argument(ck.dir() + " holds a " + cfg.model_series + " model; reconstructions need series vae");
  }
  models::VaeConfig vc = cfg.vae;
  if (o.chunk_frames >= 0) vc.chunk_frames = o.chunk_frames;
  try {
    vc.validate(cfg.frames, cfg.image_size);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--chunk-frames: ") + e.what());
  }

  auto comm = make_communicator(rdv);
  models::VideoVae model{nullptr};
  {
    nn::DeferredInit deferred;
    model = models::VideoVae(vc);
  }
  ShardOptions so;
  so.strategy = parse_strategy(o.strategy);
  so.param_source = ck.param_source();
  auto sharded = fully_shard(model.ptr(), comm, so);

  torch::NoGradGuard no_grad;
  const at::Tensor clips =
      data::shape_clips(static_cast<uint64_t>(cfg.data_seed), o.first_clip, o.clips, cfg.frames, cfg.image_size);
  const models::VaeOutput out = model->forward(clips, at::Tensor(), vc.chunk_frames);
  const double mse = out.recon_loss.item<double>();
  const double psnr = 10.0 * std::log10(4.0 / std::max(mse, 1e-12));  // pixel range [-1, 1]: peak-to-peak 2

  const std::string path = output_path(ck, o.out, "reconstruction.png");
  if (comm->rank() == 0) {
    // Per clip: its frames, then their reconstruction.
    std::vector<at::Tensor> rows;
    for (int64_t c = 0; c < o.clips; ++c) {
      rows.push_back(clips[c]);
      rows.push_back(out.recon[c]);
    }
    io::write_png_rows(path, rows);
  }
  comm->barrier();
  char line[512];
  std::snprintf(line, sizeof(line), "reconstructed %lld held-out clips (from index %lld, chunks of %lld frames): MSE %.5f, "
                "PSNR %.2f dB; wrote %s", static_cast<long long>(o.clips), static_cast<long long>(o.first_clip),
                static_cast<long long>(vc.chunk_frames), mse, psnr, path.c_str());
  return line;
}

}  // namespace zeroshard::sample
