"""Regressions of hostile inputs and hostile names: frame counts, sizes, terminals, secrets."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import tifffile
from helpers import assert_one_line_error, make_image, read, run
from PIL import Image

from convcli.io.images import open_image
from convcli.io.storage import for_terminal, redact, remember_secrets


def _apng_claiming(path, frames: int, claimed: int):
    images = [Image.new("RGB", (8, 6), (40 * k, 0, 0)) for k in range(frames)]
    images[0].save(path, save_all=True, append_images=images[1:], duration=50)
    data = bytearray(path.read_bytes())
    at = data.find(b"acTL")
    data[at + 4 : at + 8] = struct.pack(">I", claimed)
    data[at + 12 : at + 16] = struct.pack(">I", zlib.crc32(bytes(data[at : at + 12])))
    path.write_bytes(bytes(data))
    return path


def test_an_apng_claiming_two_billion_frames_has_the_frames_it_holds(tmp_path):
    # acTL's count was taken as it was: tuple(range(2**31 - 1)), 13 GB in two minutes.
    path = _apng_claiming(tmp_path / "a.png", 4, 2**31 - 1)
    with open_image(path) as source:
        assert source.frame_count == 4
    result = run("pool", path, "-o", tmp_path / "out", "-n")
    assert result.exit_code == 0, result.output
    assert "4 frames" in result.stdout
    result = run("pool", path, "-o", tmp_path / "out", "-q")
    assert result.exit_code == 0, result.output
    with Image.open(tmp_path / "out" / "a_pool-max-f2-s2.png") as written:
        assert written.n_frames == 4


def test_an_apng_claiming_fewer_frames_keeps_its_word(tmp_path):
    path = _apng_claiming(tmp_path / "a.png", 4, 3)
    with open_image(path) as source:
        assert source.frame_count == 3


@pytest.mark.parametrize("size", ["", " ", "b", "k", "MiB"])
def test_a_memory_size_without_a_number_is_refused_in_one_line(tmp_path, size):
    image = make_image(tmp_path / "a.png")
    assert_one_line_error(
        run("pool", image, "-o", tmp_path / "o", "--memory", size), 2, "--memory", "is not a size"
    )


def test_control_characters_in_a_file_name_are_escaped_in_every_message(tmp_path):
    (tmp_path / "bad\nFAKE LINE.png").write_bytes(b"junk")
    make_image(tmp_path / "e\x1b[31mred.png")
    result = run(
        "pool",
        tmp_path / "bad\nFAKE LINE.png",
        tmp_path / "e\x1b[31mred.png",
        "-o",
        tmp_path / "o",
        "-v",
    )
    assert result.exit_code == 1
    assert "\x1b" not in result.stderr and "\r" not in result.stderr
    lines = result.stderr.splitlines()
    assert any("bad\\nFAKE LINE.png: not an image file" in line for line in lines)
    assert not any(line.startswith("FAKE LINE") for line in lines)
    assert any("e\\x1b[31mred.png" in line for line in lines)
    dry = run("pool", "-n", tmp_path / "e\x1b[31mred.png", "-o", tmp_path / "o2")
    assert "\x1b" not in dry.stdout and "e\\x1b[31mred.png" in dry.stdout


def test_for_terminal_escapes_c0_and_c1_controls_and_keeps_the_rest():
    assert for_terminal("a\tb\rc\x7fd\x9be é") == "a\\tb\\rc\\x7fd\\x9be é"


def test_a_secret_of_the_arguments_is_hidden_where_a_library_quotes_it_in_pieces():
    remember_secrets(
        [
            "s3://AKIAEXAMPLE:Sup3rSecretValue@bad_bucket!/x",
            "--storage-option",
            "secret=AnotherSecret1",
        ]
    )
    quoted = 'Invalid bucket name "AKIAEXAMPLE:Sup3rSecretValue@bad_bucket!" (AnotherSecret1)'
    hidden = redact(quoted)
    assert "Sup3rSecretValue" not in hidden and "AKIAEXAMPLE" not in hidden
    assert "AnotherSecret1" not in hidden and "bad_bucket!" in hidden


def test_a_secret_in_a_bad_bucket_url_never_reaches_the_terminal(tmp_path):
    pytest.importorskip("s3fs")
    image = make_image(tmp_path / "a.png")
    result = run("pool", image, "-o", "s3://AKIAEXAMPLE2:TopSecretPw99@bad_bucket!/x")
    assert result.exit_code != 0
    assert "TopSecretPw99" not in result.output and "AKIAEXAMPLE2" not in result.output


def test_a_tiff_of_many_pages_is_parsed_a_bounded_number_of_times_a_page(tmp_path, monkeypatch):
    # 50,000 one-pixel pages to an APNG took over 120 s, growing faster than the pages.
    import numpy as np
    import tifffile

    pages = 300
    with tifffile.TiffWriter(tmp_path / "p.tif") as tif:
        for k in range(pages):
            tif.write(np.full((1, 2), k % 251, np.uint8), contiguous=False)
    parsed = []
    page_init = tifffile.TiffPage.__init__
    monkeypatch.setattr(
        tifffile.TiffPage,
        "__init__",
        lambda self, *a, **k: parsed.append(1) or page_init(self, *a, **k),
    )
    result = run(
        "pool",
        "--size",
        "1",
        "--stride",
        "1",
        tmp_path / "p.tif",
        "-o",
        tmp_path / "out.png",
        "-q",
        "-j",
        "1",
    )
    assert result.exit_code == 0, result.output
    assert len(parsed) <= 3 * pages
    with Image.open(tmp_path / "out.png") as written:
        assert written.n_frames == pages
        written.seek(pages - 1)
        assert np.asarray(written.convert("L"))[0, 1] == (pages - 1) % 251


def test_outputs_never_go_through_a_symbolic_link_in_the_output_folder(tmp_path):
    # -r wrote outputs and a manifest into victim/ through out/sub -> victim.
    (tmp_path / "in" / "sub").mkdir(parents=True)
    make_image(tmp_path / "in" / "a.png")
    make_image(tmp_path / "in" / "sub" / "b.png")
    (tmp_path / "victim").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sub").symlink_to(tmp_path / "victim")
    result = run("pool", "-r", tmp_path / "in", "-o", tmp_path / "out")
    assert result.exit_code == 1
    assert "a symbolic link inside the output folder" in result.stderr
    assert list((tmp_path / "victim").iterdir()) == []
    assert (tmp_path / "out" / "a_pool-max-f2-s2.png").is_file()


def test_a_manifest_that_is_a_symbolic_link_is_never_appended_to(tmp_path):
    image = make_image(tmp_path / "a.png")
    (tmp_path / "target.txt").write_text("kept\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "convcli-manifest.jsonl").symlink_to(tmp_path / "target.txt")
    result = run("pool", image, "-o", tmp_path / "out")
    assert "the manifest could not be written: a symbolic link" in result.stderr
    assert (tmp_path / "target.txt").read_text() == "kept\n"


def test_a_symbolic_link_that_names_nothing_at_an_output_name_is_an_existing_file(tmp_path):
    """Planned as absent but found at the write, it made every run say 'done, 0 written'
    (exit 0) for ever: it is refused, with or without --overwrite, as a file convcli did
    not write (not skipped as an output that is done), and replaced itself (never written
    through) when named."""
    image = make_image(tmp_path / "a.png")
    out = tmp_path / "out"
    out.mkdir()
    link = out / "a_pool-max-f2-s2.png"
    link.symlink_to(tmp_path / "nowhere.png")
    for extra in ([], ["-n"], ["--overwrite"]):  # the dry run says what the run does
        result = run("pool", image, "-o", out, *extra)
        assert result.exit_code == 1 and "was not written by convcli and is kept" in result.stderr
    assert link.is_symlink() and not (tmp_path / "nowhere.png").exists()
    result = run("pool", image, "-o", link, "--overwrite")
    assert result.exit_code == 0, result.output
    assert not link.is_symlink() and read(link).shape == (15, 20, 3)
    assert not (tmp_path / "nowhere.png").exists()


def test_a_run_that_writes_nothing_leaves_no_folder_it_made(tmp_path, monkeypatch):
    """Every file failing at its write (a full disk) left the -o folder, and the parents
    made for it, empty behind; a folder that was there before the run stays."""
    import errno

    from convcli.io import safeio

    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "in").mkdir()
    images = [make_image(tmp_path / "in" / f"{k}.png") for k in range(2)]
    monkeypatch.setattr(safeio, "_PUBLISH_CHECKS", [full_disk])
    result = run("pool", *images, "-o", tmp_path / "new" / "deeper" / "out")
    assert result.exit_code == 1 and "no space left on the device" in result.stderr
    assert "no outputs written" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
    (tmp_path / "there").mkdir()
    assert run("pool", *images, "-o", tmp_path / "there" / "out").exit_code == 1
    assert list((tmp_path / "there").iterdir()) == []  # "there" stays, "out" goes
    result = run("pool", images[0], "-o", tmp_path / "named" / "x.png")
    assert result.exit_code == 1 and not (tmp_path / "named").exists()
    monkeypatch.setattr(safeio, "_PUBLISH_CHECKS", [])
    assert run("pool", *images, "-o", tmp_path / "new" / "out").exit_code == 0
    assert len(list((tmp_path / "new" / "out").glob("*.png"))) == 2


def test_a_manifest_line_cut_short_by_a_full_disk_is_taken_back_and_said(tmp_path, monkeypatch):
    """A full disk lets write take part of a line and refuses the rest: the part is cut
    off again (the next run would append to half a line), and the run says so, exit 1."""
    import errno
    import os

    from convcli.app import manifest

    image = make_image(tmp_path / "a.png")
    (tmp_path / "out").mkdir()
    earlier = '{"output": "earlier.png"}\n'
    (tmp_path / "out" / "convcli-manifest.jsonl").write_text(earlier)
    real_write, calls = os.write, []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, data[:10])  # the first 10 bytes fit
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(manifest.os, "write", full_disk)
    result = run("pool", image, "-o", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert "the manifest could not be written: No space left on device" in result.stderr
    assert len(calls) == 2 and calls[1] == calls[0] - 10  # the rest was tried
    assert (tmp_path / "out" / "convcli-manifest.jsonl").read_text() == earlier
    assert (tmp_path / "out" / "a_pool-max-f2-s2.png").is_file()


def test_convclis_own_lines_stay_lines_while_a_name_is_escaped(tmp_path):
    # The dW grid of grad conv is convcli's own text of several lines.
    image = make_image(tmp_path / "x\nFAKE.png")
    result = run("grad", "conv", "-k", "vertical", image, "-o", tmp_path / "g")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert any("x\\nFAKE.png: " in line and "dW of vertical" in line for line in lines)
    heading = next(k for k, line in enumerate(lines) if "dW of vertical" in line)
    grid = lines[heading + 1 : heading + 4]
    assert all(len(row.split()) == 3 for row in grid)
    assert not any(line.startswith("FAKE") for line in lines)


def test_a_small_work_size_is_said_in_a_unit_that_shows_it(tmp_path):
    # "its work would take about 0.0 GiB; over the --memory budget"
    import numpy as np
    import tifffile

    tifffile.imwrite(tmp_path / "a.tif", np.zeros((200, 300), np.uint8))
    result = run("pool", "-v", "--memory", "1M", tmp_path / "a.tif", "-o", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert "0.0 GiB" not in result.stderr
    assert "MiB; over the --memory budget" in result.stderr


@pytest.mark.parametrize("greeting", [b"", b"HTTP/1.1 400 Bad Request\r\n\r\n"])
def test_a_scheduler_address_that_is_no_dask_scheduler_is_one_line(tmp_path, monkeypatch, greeting):
    # An HTTP server's port hung for minutes, or ended in "Unable to allocate 3.07 EiB".
    import contextlib
    import socket
    import threading

    pytest.importorskip("distributed")
    from convcli.engines import dask

    monkeypatch.setattr(dask, "HANDSHAKE_SECONDS", 0.5)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer():
        with listener:
            connection, _ = listener.accept()
            with connection, contextlib.suppress(OSError):  # the client leaves as it likes
                connection.sendall(greeting)
                connection.recv(1)  # held open until the client leaves

    threading.Thread(target=answer, daemon=True).start()
    image = make_image(tmp_path / "a.png")
    result = run("pool", image, "-o", tmp_path / "out", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert result.exit_code == 1
    assert_one_line_error(result, 1, f"127.0.0.1:{port} is not a Dask scheduler")
    assert not (tmp_path / "out").exists()


def test_a_zarr_store_declaring_huge_sides_is_refused_from_its_header(tmp_path):
    # A tiny store declaring 2^40 x 2^40 gave numpy's "iterator is too large"; one declaring
    # 100000 x 100000 was written out (2.56 GB) whatever --max-pixels said.
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(tmp_path / "huge.zarr"), mode="w")
    group.create_array("0", shape=(2**40, 2**40), dtype="uint8", chunks=(256, 256))
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
            "datasets": [
                {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}
            ],
        }
    ]
    for extra, said in (
        ((), "over the limit of 89,478,485"),
        (("--max-pixels", "0"), "over the 2,147,483,647 rows or columns"),
    ):
        for dry in ((), ("-n",)):
            result = run("pool", tmp_path / "huge.zarr", "-o", tmp_path / "out", *extra, *dry)
            assert result.exit_code == 1, result.output
            assert said in result.stderr and "iterator" not in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_zarr_store_of_the_longest_sides_is_refused_in_convclis_words(tmp_path):
    # 2147483647 x 2147483647 is within the side limit, but its samples are more bytes than
    # numpy can address: "array is too big; `arr.size * arr.dtype.itemsize` is larger ...".
    zarr = pytest.importorskip("zarr")
    side = 2**31 - 1
    zarr.open_array(
        str(tmp_path / "huge.zarr"), mode="w", shape=(side, side), dtype="uint8", chunks=(1, 1)
    )
    for dry in ((), ("-n",)):
        result = run(
            "pool", tmp_path / "huge.zarr", "-o", tmp_path / "out", "--max-pixels", "0", *dry
        )
        assert result.exit_code == 1, result.output
        assert "pixels an image can have here" in result.stderr
        assert "numpy" not in result.stderr and "itemsize" not in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_tiff_of_strips_of_zero_rows_says_so(tmp_path):
    # "self.rowsperstrip=0 < 1": tifffile's own words.
    import numpy as np
    import tifffile

    path = tmp_path / "rps.tif"
    tifffile.imwrite(path, np.zeros((20, 30), np.uint8), rowsperstrip=5)
    with tifffile.TiffFile(path, mode="r+") as tif:
        tif.pages[0].tags["RowsPerStrip"].overwrite(0)
    for extra in ((), ("--memory", "64K")):
        result = run("pool", path, "-o", tmp_path / "out", *extra)
        assert result.exit_code == 1
        assert "cannot decode the image: its strips of 0 rows hold nothing" in result.stderr
        assert "self." not in result.stderr


def test_a_tiny_budget_still_gives_strips_of_a_useful_height(tmp_path):
    # --memory 64K cut a 1249x977 photo into strips of a row or two: 150 times the whole run.
    import numpy as np
    import tifffile

    from convcli.app import streamed
    from convcli.app.ops import ConvOp
    from convcli.app.plan import Task
    from convcli.io.formats import open_regions
    from convcli.kernels import get_kernel

    tifffile.imwrite(tmp_path / "a.tif", np.zeros((977, 1249, 3), np.uint8), photometric="rgb")
    task = Task(
        str(tmp_path / "a.tif"),
        str(tmp_path / "out"),
        "a",
        ConvOp((get_kernel("emboss"),)),
        memory=64 << 10,
    )
    with open_regions(task.source) as source:
        rows = [
            streamed.plan_in_strips(task, source, [], budget)[2]
            for budget in (64 << 10, streamed.MIN_STRIP_WORK)
        ]
    assert rows[0] == rows[1] > 16


def test_a_run_in_strips_does_not_load_dask_outside_a_cluster(tmp_path):
    # Asking whether it ran on a Dask worker imported distributed: half a second a run.
    import subprocess
    import sys

    import numpy as np
    import tifffile

    tifffile.imwrite(tmp_path / "a.tif", np.zeros((300, 400), np.uint8))
    script = (
        "import sys\nfrom convcli.cli import main\n"
        f"try:\n    main(['pool', {str(tmp_path / 'a.tif')!r}, '-o', "
        f"{str(tmp_path / 'out')!r}, '--memory', '64K', '-v', '-j', '1'])\n"
        "except SystemExit as exc:\n    assert not exc.code\n"
        "print('distributed' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "processed in strips" in done.stderr
    assert done.stdout.strip() == "False"


# --- --max-pixels: a stack's frames together, and files that store no image -----------------


@pytest.mark.parametrize("kind", ["tif", "gif"])
def test_max_pixels_counts_the_frames_of_a_stack_together(tmp_path, kind):
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 255, (3, 100, 100), dtype=np.uint8)
    path = tmp_path / f"s.{kind}"
    if kind == "tif":
        tifffile.imwrite(path, frames, photometric="minisblack")
    else:
        pictures = [Image.fromarray(frame) for frame in frames]
        pictures[0].save(path, save_all=True, append_images=pictures[1:])
    out = tmp_path / "out"
    result = run("pool", path, "-o", out, "--frames", "all", "--max-pixels", "29999", "-q")
    assert_one_line_error(result, 1, "s." + kind, "3 frames read are 30,000 pixels", "29,999")
    assert not out.exists() or not list(out.iterdir())
    result = run("pool", path, "-o", out, "--frames", "all", "--max-pixels", "30000", "-q")
    assert result.exit_code == 0, result.output
    # The whole image (a GIF's colours, as PNG), or its one grey channel (-L, a TIFF)
    (written,) = out.glob(f"s_pool-max-f2-s2*.{'tiff' if kind == 'tif' else 'png'}")
    with Image.open(written) as image:
        assert image.n_frames == 3 and image.size == (50, 50)


def _tiles_of_no_bytes(path, size: int = 2048):
    """A deflated tiled TIFF whose tiles' byte counts all say 0: a size and no image."""
    pixels = np.random.default_rng(3).integers(0, 255, (size, size), dtype=np.uint8)
    tifffile.imwrite(path, pixels, tile=(256, 256), compression="zlib")
    with tifffile.TiffFile(path, mode="r+") as tif:
        counts = tif.pages[0].tags["TileByteCounts"]
        counts.overwrite((0,) * len(counts.value))
    return path


