#!/bin/sh
# Makes the README's "Learning with convcli" pictures with convcli itself. Run from the project root:
#     sh docs/learning/make-pictures.sh
set -e
out=docs/learning
# The pictures are the README's; the manifest convcli keeps beside its outputs is not.
trap 'rm -f "$out/convcli-manifest.jsonl"' EXIT
# The half-size cat photo of the tour (225x150), as luminance: one map per picture.
convcli pool --mode average --size 2 sample_images/chelsea.png -o "$out" --overwrite -q
convcli conv -k identity --channels gray "$out/chelsea_pool-average-f2-s2.png" -o "$out/cat.png" \
    --overwrite -q
# Where max pooling (5x5 windows, stride 2) sends its gradient: the routing map.
convcli grad pool --size 5 --stride 2 "$out/cat.png" -o "$out" --overwrite -q
# Which pixels would most change the vertical-edge response (L = sum(Z^2)/2).
convcli grad conv -k vertical "$out/cat.png" -o "$out" --overwrite -q
# A kernel learned back from the photo and its raw convolution with log-5x5.
convcli conv -k log-5x5 --format npy "$out/cat.png" -o "$out/cat_log.npy" --overwrite -q
convcli fit "$out/cat.png" "$out/cat_log.npy" --size 5 -o "$out/cat_fit-5x5.toml" --figure \
    --overwrite
# Keep only what the README shows.
rm -f "$out"/chelsea_pool-average-f2-s2*.png "$out/cat_log.npy"
