#!/bin/sh
# Makes the README's tour pictures with convcli itself. Run from the project root:
#     sh docs/tour/make-pictures.sh
set -e
out=docs/tour
# The pictures are the README's; the manifest convcli keeps beside its outputs is not.
trap 'rm -f "$out/convcli-manifest.jsonl"' EXIT
# A half-size copy of the cat photo (225x150): 2x2 average pooling.
convcli pool --mode average --size 2 sample_images/chelsea.png -o "$out" --overwrite -q
photo="$out/chelsea_pool-average-f2-s2.png"
# Its vertical, horizontal and edge maps, and the figure grid (named after the three kernels).
convcli conv -k vertical -k horizontal -k edge --figure "$photo" -o "$out" --overwrite -q
# A max-pooled version, f=5, stride 3, as in the blog write-up.
convcli pool --size 5 --stride 3 "$photo" -o "$out" --overwrite -q
