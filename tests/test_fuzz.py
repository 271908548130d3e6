"""Fuzz tests of every public library function (hypothesis).

Arrays of every dtype a caller may pass (bool, int8, uint16, float16,
float32, float64, complex, object), shapes with zeros, NaN and inf,
non-contiguous and read-only arrays; hyperparameters of the wrong type,
huge, negative or missing. Whatever comes in, a function either returns a
result of the documented shape or raises ValueError or TypeError whose
message names one of its arguments; it never emits a numpy warning (the
suite turns warnings into errors), never modifies its input and never
allocates far more than its input and output.

The default profile runs 50 examples per test; ``CONVCLI_HYPOTHESIS_PROFILE=thorough``
runs 1000.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from convcli import (
    conv_backward,
    conv_forward,
    conv_single_step,
    create_mask_from_window,
    depthwise_conv_backward,
    depthwise_conv_forward,
    distribute_value,
    pad_images,
    pool_backward,
    pool_forward,
    zero_pad,
)
from convcli.choices import MAPPINGS, PAD_MODES, POOL_MODE_ALIASES, POOL_MODES
from convcli.levels.mapping import luminance, to_levels

DTYPES = ["bool", "int8", "uint16", "float16", "float32", "float64", "complex128", "object"]
REAL = DTYPES[:6]

# Bytes a call may allocate beyond SLACK times its input and output: the
# engines' scratch buffers (a few MB at most).
SCRATCH = 16 << 20
SLACK = 16

# Integer hyperparameters: sensible ones mostly, and every kind of wrong one.
GOOD_INTS = st.integers(0, 4)
BAD_VALUES = st.sampled_from(
    [
        -1,
        2.0,
        2.5,
        "2",
        None,
        True,
        np.int64(2),
        np.uint8(3),
        np.float32(1.0),
        2**31,
        2**63,
        10**6,
        float("nan"),
        float("inf"),
        [2],
    ]
)
HPARAM = st.one_of(GOOD_INTS, GOOD_INTS, GOOD_INTS, BAD_VALUES)


@st.composite
def arrays(draw, shape, dtypes=DTYPES):
    """An array of `shape` in one of `dtypes`, with NaN and inf, maybe strided or read-only."""
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    strided = draw(st.booleans())
    full = tuple(n * 2 if strided else n for n in shape)
    values = rng.standard_normal(full) * 4
    if dtype.kind in "fc" and values.size and draw(st.booleans()):
        flat = values.reshape(-1)
        flat[rng.integers(0, flat.size, 2)] = draw(
            st.sampled_from([np.nan, np.inf, -np.inf, 1e300])
        )
    if dtype.kind == "O":
        arr = np.empty(full, object)
        arr.reshape(-1)[:] = [float(v) for v in values.reshape(-1)]
    else:
        with np.errstate(all="ignore"):
            arr = values.astype(dtype)
    if strided and shape:
        arr = arr[tuple(slice(None, None, 2) for _ in shape)]
    if draw(st.booleans()):
        arr.setflags(write=False)
    return arr


def shapes(ndim, low=0, high=5):
    return st.tuples(*[st.integers(low, high)] * ndim)


def snapshot(*values):
    """Copies of the array arguments, to check that nothing was modified."""
    return [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in values]


def unchanged(before, after):
    for a, b in zip(before, after, strict=True):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape
            if a.dtype.kind == "O":
                assert all(x is y or x == y or x != x for x, y in zip(a.flat, b.flat, strict=True))
            else:
                assert a.tobytes() == b.tobytes(), "an input array was modified"


def nbytes(*values):
    total = 0
    for v in values:
        if isinstance(v, np.ndarray):
            total += v.size * max(8, v.itemsize)
        elif isinstance(v, (tuple, list)):
            total += nbytes(*v)
    return total


def call(fn, *args, names, **kwargs):
    """fn(*args, **kwargs), or None when it raised a ValueError/TypeError naming an argument."""
    before = snapshot(*args, *kwargs.values())
    tracemalloc.start()
    try:
        result = fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        assert any(name in message for name in names), (
            f"{fn.__name__}: {type(exc).__name__} {message!r} names none of {names}"
        )
        result = None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    unchanged(before, list(args) + list(kwargs.values()))
    limit = SLACK * (nbytes(*args, *kwargs.values()) + nbytes(result)) + SCRATCH
    assert peak <= limit, f"{fn.__name__} allocated {peak} bytes (limit {limit})"
    return result


def hparams(keys, draw):
    """A hyperparameter dict with `keys` (some may be missing), or something else."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from([None, [1, 2], "stride=1", {}]))
    return {k: draw(HPARAM) for k in keys if draw(st.integers(0, 14))}


