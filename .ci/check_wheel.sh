#!/usr/bin/env bash
# CI: the package ships whole. Builds a wheel from a copy of this work tree, checks that every
# module of convcli/ and every kernels/*.toml is inside it, installs it (not editable) into a
# fresh virtual environment and runs the command line from a directory outside the project.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
python=${PYTHON:-python}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Build from a copy without build/, dist/ or *.egg-info, so stale build output (a deleted
# kernel file, say) cannot end up in the wheel.
"$python" - "$repo" "$work/src" <<'EOF'
import shutil, sys
shutil.copytree(sys.argv[1], sys.argv[2], ignore=shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", ".venv", ".pytest_cache",
    ".hypothesis", "convcli-out", "*.so", "*.pyd"))
EOF
"$python" -m pip wheel --quiet --no-deps -w "$work/dist" "$work/src"

"$python" - "$repo/kernels" "$work/dist" "$repo" <<'EOF'
import pathlib, sys, zipfile
kernels, dist, repo = (pathlib.Path(a) for a in sys.argv[1:4])
wheels = sorted(dist.glob("convcli-*.whl"))
if len(wheels) != 1:
    sys.exit(f"check_wheel: expected one convcli wheel in {dist}, found {wheels}")
names = set(zipfile.ZipFile(wheels[0]).namelist())
expected = {f"convcli/kernel_files/{p.name}" for p in kernels.glob("*.toml")}
if not expected:
    sys.exit(f"check_wheel: no kernel files in {kernels}")
expected.add("convcli/kernel_files/__init__.py")
expected |= {p.relative_to(repo).as_posix() for p in (repo / "convcli").rglob("*.py")}
missing = sorted(expected - names)
if not any(n.startswith("convcli/layers/_engine/_native.") for n in names):
    missing.append("the compiled convcli/layers/_engine/_native extension")
if missing:
    sys.exit(f"check_wheel: {wheels[0].name} lacks {missing}")
print(f"check_wheel: {wheels[0].name} holds every module and kernel file ({len(expected)})")
EOF

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/convcli-*.whl

# Run from outside the project, so the installed copy is used, not the source tree.
cd "$work"
"$work/venv/bin/python" - <<'EOF'
import sys
import convcli
from convcli.kernels import get_kernel, list_kernels, parse_kernel_spec
if "/site-packages/" not in convcli.__file__:
    sys.exit(f"check_wheel: convcli imported from {convcli.__file__}, not the installed wheel")
names = [k.name for k in list_kernels()]
if "vertical" not in names:
    sys.exit(f"check_wheel: the installed package does not list vertical: {names}")
if (parse_kernel_spec("sobel:90").weights != get_kernel("sobel-y").weights).any():
    sys.exit("check_wheel: sobel:90 is not sobel-y in the installed package")
print(f"check_wheel: the installed package lists {len(names)} kernels")
EOF
# Capture first: 'cmd | grep -q' can fail under pipefail when grep exits early (SIGPIPE).
listing=$("$work/venv/bin/convcli" kernels)
grep -qw '^vertical' <<<"$listing" \
    || { echo "check_wheel: 'convcli kernels' does not list vertical" >&2; exit 1; }
echo "check_wheel: 'convcli kernels' lists vertical"
"$work/venv/bin/convcli" pool -q "$repo/sample_images/camera.png" -o "$work/out"
test -s "$work/out/camera_pool-max-f2-s2-L.png" \
    || { echo "check_wheel: 'convcli pool' wrote no output" >&2; exit 1; }
echo "check_wheel: 'convcli pool' ran from the installed package"
version=$("$work/venv/bin/convcli" --version)
grep -q '^engine: native ' <<<"$version" \
    || { echo "check_wheel: the installed package does not run its native engine: $version" >&2; exit 1; }
echo "check_wheel: ${version##*$'\n'}"

# Without a C compiler the install still succeeds, and the numpy engines run. (pip builds
# in the tree: the first build's build/ would hand over its compiled extension.)
rm -rf "$work/src/build"
CC=false "$python" -m pip wheel --quiet --no-deps -w "$work/plain" "$work/src" 2>/dev/null
"$python" -m venv "$work/plain-venv"
"$work/plain-venv/bin/python" -m pip install --quiet "$work"/plain/convcli-*.whl
version=$("$work/plain-venv/bin/convcli" --version)
grep -q '^engine: numpy (no compiled extension' <<<"$version" \
    || { echo "check_wheel: without a compiler: $version" >&2; exit 1; }
"$work/plain-venv/bin/convcli" conv -q -k vertical "$repo/sample_images/camera.png" -o "$work/plain-out"
test -s "$work/plain-out/camera_conv-vertical-sum.png" \
    || { echo "check_wheel: without a compiler, conv wrote no output" >&2; exit 1; }
echo "check_wheel: without a compiler: ${version##*$'\n'}"
echo "check_wheel: ok"