@pytest.mark.parametrize("memory", [None, "1000000"])  # read whole, and in strips
def test_a_tiff_of_empty_tiles_is_refused_unless_max_pixels_is_0(tmp_path, memory):
    path = _tiles_of_no_bytes(tmp_path / "empty.tif")
    out = tmp_path / "out"
    extra = ["--memory", memory] if memory else []
    result = run("pool", path, "-o", out, "-q", *extra)
    assert_one_line_error(result, 1, "empty.tif", "stores 0 bytes of image data", "--max-pixels 0")
    assert not out.exists() or not list(out.iterdir())
    result = run("pool", path, "-o", out, "-q", "--max-pixels", "0", *extra)
    assert result.exit_code == 0, result.output
    [written] = out.glob("empty_*")
    assert not read(written).any()  # the fill value: all it had


def test_a_zarr_store_without_chunks_is_refused_before_anything_is_written(tmp_path):
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "empty.zarr"
    zarr.create_array(str(path), shape=(3000, 3000, 4), chunks=(512, 512, 4), dtype="float32")
    out = tmp_path / "out"
    result = run("pool", path, "-o", out, "-q", "--max-pixels", "10000000")
    assert_one_line_error(result, 1, "empty.zarr", "bytes of image data", "--max-pixels 0")
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.parametrize(
    ("dtype", "options"),
    [
        ("uint8", {"channels": "sum", "combine": "magnitude"}),
        ("float32", {"channels": "sum", "combine": "magnitude"}),
        ("uint8", {"channels": "each"}),
    ],
)
@pytest.mark.parametrize("budget", [64 << 10, 1 << 20, 20 << 20])
def test_strips_read_each_row_about_once_whatever_the_budget(tmp_path, dtype, options, budget):
    # A strip computes whole engine row tiles (128 or 256 rows of a 3000-pixel-wide image):
    # strips of 10 rows computed a tile each, every row 24 times (11x the whole run's time).
    # The native engine computes each row on its own, and its strips no whole tiles.
    import numpy as np
    import tifffile

    from convcli.app import streamed
    from convcli.app.ops import ConvOp
    from convcli.app.plan import Task
    from convcli.app.strips import plan_strips, row_geometry
    from convcli.io.formats import open_regions
    from convcli.kernels import get_kernel, parse_kernel_spec
    from convcli.layers._engine import native

    path = tmp_path / "wide.tif"
    tifffile.imwrite(path, np.zeros((2500, 3000, 3), dtype), photometric="rgb", tile=(256, 256))
    (tmp_path / "k.txt").write_text("0.3 -1.7 2.9\n1.1 0.5 -0.25\n-2 0.7 1.3\n")
    kernels = (parse_kernel_spec(str(tmp_path / "k.txt")), get_kernel("emboss"))
    op = ConvOp(kernels, dilation=2, border="reflect", **options)
    task = Task(str(path), str(tmp_path / "out"), "wide", op, memory=budget)
    with open_regions(task.source) as source:
        rows = streamed.plan_in_strips(task, source, [], budget)[2]
        geometry = row_geometry(op, source.height, source.width)
        strips = plan_strips(geometry, source.height, rows)
    assert rows % geometry.align == 0 and len(strips) > 1
    read = sum(strip.in1 - strip.in0 for strip in strips)
    if native.active():  # each row computed on its own: strips of any height, and their halo
        assert geometry.align == 1 and read <= 1.5 * source.height, (read, len(strips))
    else:  # whole tiles, and the tile above each strip's first (for its pad) dropped
        assert geometry.align > 1 and read <= 2.1 * source.height, (read, len(strips))
