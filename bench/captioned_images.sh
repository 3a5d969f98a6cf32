#!/usr/bin/env bash
# Four captioned images from ffmpeg's test sources in a DiffSynth image folder, for the benchmarks
# that prepare one (bench/real_size.sh, bench/prepare_text_towers.sh):
#
#   bench/captioned_images.sh DIR SIZE_A SIZE_B SIZE_C SIZE_D     # sizes as WxH
#
# DIR/a.png (testsrc2), b.jpg (mandelbrot), c.png (smptebars), d.png (rgbtestsrc) and
# DIR/metadata.csv (image,prompt) with one prompt each.
set -euo pipefail
dir=$1
mkdir -p "$dir"
ffmpeg -loglevel error -y -f lavfi -i "testsrc2=size=$2" -frames:v 1 "$dir/a.png"
ffmpeg -loglevel error -y -f lavfi -i "mandelbrot=size=$3" -frames:v 1 "$dir/b.jpg"
ffmpeg -loglevel error -y -f lavfi -i "smptebars=size=$4" -frames:v 1 "$dir/c.png"
ffmpeg -loglevel error -y -f lavfi -i "rgbtestsrc=size=$5" -frames:v 1 "$dir/d.png"
printf '%s\n' 'image,prompt' 'a.png,a test pattern with colour bars and a moving gradient' \
  'b.jpg,"a mandelbrot set in deep blue, zoomed in on its edge"' \
  'c.png,television colour bars on a grey background' 'd.png,three stripes of red green and blue' \
  > "$dir/metadata.csv"
