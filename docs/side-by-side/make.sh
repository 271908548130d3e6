#!/usr/bin/env bash
# Side-by-side of convcli's default edge map and ImageMagick's, on sample_images/camera.png.
# Run from the project root, with convcli installed and ImageMagick 6 (convert, montage) on the PATH:
#     bash docs/side-by-side/make.sh
# Writes into docs/side-by-side/:
#     camera_conv-edge-gray.png              convcli conv -k edge, default options (reflect border, robust scale)
#     camera_imagemagick-laplacian0.png      convert -colorspace gray -morphology Correlate Laplacian:0
#     camera_conv-edge-Bconstant-abs-gray.png  convcli's zero border and largest-is-white scale, for contrast
#     edge-maps.png                          the three side by side, captioned
# and prints, as a markdown table, each map's mean level, 99th percentile and where its brightest pixels lie;
# then checks that convcli with --border edge --normalize clip gives ImageMagick's map.
# convcli's edge kernel has Laplacian:0's weights, [-1 -1 -1; -1 8 -1; -1 -1 -1] (see 'convcli kernels edge').
# --channels gray: convcli works on the luminance, as ImageMagick does after -colorspace gray (camera.png is
# grey already, so both read the same levels).
set -euo pipefail

photo=sample_images/camera.png
out=docs/side-by-side
ours="$out/camera_conv-edge-gray.png"
old="$out/camera_conv-edge-Bconstant-abs-gray.png"
magick="$out/camera_imagemagick-laplacian0.png"
trap 'rm -f "$out/convcli-manifest.jsonl"' EXIT  # the manifest is no picture of the docs

if ! convert -version 2>/dev/null | grep -q '^Version: ImageMagick'; then
    echo "make.sh: ImageMagick's convert is needed (apt-get install imagemagick)" >&2
    exit 1
fi
command -v montage >/dev/null || { echo "make.sh: ImageMagick's montage is needed" >&2; exit 1; }

# The three maps.
convcli conv -k edge --channels gray "$photo" -o "$out" --overwrite -q
convcli conv -k edge --channels gray --border constant --normalize abs "$photo" -o "$out" --overwrite -q
convert "$photo" -colorspace gray -morphology Correlate Laplacian:0 -depth 8 -strip "$magick"

# Side by side, a caption under each (3 x 512 px wide, plus spacing).
montage \
    -label 'convcli conv -k edge (default: reflect border, robust scale)' "$ours" \
    -label 'ImageMagick -morphology Correlate Laplacian:0' "$magick" \
    -label 'convcli --border constant --normalize abs (zeros, largest white)' "$old" \
    -tile 3x1 -geometry +6+6 -pointsize 15 -background white -depth 8 -strip \
    "$out/edge-maps.png"

# convcli's ImageMagick-like map, kept only for the check below.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$out/convcli-manifest.jsonl"' EXIT
convcli conv -k edge --channels gray --border edge --normalize clip "$photo" -o "$tmp" -q

python - "$ours" "$magick" "$old" "$tmp/camera_conv-edge-Bedge-clip-gray.png" <<'PY'
import sys

import numpy as np
from PIL import Image

ours, magick, old, like_magick = sys.argv[1:]
rows = [
    ("convcli default", ours),
    ("ImageMagick Laplacian:0", magick),
    ("convcli --border constant --normalize abs", old),
]
print(
    "| map | mean level /255 | 99th percentile | mean /255, frame / interior "
    "| brightest level, frame / interior | brightest in the frame? | black / white pixels |"
)
print("|---|---|---|---|---|---|---|")
for name, path in rows:
    levels = np.asarray(Image.open(path).convert("L"), dtype=np.float64)
    frame = np.ones(levels.shape, dtype=bool)
    frame[2:-2, 2:-2] = False  # the outer 2-pixel frame
    top_frame, top_inside = levels[frame].max(), levels[~frame].max()
    where = "only there" if top_frame > top_inside else ("also inside" if top_frame == top_inside else "no")
    print(
        f"| {name} | {levels.mean() / 255:.3f} | {np.percentile(levels, 99):.0f} "
        f"| {levels[frame].mean() / 255:.3f} / {levels[~frame].mean() / 255:.3f} "
        f"| {top_frame:.0f} / {top_inside:.0f} | {where} "
        f"| {np.mean(levels == 0):.1%} / {np.mean(levels == 255):.1%} |"
    )
a = np.asarray(Image.open(magick).convert("L"), dtype=np.int16)
b = np.asarray(Image.open(like_magick).convert("L"), dtype=np.int16)
print(
    f"\nconvcli --border edge --normalize clip vs ImageMagick: "
    f"{np.count_nonzero(a != b)} of {a.size} pixels differ (largest difference {np.abs(a - b).max()})"
)
PY
