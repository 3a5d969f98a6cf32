#include "io/video_codec.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace zeroshard::io {
namespace {

std::string av_error_text(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof(buf));
  return buf;
}

[[noreturn]] void av_fail(const std::string& path, const std::string& what, int code) {
  throw std::runtime_error(path + ": " + what + ": " + av_error_text(code) + " (FFmpeg error " + std::to_string(code) + ")");
}

// FFmpeg logs at AV_LOG_INFO by default; lower it to errors unless someone chose a level.
void quiet_ffmpeg_log() {
  static const bool once = [] {
    if (av_log_get_level() == AV_LOG_INFO) av_log_set_level(AV_LOG_ERROR);
    return true;
  }();
  (void)once;
}

bool is_yuv_or_gray(AVPixelFormat f) {
  const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(f);
  return d != nullptr && (d->flags & AV_PIX_FMT_FLAG_RGB) == 0 && (d->flags & AV_PIX_FMT_FLAG_PAL) == 0;
}

bool is_jpeg_range_format(AVPixelFormat f) {
  return f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P || f == AV_PIX_FMT_YUVJ444P ||
         f == AV_PIX_FMT_YUVJ440P || f == AV_PIX_FMT_YUVJ411P;
}

// Copies an RGB24 AVFrame (rows may be padded) into a packed RgbImage.
RgbImage packed_copy(const AVFrame* rgb) {
  RgbImage out(rgb->width, rgb->height);
  for (int y = 0; y < rgb->height; ++y) {
    std::memcpy(out.row(y), rgb->data[0] + static_cast<ptrdiff_t>(y) * rgb->linesize[0], static_cast<size_t>(rgb->width) * 3);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reader

struct VideoReader::Impl {
  std::string path;
  VideoReaderOptions options;
  VideoInfo info;
  AVFormatContext* fmt = nullptr;
  AVCodecContext* dec = nullptr;
  AVPacket* pkt = nullptr;
  AVFrame* frame = nullptr;
  AVFrame* rgb = nullptr;
  SwsContext* sws = nullptr;
  int stream = -1;
  bool packet_pending = false;  // pkt holds a packet the decoder refused with EAGAIN
  bool flushed = false;         // the end-of-stream flush was sent to the decoder
  int64_t next_index = 0;       // index the next decoded frame gets
  int64_t packets_read = 0;
  int64_t count = -1;
  std::vector<std::string> warnings;

  ~Impl() { close(); }

  void close() {
    sws_freeContext(sws);
    sws = nullptr;
    av_frame_free(&rgb);
    av_frame_free(&frame);
    av_packet_free(&pkt);
    avcodec_free_context(&dec);
    avformat_close_input(&fmt);
  }

  void open() {
    quiet_ffmpeg_log();
    close();
    packet_pending = flushed = false;
    next_index = packets_read = 0;
    int r = avformat_open_input(&fmt, path.c_str(), nullptr, nullptr);
    if (r < 0) av_fail(path, "cannot open video", r);
    r = avformat_find_stream_info(fmt, nullptr);
    if (r < 0) av_fail(path, "cannot read stream information", r);
    const AVCodec* codec = nullptr;
    stream = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (stream == AVERROR_STREAM_NOT_FOUND) throw std::runtime_error(path + ": no video stream in the file");
    if (stream < 0) {
      int s = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
      const char* name = s >= 0 ? avcodec_get_name(fmt->streams[s]->codecpar->codec_id) : "?";
      av_fail(path, std::string("no decoder for the video codec '") + name + "'", stream);
    }
    AVStream* st = fmt->streams[stream];
    if (st->codecpar->codec_id == AV_CODEC_ID_NONE) {
      av_fail(path, "the container does not say which codec the video uses (damaged or truncated file?)", AVERROR_INVALIDDATA);
    }
    dec = avcodec_alloc_context3(codec);
    if (dec == nullptr) throw std::runtime_error(path + ": avcodec_alloc_context3 failed");
    r = avcodec_parameters_to_context(dec, st->codecpar);
    if (r < 0) av_fail(path, "cannot copy codec parameters", r);
    dec->thread_count = options.threads;
    r = avcodec_open2(dec, codec, nullptr);
    if (r < 0) av_fail(path, std::string("cannot open the decoder '") + codec->name + "'", r);
    pkt = av_packet_alloc();
    frame = av_frame_alloc();
    rgb = av_frame_alloc();
    if (pkt == nullptr || frame == nullptr || rgb == nullptr) throw std::runtime_error(path + ": out of memory");

    info.width = st->codecpar->width;
    info.height = st->codecpar->height;
    AVRational fr = st->avg_frame_rate;
    if (fr.num <= 0 || fr.den <= 0) fr = st->r_frame_rate;
    if (fr.num > 0 && fr.den > 0) {
      info.fps_num = fr.num;
      info.fps_den = fr.den;
      info.fps = av_q2d(fr);
    }
    info.container_frames = st->nb_frames;
    if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0) {
      info.duration_seconds = static_cast<double>(fmt->duration) / AV_TIME_BASE;
    } else if (st->duration != AV_NOPTS_VALUE && st->duration > 0) {
      info.duration_seconds = static_cast<double>(st->duration) * av_q2d(st->time_base);
    }
    info.codec = avcodec_get_name(st->codecpar->codec_id);
    info.container = fmt->iformat->name;
  }

  // Decodes the next frame (presentation order) into `frame`; false at the end of the stream.
  bool next_frame() {
    for (;;) {
      int r = avcodec_receive_frame(dec, frame);
      if (r == 0) {
        if ((frame->flags & AV_FRAME_FLAG_CORRUPT) != 0 || frame->decode_error_flags != 0) {
          warnings.push_back("frame " + std::to_string(next_index) + " is flagged corrupt by the decoder");
        }
        return true;
      }
      if (r == AVERROR_EOF) return false;
      if (r != AVERROR(EAGAIN)) {
        if (!options.tolerate_decode_errors) av_fail(path, "decoding frame " + std::to_string(next_index), r);
        warnings.push_back("decoding frame " + std::to_string(next_index) + ": " + av_error_text(r));
        if (flushed) return false;
      }
      if (flushed) return false;
      if (packet_pending) {
        r = avcodec_send_packet(dec, pkt);
        if (r == AVERROR(EAGAIN)) continue;
        av_packet_unref(pkt);
        packet_pending = false;
        if (r < 0) packet_error(r);
        continue;
      }
      for (;;) {
        r = av_read_frame(fmt, pkt);
        if (r == AVERROR_EOF) {
          r = avcodec_send_packet(dec, nullptr);
          if (r < 0 && r != AVERROR_EOF) av_fail(path, "flushing the decoder", r);
          flushed = true;
          break;
        }
        if (r < 0) {
          if (!options.tolerate_decode_errors) av_fail(path, "reading packet " + std::to_string(packets_read), r);
          warnings.push_back("reading packet " + std::to_string(packets_read) + ": " + av_error_text(r) +
                             " (treated as the end of the stream)");
          r = avcodec_send_packet(dec, nullptr);
          if (r < 0 && r != AVERROR_EOF) av_fail(path, "flushing the decoder", r);
          flushed = true;
          break;
        }
        if (pkt->stream_index != stream) {
          av_packet_unref(pkt);
          continue;
        }
        ++packets_read;
        r = avcodec_send_packet(dec, pkt);
        if (r == AVERROR(EAGAIN)) {
          packet_pending = true;
          break;
        }
        av_packet_unref(pkt);
        if (r < 0) packet_error(r);
        break;
      }
    }
  }

  void packet_error(int r) {
    const std::string what = "decoding packet " + std::to_string(packets_read - 1);
    if (!options.tolerate_decode_errors) av_fail(path, what, r);
    warnings.push_back(what + ": " + av_error_text(r) + " (packet skipped)");
  }

  RgbImage convert() {
    const auto src_fmt = static_cast<AVPixelFormat>(frame->format);
    sws = sws_getCachedContext(sws, frame->width, frame->height, src_fmt, frame->width, frame->height,
                               AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr);
    if (sws == nullptr) {
      const char* name = av_get_pix_fmt_name(src_fmt);
      throw std::runtime_error(path + ": cannot convert pixel format " + (name ? name : "?") + " to RGB");
    }
    if (is_yuv_or_gray(src_fmt)) {
      // ffmpeg's scale filter in "auto" mode: the stream's matrix (BT.601 when untagged or unknown)
      // and range.
      int cs = frame->colorspace;
      if (cs < 1 || cs > 10 || cs == 8) cs = SWS_CS_ITU601;
      const bool full = frame->color_range == AVCOL_RANGE_JPEG || is_jpeg_range_format(src_fmt);
      sws_setColorspaceDetails(sws, sws_getCoefficients(cs), full ? 1 : 0, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0,
                               1 << 16, 1 << 16);
    }
    if (rgb->width != frame->width || rgb->height != frame->height) {
      av_frame_unref(rgb);
      rgb->format = AV_PIX_FMT_RGB24;
      rgb->width = frame->width;
      rgb->height = frame->height;
      const int r = av_frame_get_buffer(rgb, 0);  // aligned rows, as ffmpeg's own buffers
      if (r < 0) av_fail(path, "allocating an RGB frame", r);
    }
    sws_scale(sws, frame->data, frame->linesize, 0, frame->height, rgb->data, rgb->linesize);
    return packed_copy(rgb);
  }

  void learn_count(int64_t n) {
    count = n;
    if (info.container_frames > 0 && info.container_frames != n) {
      warnings.push_back("the container states " + std::to_string(info.container_frames) + " frames but " +
                         std::to_string(n) + " decode");
    }
  }
};

VideoReader::VideoReader(const std::string& path, const VideoReaderOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->options = options;
  impl_->open();
}

VideoReader::~VideoReader() = default;

const std::string& VideoReader::path() const { return impl_->path; }
const VideoInfo& VideoReader::info() const { return impl_->info; }
bool VideoReader::frame_count_known() const { return impl_->count >= 0; }
const std::vector<std::string>& VideoReader::warnings() const { return impl_->warnings; }

int64_t VideoReader::frame_count() {
  if (impl_->count >= 0) return impl_->count;
  while (impl_->next_frame()) ++impl_->next_index;
  impl_->learn_count(impl_->next_index);
  return impl_->count;
}

std::vector<RgbImage> VideoReader::read_frames(const std::vector<int64_t>& indices) {
  std::vector<int64_t> order(indices);
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  if (!order.empty() && order.front() < 0) {
    throw std::out_of_range(impl_->path + ": frame index " + std::to_string(order.front()) + " is negative");
  }
  if (!order.empty() && impl_->count >= 0 && order.back() >= impl_->count) {
    throw std::out_of_range(impl_->path + ": frame index " + std::to_string(order.back()) + " is beyond the last frame (" +
                            std::to_string(impl_->count) + " frames)");
  }
  if (!order.empty() && order.front() < impl_->next_index) impl_->open();
  std::vector<RgbImage> decoded(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    for (;;) {
      if (!impl_->next_frame()) {
        impl_->learn_count(impl_->next_index);
        throw std::out_of_range(impl_->path + ": frame index " + std::to_string(order[k]) + " is beyond the last frame (" +
                                std::to_string(impl_->count) + " frames)");
      }
      const int64_t idx = impl_->next_index++;
      if (idx == order[k]) {
        decoded[k] = impl_->convert();
        break;
      }
    }
  }
  std::vector<RgbImage> out;
  out.reserve(indices.size());
  for (int64_t i : indices) {
    out.push_back(decoded[static_cast<size_t>(std::lower_bound(order.begin(), order.end(), i) - order.begin())]);
  }
  return out;
}

std::vector<RgbImage> VideoReader::read_first_frames(int64_t n) {
  std::vector<RgbImage> out;
  if (n <= 0) return out;
  if (impl_->next_index > 0 || impl_->flushed) impl_->open();
  while (static_cast<int64_t>(out.size()) < n) {
    if (!impl_->next_frame()) {
      impl_->learn_count(impl_->next_index);
      break;
    }
    ++impl_->next_index;
    out.push_back(impl_->convert());
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writer

struct VideoWriter::Impl {
  std::string path, tmp_path, codec;
  VideoWriterOptions options;
  int64_t width = 0, height = 0;
  AVFormatContext* fmt = nullptr;
  AVCodecContext* enc = nullptr;
  AVStream* st = nullptr;
  AVFrame* rgb = nullptr;
  AVFrame* yuv = nullptr;
  AVPacket* pkt = nullptr;
  SwsContext* sws = nullptr;
  int64_t frames = 0;
  bool finished = false;

  ~Impl() {
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&yuv);
    av_frame_free(&rgb);
    avcodec_free_context(&enc);
    if (fmt != nullptr) {
      if ((fmt->oformat->flags & AVFMT_NOFILE) == 0) avio_closep(&fmt->pb);
      avformat_free_context(fmt);
    }
    if (!finished && !tmp_path.empty()) std::remove(tmp_path.c_str());
  }

  void open() {
    quiet_ffmpeg_log();
    if (width <= 0 || height <= 0) {
      throw std::invalid_argument(path + ": cannot write a video of " + std::to_string(width) + "x" + std::to_string(height));
    }
    if (!(options.fps > 0)) throw std::invalid_argument(path + ": fps must be positive, got " + std::to_string(options.fps));
    const AVOutputFormat* ofmt = av_guess_format(nullptr, path.c_str(), nullptr);
    if (ofmt == nullptr) throw std::invalid_argument(path + ": no FFmpeg container matches the file extension");
    tmp_path = path + ".tmp";
    int r = avformat_alloc_output_context2(&fmt, ofmt, nullptr, tmp_path.c_str());
    if (r < 0) av_fail(path, "cannot create the output container", r);

    const AVCodec* c = nullptr;
    if (options.codec.empty()) {
      c = avcodec_find_encoder_by_name("libx264");
      if (c == nullptr) c = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    } else {
      c = avcodec_find_encoder_by_name(options.codec.c_str());
    }
    if (c == nullptr) {
      throw std::runtime_error(path + ": encoder '" + (options.codec.empty() ? "libx264/mpeg4" : options.codec) +
                               "' is not in this FFmpeg build");
    }
    codec = c->name;
    AVPixelFormat pix = AV_PIX_FMT_YUV420P;
    if (c->pix_fmts != nullptr) {
      bool has420 = false;
      for (const AVPixelFormat* p = c->pix_fmts; *p != AV_PIX_FMT_NONE; ++p) has420 = has420 || *p == AV_PIX_FMT_YUV420P;
      if (!has420) pix = c->pix_fmts[0];
    }
    const AVPixFmtDescriptor* pd = av_pix_fmt_desc_get(pix);
    if (pd != nullptr && ((width % (1 << pd->log2_chroma_w)) != 0 || (height % (1 << pd->log2_chroma_h)) != 0)) {
      throw std::invalid_argument(path + ": " + codec + " with " + av_get_pix_fmt_name(pix) + " needs a width and height divisible by " +
                                  std::to_string(1 << pd->log2_chroma_w) + ", got " + std::to_string(width) + "x" +
                                  std::to_string(height));
    }
    st = avformat_new_stream(fmt, nullptr);
    enc = avcodec_alloc_context3(c);
    if (st == nullptr || enc == nullptr) throw std::runtime_error(path + ": out of memory");
    const AVRational fr = av_d2q(options.fps, 100000);
    enc->width = static_cast<int>(width);
    enc->height = static_cast<int>(height);
    enc->framerate = fr;
    enc->time_base = av_inv_q(fr);
    enc->pix_fmt = pix;
    enc->thread_count = options.threads;
    // Tagged BT.601 limited range: what swscale's default RGB -> YUV matrix produces, so a
    // reader applying the tag gets the colours back.
    enc->colorspace = AVCOL_SPC_SMPTE170M;
    enc->color_range = AVCOL_RANGE_MPEG;
    enc->color_primaries = AVCOL_PRI_SMPTE170M;
    enc->color_trc = AVCOL_TRC_SMPTE170M;
    if ((fmt->oformat->flags & AVFMT_GLOBALHEADER) != 0) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary* copts = nullptr;
    if (codec == "libx264") {
      av_dict_set_int(&copts, "crf", options.crf, 0);
      av_dict_set(&copts, "preset", options.preset.c_str(), 0);
    } else if (c->id == AV_CODEC_ID_MPEG4) {
      enc->flags |= AV_CODEC_FLAG_QSCALE;
      enc->global_quality = FF_QP2LAMBDA * options.mpeg4_qscale;
    }
    r = avcodec_open2(enc, c, &copts);
    av_dict_free(&copts);
    if (r < 0) av_fail(path, "cannot open the encoder '" + codec + "'", r);
    r = avcodec_parameters_from_context(st->codecpar, enc);
    if (r < 0) av_fail(path, "cannot copy encoder parameters", r);
    st->time_base = enc->time_base;
    st->avg_frame_rate = fr;
    if ((fmt->oformat->flags & AVFMT_NOFILE) == 0) {
      r = avio_open(&fmt->pb, tmp_path.c_str(), AVIO_FLAG_WRITE);
      if (r < 0) av_fail(tmp_path, "cannot open for writing", r);
    }
    AVDictionary* mopts = nullptr;
    const std::string fname = fmt->oformat->name;
    if (options.faststart && (fname.find("mp4") != std::string::npos || fname.find("mov") != std::string::npos)) {
      av_dict_set(&mopts, "movflags", "+faststart", 0);
    }
    r = avformat_write_header(fmt, &mopts);
    av_dict_free(&mopts);
    if (r < 0) av_fail(path, "cannot write the container header", r);

    pkt = av_packet_alloc();
    rgb = av_frame_alloc();
    yuv = av_frame_alloc();
    if (pkt == nullptr || rgb == nullptr || yuv == nullptr) throw std::runtime_error(path + ": out of memory");
    rgb->format = AV_PIX_FMT_RGB24;
    yuv->format = pix;
    rgb->width = yuv->width = enc->width;
    rgb->height = yuv->height = enc->height;
    if ((r = av_frame_get_buffer(rgb, 0)) < 0 || (r = av_frame_get_buffer(yuv, 0)) < 0) av_fail(path, "allocating frames", r);
    sws = sws_getContext(enc->width, enc->height, AV_PIX_FMT_RGB24, enc->width, enc->height, pix, SWS_BICUBIC, nullptr,
                         nullptr, nullptr);
    if (sws == nullptr) throw std::runtime_error(path + ": cannot convert RGB to " + av_get_pix_fmt_name(pix));
    if (is_yuv_or_gray(pix)) {
      sws_setColorspaceDetails(sws, sws_getCoefficients(SWS_CS_ITU601), 1, sws_getCoefficients(SWS_CS_ITU601), 0, 0,
                               1 << 16, 1 << 16);
    }
  }

  void encode(AVFrame* f) {
    int r = avcodec_send_frame(enc, f);
    if (r < 0) av_fail(path, f ? "encoding frame " + std::to_string(frames) : std::string("flushing the encoder"), r);
    for (;;) {
      r = avcodec_receive_packet(enc, pkt);
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
      if (r < 0) av_fail(path, "encoding", r);
      av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      r = av_interleaved_write_frame(fmt, pkt);
      if (r < 0) av_fail(path, "writing a packet", r);
    }
  }
};

VideoWriter::VideoWriter(const std::string& path, int64_t width, int64_t height, const VideoWriterOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->options = options;
  impl_->width = width;
  impl_->height = height;
  impl_->open();
}

VideoWriter::~VideoWriter() = default;

const std::string& VideoWriter::codec_name() const { return impl_->codec; }
int64_t VideoWriter::frames_written() const { return impl_->frames; }

void VideoWriter::write(const RgbImage& frame) {
  Impl& w = *impl_;
  if (w.finished) throw std::logic_error(w.path + ": write after finish()");
  if (frame.width != w.width || frame.height != w.height ||
      frame.pixels.size() != static_cast<size_t>(frame.width * frame.height * 3)) {
    throw std::invalid_argument(w.path + ": frame " + std::to_string(w.frames) + " is " + std::to_string(frame.width) + "x" +
                                std::to_string(frame.height) + ", the video is " + std::to_string(w.width) + "x" +
                                std::to_string(w.height));
  }
  int r = av_frame_make_writable(w.rgb);
  if (r >= 0) r = av_frame_make_writable(w.yuv);
  if (r < 0) av_fail(w.path, "making frames writable", r);
  for (int64_t y = 0; y < w.height; ++y) {
    std::memcpy(w.rgb->data[0] + y * w.rgb->linesize[0], frame.row(y), static_cast<size_t>(w.width) * 3);
  }
  sws_scale(w.sws, w.rgb->data, w.rgb->linesize, 0, static_cast<int>(w.height), w.yuv->data, w.yuv->linesize);
  w.yuv->pts = w.frames;
  w.encode(w.yuv);
  ++w.frames;
}

void VideoWriter::finish() {
  Impl& w = *impl_;
  if (w.finished) return;
  if (w.frames == 0) throw std::invalid_argument(w.path + ": no frames were written");
  w.encode(nullptr);
  int r = av_write_trailer(w.fmt);
  if (r < 0) av_fail(w.path, "writing the container trailer", r);
  if ((w.fmt->oformat->flags & AVFMT_NOFILE) == 0) {
    r = avio_closep(&w.fmt->pb);
    if (r < 0) av_fail(w.tmp_path, "closing", r);
  }
  if (std::rename(w.tmp_path.c_str(), w.path.c_str()) != 0) {
    throw std::runtime_error(w.path + ": cannot rename " + w.tmp_path + ": " + std::strerror(errno));
  }
  w.finished = true;
}

std::string write_video(const std::string& path, const std::vector<RgbImage>& frames, const VideoWriterOptions& options) {
  if (frames.empty()) throw std::invalid_argument(path + ": write_video needs at least one frame");
  VideoWriter writer(path, frames[0].width, frames[0].height, options);
  for (const auto& f : frames) writer.write(f);
  writer.finish();
  return writer.codec_name();
}

}  // namespace zeroshard::io