def is_int(value, minimum):
    return (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and value >= minimum
    )


# --- padding ------------------------------------------------------------------------------------


@given(st.data())
def test_zero_pad(data):
    X = data.draw(arrays(data.draw(shapes(4))))
    pad = data.draw(HPARAM)
    out = call(zero_pad, X, pad, names=("X", "pad"))
    if out is not None:
        p = int(pad)
        m, H, W, C = X.shape
        assert out.shape == (m, H + 2 * p, W + 2 * p, C) and out.dtype == X.dtype


@given(st.data())
def test_pad_images(data):
    if data.draw(st.integers(0, 2)):  # two in three: arguments that make a result
        X = data.draw(arrays(data.draw(shapes(4, 1)), REAL))
        width = data.draw(st.one_of(GOOD_INTS, st.tuples(*[GOOD_INTS] * 4)))
        mode = data.draw(st.sampled_from(PAD_MODES))
        value = data.draw(st.sampled_from([0, 1, np.int8(1)]))
    else:
        X = data.draw(arrays(data.draw(shapes(4))))
        width = data.draw(st.one_of(HPARAM, st.tuples(*[HPARAM] * 4), st.just((1, 2))))
        mode = data.draw(st.sampled_from([*PAD_MODES, "x"]))
        value = data.draw(st.sampled_from([0.5, -3, 300, 70000, 1e300, np.nan, np.inf, "0"]))
    out = call(pad_images, X, width, mode=mode, value=value, names=("X", "width", "mode", "value"))
    if out is not None:
        t, b, left, r = (int(width),) * 4 if np.ndim(width) == 0 else map(int, width)
        m, H, W, C = X.shape
        assert out.shape == (m, H + t + b, W + left + r, C) and out.dtype == X.dtype


# --- convolution --------------------------------------------------------------------------------


@given(st.data())
def test_conv_single_step(data):
    shape = data.draw(shapes(3))
    dtypes = REAL if data.draw(st.integers(0, 2)) else DTYPES
    a = data.draw(arrays(shape, dtypes))
    W = data.draw(arrays(shape if data.draw(st.integers(0, 4)) else data.draw(shapes(3)), dtypes))
    b = data.draw(st.one_of(arrays((1, 1, 1), dtypes), arrays(data.draw(shapes(3))), st.just(0.5)))
    out = call(conv_single_step, a, W, b, names=("a_slice_prev", "W", "b"))
    if out is not None:
        assert np.shape(out) == ()


@st.composite
def conv_args(draw, depthwise):
    if draw(st.integers(0, 2)):  # two in three: arguments that make a result
        s, p = draw(st.integers(1, 4)), draw(st.integers(0, 2))
        f = draw(st.integers(1, 3))
        m, C, n_K = draw(shapes(3, 0, 3))
        H, Wd = draw(st.integers(max(0, f - 2 * p), 6)), draw(st.integers(max(0, f - 2 * p), 6))
        n_K = max(1, n_K)
        n_out = n_K * C if depthwise else n_K
        A = draw(arrays((m, H, Wd, C), REAL))
        W, b = draw(arrays((f, f, C, n_K), REAL)), draw(arrays((1, 1, 1, n_out), REAL))
        return A, W, b, {"stride": s, "pad": p}
    m, H, Wd, C = draw(shapes(4))
    f_h, f_w, n_K = draw(shapes(3, 0, 3))
    if draw(st.integers(0, 3)):  # usually a square kernel with matching channels
        f_w = f_h
        W = draw(arrays((f_h, f_w, C, n_K)))
    else:
        W = draw(arrays(draw(shapes(4))))
    n_out = n_K * C if depthwise else n_K
    b = draw(arrays((1, 1, 1, n_out) if draw(st.integers(0, 4)) else draw(shapes(4))))
    return draw(arrays((m, H, Wd, C))), W, b, hparams(("stride", "pad"), draw)


