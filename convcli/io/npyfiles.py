"""Reading ``.npy`` files whose headers are checked against their size first."""

from __future__ import annotations

import math
import os

import numpy as np


def load_npy_checked(path) -> np.ndarray:
    """The array in the ``.npy`` file `path`, once its header is checked against the file.

    A header claiming more data than the file holds (a 100-byte file
    announcing 100000x100000x3 values) is refused before anything is
    allocated; object arrays are never unpickled.

    Parameters
    ----------
    path : str or os.PathLike
        A local ``.npy`` file.

    Returns
    -------
    ndarray
        The array, as :func:`numpy.load` reads it.

    Raises
    ------
    ValueError
        The file is not a ``.npy`` file, holds objects, or is shorter than
        its header says; the message names the file.
    OSError
        The file cannot be read.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     np.save(f"{folder}/a.npy", np.eye(2))
    ...     load_npy_checked(f"{folder}/a.npy").shape
    (2, 2)
    """
    fmt = np.lib.format
    with open(path, "rb") as f:
        try:
            version = fmt.read_magic(f)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dtype = read(f)
        except (ValueError, SyntaxError, EOFError) as exc:
            raise ValueError(f"{path}: not a .npy file ({' '.join(str(exc).split())})") from None
        if dtype.hasobject:
            raise ValueError(f"{path}: holds Python objects, not numbers")
        needed = math.prod(shape) * dtype.itemsize
        held = os.fstat(f.fileno()).st_size - f.tell()
        if held < needed:
            raise ValueError(
                f"{path}: the header claims {'x'.join(map(str, shape))} {dtype} "
                f"values ({needed:,} bytes) but the file holds {held:,}"
            )
        f.seek(0)
        return np.load(f, allow_pickle=False)
