"""Checked .npy reading: a header that claims more than the file holds is one clear error."""

from __future__ import annotations

import numpy as np
import pytest

from convcli.io.npyfiles import load_npy_checked


def _lying_npy(path, shape=(100_000, 100_000, 3)):
    """A small .npy file whose header claims `shape` float32 values."""
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\0" * 16)
    return path


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
def test_a_whole_file_loads_as_numpy_saved_it(tmp_path, dtype):
    values = np.random.default_rng(0).random((5, 4, 3)).astype(dtype)
    np.save(tmp_path / "a.npy", values)
    loaded = load_npy_checked(tmp_path / "a.npy")
    np.testing.assert_array_equal(loaded, values)
    assert loaded.dtype == values.dtype


def test_a_header_claiming_more_than_the_file_is_refused_naming_it(tmp_path):
    path = _lying_npy(tmp_path / "liar.npy")
    assert path.stat().st_size < 200
    with pytest.raises(
        ValueError,
        match=r"liar\.npy: the header claims 100000x100000x3 "
        r"float32 values \(120,000,000,000 bytes\)",
    ):
        load_npy_checked(path)


def test_a_file_cut_short_by_one_byte_is_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(12.0))
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "a.npy").write_bytes(data[:-1])
    with pytest.raises(ValueError, match="a.npy: the header claims 12 float64"):
        load_npy_checked(tmp_path / "a.npy")


def test_not_a_npy_file_or_objects_are_one_line(tmp_path):
    (tmp_path / "x.npy").write_bytes(b"not numpy at all")
    with pytest.raises(ValueError, match=r"x\.npy: not a \.npy file"):
        load_npy_checked(tmp_path / "x.npy")
    np.save(tmp_path / "o.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"o\.npy: holds Python objects"):
        load_npy_checked(tmp_path / "o.npy")