def conv_shape(A, W, hp, depthwise):
    m, H, Wd, C = A.shape
    s, p = int(hp["stride"]), int(hp["pad"])
    n_out = W.shape[3] * C if depthwise else W.shape[3]
    return (m, (H + 2 * p - W.shape[0]) // s + 1, (Wd + 2 * p - W.shape[1]) // s + 1, n_out)


def check_conv(data, forward, backward, depthwise):
    A, W, b, hp = data.draw(conv_args(depthwise))
    names = ("A_prev", "W", "b", "hparameters")
    out = call(forward, A, W, b, hp, names=names)
    if out is None:
        return
    Z, cache = out
    assert Z.shape == conv_shape(A, W, hp, depthwise)
    assert cache[0] is A and cache[3] is hp
    if data.draw(st.integers(0, 5)):
        dZ = data.draw(arrays(Z.shape, REAL))
    else:
        dZ = data.draw(arrays(data.draw(shapes(4))))
    grads = call(backward, dZ, cache, names=("dZ", "cache", *names))
    if grads is not None:
        assert [g.shape for g in grads] == [A.shape, W.shape, b.shape]


@given(st.data())
def test_conv_forward_backward(data):
    check_conv(data, conv_forward, conv_backward, False)


@given(st.data())
def test_depthwise_forward_backward(data):
    check_conv(data, depthwise_conv_forward, depthwise_conv_backward, True)


# --- pooling ------------------------------------------------------------------------------------


@given(st.data())
def test_pool_forward_backward(data):
    if data.draw(st.integers(0, 2)):  # two in three: arguments that make a result
        f = data.draw(st.integers(1, 3))
        A = data.draw(
            arrays(
                data.draw(
                    st.tuples(
                        st.integers(0, 3), st.integers(f, 6), st.integers(f, 6), st.integers(0, 3)
                    )
                ),
                REAL,
            )
        )
        hp = {"f": f, "stride": data.draw(st.integers(1, 4))}
        mode = data.draw(st.sampled_from([*POOL_MODES, *POOL_MODE_ALIASES]))
    else:
        A = data.draw(arrays(data.draw(shapes(4))))
        hp = hparams(("f", "stride"), data.draw)
        mode = data.draw(st.sampled_from([*POOL_MODES, *POOL_MODE_ALIASES, "min", None]))
    names = ("A_prev", "hparameters", "mode")
    out = call(pool_forward, A, hp, mode, names=names)
    if out is None:
        return
    P, cache = out
    m, H, W, C = A.shape
    f, s = int(hp["f"]), int(hp["stride"])
    assert P.shape == (m, (H - f) // s + 1, (W - f) // s + 1, C)
    if data.draw(st.integers(0, 5)):
        dA = data.draw(arrays(P.shape, REAL))
    else:
        dA = data.draw(arrays(data.draw(shapes(4))))
    grad = call(pool_backward, dA, cache, mode, names=("dA", "cache", *names))
    if grad is not None:
        assert grad.shape == A.shape


@given(st.data())
def test_create_mask_from_window(data):
    x = data.draw(arrays(data.draw(st.one_of(shapes(2), shapes(3)))))
    mask = call(create_mask_from_window, x, names=("x",))
    if mask is not None:
        assert mask.shape == x.shape and mask.dtype == bool and mask.sum() == 1


@given(st.data())
def test_distribute_value(data):
    if data.draw(st.integers(0, 2)):  # two in three: arguments that make a result
        dz = data.draw(st.one_of(arrays((), REAL), arrays((1,), REAL), st.just(2.5)))
        shape = data.draw(st.tuples(st.integers(1, 4), st.integers(1, 4)))
    else:
        dz = data.draw(st.one_of(arrays(()), arrays((2,)), st.sampled_from([1, "1", None])))
        shape = data.draw(
            st.one_of(st.tuples(HPARAM, HPARAM), st.sampled_from([(2,), None, "22", (2, 2, 2)]))
        )
    out = call(distribute_value, dz, shape, names=("dz", "shape"))
    if out is not None:
        assert out.shape == (int(shape[0]), int(shape[1]))


# --- levels -------------------------------------------------------------------------------------


@given(st.data())
def test_to_levels(data):
    values = data.draw(arrays(data.draw(st.one_of(shapes(2), shapes(3)))))
    method = data.draw(st.sampled_from([*MAPPINGS, "x"]))
    white = data.draw(st.sampled_from([255, 1.0, 0, -1, np.nan, np.inf]))
    depth = data.draw(st.sampled_from([8, 16, 12]))
    out = call(
        to_levels,
        values,
        method,
        white=white,
        depth=depth,
        names=("values", "method", "white", "depth"),
    )
    if out is not None:
        assert out.shape == values.shape
        assert out.dtype == (np.uint8 if depth == 8 else np.uint16)


@given(st.data())
def test_luminance(data):
    pixels = data.draw(arrays(data.draw(st.one_of(shapes(3), shapes(4), shapes(1)))))
    out = call(luminance, pixels, names=("pixels",))
    if out is not None:
        assert out.shape == pixels.shape[:-1] + (1,) and out.dtype == np.float32
