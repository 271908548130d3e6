/* convcli's native engine: the hot loops of its layers in C11.
 *
 * Arrays arrive through the buffer protocol (numpy is not needed to build
 * this), with their shapes as integers, checked here against the buffers'
 * lengths. Every kernel runs with the GIL released, so that the Python tile
 * runner spreads the tiles of a call over threads.
 *
 * The kernels are compiled twice (_native_kernels.h): for the baseline
 * instruction set and, on x86-64, for AVX2; the level is chosen once at
 * import from the CPU's features, and can be set for tests.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef float v4f __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef int v4i __attribute__((vector_size(16)));
typedef int v8i __attribute__((vector_size(32)));

typedef struct {
    const float *A; /* (m, H, W, C) */
    Py_ssize_t m, H, W, C;
    const float *K; /* (groups, f_h, f_w, Cg, Ng) */
    Py_ssize_t groups, f_h, f_w, Cg, Ng;
    float *Z; /* (m, n_H, n_W, n_out): output channel n * groups + g */
    Py_ssize_t n_H, n_W, n_out;
    const float *bias; /* (n_out,) */
    Py_ssize_t s, d, top, left, plane_width;
    const Py_ssize_t *tap_offset; /* (f_w,): a kernel column's place in a staged row */
} conv_args;

typedef struct {
    const float *A; /* (m, H, W) */
    Py_ssize_t m, H, W;
    const float *u, *v;
    Py_ssize_t f_h, f_w;
    float *Z; /* (m, n_H, n_W) */
    Py_ssize_t n_H, n_W;
    float bias;
    Py_ssize_t top, left, line_len, step; /* step: values between horizontal taps */
    int symmetric_u, symmetric_v; /* u[k] == u[f_h - 1 - k] for every k; likewise v */
    int stream; /* outputs stored past the caches where aligned (AVX2 build): they are many */
} sep_args;

/* The most taps of a separable pass (the rows one output reads). */
#define MAX_TAPS 4096
/* Output rows whose vertical passes share their input rows' fetches
 * (native.py's SEPARABLE_ROWS_AT_ONCE). */
#define ROWS_AT_ONCE 4
/* How far ahead (in floats) the vertical passes fetch the rows they read first. */
#define PREFETCH_VALUES 256

#include "_native_deflate.h"

#define SUFFIX _base
#define vec v4f
#define veci v4i
#define VL 4
#include "_native_kernels.h"
#undef SUFFIX
#undef vec
#undef veci
#undef VL

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_BUILD 1
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define SUFFIX _avx2
#define vec v8f
#define veci v8i
#define VL 8
#include "_native_kernels.h"
#undef SUFFIX
#undef vec
#undef veci
#undef VL
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#if defined(__x86_64__)
#define BASELINE_NAME "sse2"
#elif defined(__aarch64__)
#define BASELINE_NAME "neon"
#else
#define BASELINE_NAME "portable"
#endif

static int use_avx2 = 0;

static int cpu_has_avx2(void)
{
#ifdef HAVE_AVX2_BUILD
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* A float32 buffer of exactly `count` values, or an exception. */
static int check_floats(Py_buffer *buf, Py_ssize_t count, const char *name)
{
    if (count < 0 || buf->len != count * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd float32 values", name,
                     buf->len, count);
        return -1;
    }
    return 0;
}

static PyObject *native_correlate(PyObject *self, PyObject *args)
{
    Py_buffer A, K, Z, bias, scratch;
    conv_args a;
    Py_ssize_t i0, i1, h0, h1;
    if (!PyArg_ParseTuple(args, "y*y*w*y*w*(nnnn)(nnnnn)(nnn)(nnnn)(nnnn)", &A, &K, &Z, &bias,
                          &scratch,
                          &a.m, &a.H, &a.W, &a.C, &a.groups, &a.f_h, &a.f_w, &a.Cg, &a.Ng,
                          &a.n_H, &a.n_W, &a.n_out, &a.s, &a.d, &a.top, &a.left, &i0, &i1, &h0,
                          &h1))
        return NULL;
    int ok = 0;
    if (a.m < 0 || a.H < 0 || a.W < 0 || a.C < 1 || a.groups < 1 || a.f_h < 1 || a.f_w < 1 ||
        a.Cg < 1 || a.Ng < 1 || a.n_H < 0 || a.n_W < 0 || a.s < 1 || a.d < 1 || a.top < 0 ||
        a.left < 0 || a.groups * a.Cg != a.C || a.groups * a.Ng != a.n_out || i0 < 0 ||
        i1 > a.m || h0 < 0 || h1 > a.n_H) {
        PyErr_SetString(PyExc_ValueError, "correlate: inconsistent shapes");
        goto done;
    }
    if (check_floats(&A, a.m * a.H * a.W * a.C, "A") ||
        check_floats(&K, a.groups * a.f_h * a.f_w * a.Cg * a.Ng, "K") ||
        check_floats(&Z, a.m * a.n_H * a.n_W * a.n_out, "Z") ||
        check_floats(&bias, a.n_out, "bias"))
        goto done;
    ok = 1;
    if (i1 <= i0 || h1 <= h0 || a.n_W == 0)
        goto done;
    a.A = A.buf;
    a.K = K.buf;
    a.Z = Z.buf;
    a.bias = bias.buf;
    /* Vectors of up to 8 outputs read past the last output: planes as wide as that. */
    a.plane_width = (a.n_W + 7) / 8 * 8 + (a.f_w - 1) * a.d / a.s;
    Py_ssize_t rows = (h1 - h0 - 1) * a.s + (a.f_h - 1) * a.d + 1;
    Py_ssize_t staged = rows * a.C * a.s * a.plane_width;
    if (scratch.len < (Py_ssize_t)sizeof(float) * staged) {
        PyErr_Format(PyExc_ValueError, "correlate: scratch of %zd bytes, %zd needed",
                     scratch.len, (Py_ssize_t)sizeof(float) * staged);
        ok = 0;
        goto done;
    }
    float *stage = scratch.buf;
    Py_ssize_t *tap_offset = malloc(sizeof(Py_ssize_t) * a.f_w);
    if (tap_offset == NULL) {
        PyErr_NoMemory();
        ok = 0;
        goto done;
    }
    for (Py_ssize_t dj = 0; dj < a.f_w; dj++)
        tap_offset[dj] = (dj * a.d % a.s) * a.plane_width + dj * a.d / a.s;
    a.tap_offset = tap_offset;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2_BUILD
    if (use_avx2)
        conv_tile_avx2(&a, i0, i1, h0, h1, stage);
    else
#endif
        conv_tile_base(&a, i0, i1, h0, h1, stage);
    Py_END_ALLOW_THREADS
    free(tap_offset);
done:
    PyBuffer_Release(&scratch);
    PyBuffer_Release(&A);
    PyBuffer_Release(&K);
    PyBuffer_Release(&Z);
    PyBuffer_Release(&bias);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* Whether each pass's taps read the same backwards (a->u, a->v set): a symmetric
 * kernel adds the pair of values under equal taps first. A zero bias is made +0. */
static void set_symmetry(sep_args *a)
{
    if (a->bias == 0) /* +0: the zero sums of the passes (maybe -0) come out +0 */
        a->bias = 0.0f;
    a->symmetric_u = a->symmetric_v = 1;
    for (Py_ssize_t k = 0; k < a->f_h; k++)
        a->symmetric_u &= a->u[k] == a->u[a->f_h - 1 - k];
    for (Py_ssize_t k = 0; k < a->f_w; k++)
        a->symmetric_v &= a->v[k] == a->v[a->f_w - 1 - k];
}

static PyObject *native_separable(PyObject *self, PyObject *args)
{
    Py_buffer A, u, v, Z, scratch, flags;
    sep_args a = {0};
    Py_ssize_t i, h0, h1, bottom, right;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*(nnn)(nn)(nn)(nnnn)fnp(nnn)", &A, &u, &v, &Z,
                          &scratch, &flags, &a.m, &a.H,
                          &a.W, &a.f_h, &a.f_w, &a.n_H, &a.n_W, &a.top, &bottom, &a.left, &right,
                          &a.bias, &a.step, &a.stream, &i, &h0, &h1))
        return NULL;
    int ok = 0;
    if (a.m < 0 || a.H < 0 || a.W < 0 || a.f_h < 1 || a.f_w < 1 || a.f_h > MAX_TAPS ||
        a.step < 1 ||
        a.top < 0 || bottom < 0 ||
        a.left < 0 || right < 0 || a.n_H != a.H + a.top + bottom - a.f_h + 1 ||
        a.n_W != a.W + a.left + right - (a.f_w - 1) * a.step || a.n_H < 0 || a.n_W < 0 || i < 0 ||
        (a.m > 0 && i >= a.m) || h0 < 0 || h1 > a.n_H) {
        PyErr_SetString(PyExc_ValueError, "separable: inconsistent shapes");
        goto done;
    }
    if (check_floats(&A, a.m * a.H * a.W, "A") || check_floats(&u, a.f_h, "u") ||
        check_floats(&v, a.f_w, "v") || check_floats(&Z, a.m * a.n_H * a.n_W, "Z"))
        goto done;
    ok = 1;
    if (h1 <= h0 || a.n_W == 0 || a.m == 0)
        goto done;
    a.A = A.buf;
    a.u = u.buf;
    a.v = v.buf;
    a.Z = Z.buf;
    a.line_len = a.left + a.W + right;
    Py_ssize_t needed = (Py_ssize_t)sizeof(float) * (ROWS_AT_ONCE * a.line_len + a.W);
    if (scratch.len < needed) {
        PyErr_Format(PyExc_ValueError, "separable: scratch of %zd bytes, %zd needed",
                     scratch.len, needed);
        ok = 0;
        goto done;
    }
    float *lines = scratch.buf, *zeros = lines + ROWS_AT_ONCE * a.line_len;
    memset(zeros, 0, sizeof(float) * a.W);
    set_symmetry(&a);
    if (flags.len < h1 - h0) {
        PyErr_SetString(PyExc_ValueError, "separable: a flag for each row is needed");
        ok = 0;
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2_BUILD
    if (use_avx2) {
        separable_rows_avx2(&a, i, h0, h1, lines, zeros, flags.buf);
        _mm_sfence(); /* the streamed stores done before the caller reads them */
    } else
#endif
        separable_rows_base(&a, i, h0, h1, lines, zeros, flags.buf);
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&flags);
    PyBuffer_Release(&scratch);
    PyBuffer_Release(&A);
    PyBuffer_Release(&u);
    PyBuffer_Release(&v);
    PyBuffer_Release(&Z);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* sum_separable(pixels, u, v, row_src, col_src, Z, scratch, tags, flags,
 *               (m, H_in, W_in, C, first, n_summed), (W, left, ring_rows), bias, stream,
 *               (i, h0, h1)):
 * rows [h0, h1) of image i of Z (m, n_H, n_W) from the sum of channels [first,
 * first + n_summed) of the 8-bit pixels (m, H_in, W_in, C) as sum_separable_rows makes
 * them, stored past the caches where `stream` (AVX2); n_H and n_W follow from row_src and
 * col_src (int64, one per padded row and column, each checked to be -1 or inside the
 * picture). */
static PyObject *native_sum_separable(PyObject *self, PyObject *args)
{
    Py_buffer pixels, u, v, row_src, col_src, Z, scratch, tags, flags;
    sep_args a = {0};
    Py_ssize_t m, H_in, W_in, C, first, n_summed, W, left, ring_rows, i, h0, h1;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*w*(nnnnnn)(nnn)fp(nnn)", &pixels, &u, &v,
                          &row_src, &col_src, &Z, &scratch, &tags, &flags, &m, &H_in, &W_in,
                          &C, &first, &n_summed, &W, &left, &ring_rows, &a.bias, &a.stream, &i,
                          &h0, &h1))
        return NULL;
    int ok = 0;
    Py_ssize_t H = row_src.len / (Py_ssize_t)sizeof(int64_t);
    a.f_h = u.len / (Py_ssize_t)sizeof(float);
    a.f_w = v.len / (Py_ssize_t)sizeof(float);
    a.W = W;
    a.n_H = H - a.f_h + 1;
    a.n_W = W - a.f_w + 1;
    a.step = 1;
    if (m < 1 || H_in < 1 || W_in < 1 || C < 1 || first < 0 || n_summed < 1 || first + n_summed > C ||
        left < 0 || left + W_in > W ||
        u.len != a.f_h * (Py_ssize_t)sizeof(float) || v.len != a.f_w * (Py_ssize_t)sizeof(float) ||
        col_src.len != W * (Py_ssize_t)sizeof(int64_t) || a.f_h < 1 || a.f_w < 1 ||
        a.f_h > MAX_TAPS || a.n_H < 1 || a.n_W < 1 || ring_rows < a.f_h + ROWS_AT_ONCE - 1 ||
        ring_rows > MAX_TAPS + ROWS_AT_ONCE ||
        pixels.len != m * H_in * W_in * C || i < 0 || i >= m || h0 < 0 || h1 > a.n_H ||
        tags.len < ring_rows * (Py_ssize_t)sizeof(int64_t) || flags.len < h1 - h0 ||
        Z.len != m * a.n_H * a.n_W * (Py_ssize_t)sizeof(float) ||
        scratch.len < (Py_ssize_t)sizeof(float) * (ring_rows + ROWS_AT_ONCE + 1) * W) {
        PyErr_SetString(PyExc_ValueError, "sum_separable: inconsistent shapes");
        goto done;
    }
    const int64_t *rs = row_src.buf, *cs = col_src.buf;
    for (Py_ssize_t y = 0; y < H; y++)
        if (rs[y] < -1 || rs[y] >= H_in) {
            PyErr_SetString(PyExc_ValueError, "sum_separable: a row source outside the picture");
            goto done;
        }
    for (Py_ssize_t x = 0; x < W; x++)
        if (cs[x] < -1 || cs[x] >= W_in) {
            PyErr_SetString(PyExc_ValueError, "sum_separable: a column source outside the picture");
            goto done;
        }
    ok = 1;
    if (h1 <= h0)
        goto done;
    a.u = u.buf;
    a.v = v.buf;
    a.Z = (float *)Z.buf + i * a.n_H * a.n_W;
    set_symmetry(&a);
    float *ring = scratch.buf, *lines = ring + ring_rows * W, *zeros = lines + ROWS_AT_ONCE * W;
    memset(zeros, 0, sizeof(float) * W);
    memset(lines, 0, sizeof(float) * ROWS_AT_ONCE * W);
    const unsigned char *picture = (const unsigned char *)pixels.buf + i * H_in * W_in * C;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2_BUILD
    if (use_avx2) {
        sum_separable_rows_avx2(&a, picture, W_in, C, first, n_summed, left, rs, cs, h0, h1, ring,
                                tags.buf, ring_rows, lines, zeros, flags.buf);
        _mm_sfence(); /* the streamed stores done before the caller reads them */
    } else
#endif
        sum_separable_rows_base(&a, picture, W_in, C, first, n_summed, left, rs, cs, h0, h1, ring,
                                tags.buf, ring_rows, lines, zeros, flags.buf);
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&pixels);
    PyBuffer_Release(&u);
    PyBuffer_Release(&v);
    PyBuffer_Release(&row_src);
    PyBuffer_Release(&col_src);
    PyBuffer_Release(&Z);
    PyBuffer_Release(&scratch);
    PyBuffer_Release(&tags);
    PyBuffer_Release(&flags);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

#ifdef HAVE_AVX2_BUILD
#define DISPATCH(name, args) (use_avx2 ? name##_avx2 args : name##_base args)
#else
#define DISPATCH(name, args) (name##_base args)
#endif

static PyObject *native_sum_channels(PyObject *self, PyObject *args)
{
    Py_buffer colour, out;
    Py_ssize_t rows, W, C, out_offset, out_stride;
    if (!PyArg_ParseTuple(args, "y*w*(nnn)(nn)", &colour, &out, &rows, &W, &C, &out_offset,
                          &out_stride))
        return NULL;
    int ok = rows >= 0 && W >= 0 && C >= 1 && out_offset >= 0 && out_stride >= W &&
             colour.len == rows * W * C &&
             (rows == 0 || (Py_ssize_t)sizeof(float) * (out_offset + (rows - 1) * out_stride + W) <=
                               out.len);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "sum_channels: inconsistent shapes");
    } else {
        const unsigned char *src = colour.buf;
        float *dst = (float *)out.buf + out_offset;
        Py_BEGIN_ALLOW_THREADS
        DISPATCH(sum_channels_u8, (src, rows, W, C, dst, out_stride));
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&colour);
    PyBuffer_Release(&out);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *native_abs_at_least(PyObject *self, PyObject *args)
{
    Py_buffer x, out;
    Py_ssize_t H, W, margin, count = 0;
    float threshold;
    if (!PyArg_ParseTuple(args, "y*w*(nn)nf", &x, &out, &H, &W, &margin, &threshold))
        return NULL;
    int ok = H >= 0 && W >= 0 && margin >= 0 && x.len == (Py_ssize_t)sizeof(float) * H * W;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "abs_at_least: inconsistent shapes");
    } else {
        const float *src = x.buf;
        float *dst = out.buf;
        Py_ssize_t capacity = out.len / (Py_ssize_t)sizeof(float);
        Py_BEGIN_ALLOW_THREADS
        count = DISPATCH(abs_at_least, (src, H, W, margin, threshold, dst, capacity));
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    if (!ok)
        return NULL;
    return PyLong_FromSsize_t(count);
}

/* magnitude_bins(x, bins, inexact, (H, W), (r0, r1, c0, c1), shift): for each finite value
 * of rows [r0, r1) and columns [c0, c1) of the float32 map x, its |x| pattern's high bits
 * (pattern >> shift) counted in the int64 `bins`, and inexact[bin] set where its low
 * `shift` bits are not all zero; returns (count, largest |x|). */
static PyObject *native_magnitude_bins(PyObject *self, PyObject *args)
{
    Py_buffer x, bins, inexact;
    Py_ssize_t H, W, r0, r1, c0, c1;
    int shift;
    if (!PyArg_ParseTuple(args, "y*w*w*(nn)(nnnn)i", &x, &bins, &inexact, &H, &W, &r0, &r1, &c0,
                          &c1, &shift))
        return NULL;
    Py_ssize_t n_bins = shift >= 1 && shift <= 23 ? (Py_ssize_t)1 << (31 - shift) : 0;
    int ok = n_bins && H >= 0 && W >= 0 && x.len == (Py_ssize_t)sizeof(float) * H * W &&
             bins.len == (Py_ssize_t)sizeof(int64_t) * n_bins && inexact.len == n_bins &&
             0 <= r0 && r0 <= r1 && r1 <= H && 0 <= c0 && c0 <= c1 && c1 <= W;
    long long count = 0;
    uint32_t largest = 0;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "magnitude_bins: inconsistent shapes");
    } else {
        int64_t *counts = bins.buf;
        unsigned char *mixed = inexact.buf;
        const uint32_t low_mask = ((uint32_t)1 << shift) - 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t y = r0; y < r1; y++) {
            const uint32_t *row = (const uint32_t *)x.buf + y * W;
            for (Py_ssize_t i = c0; i < c1; i++) {
                uint32_t magnitude = row[i] & 0x7FFFFFFFu;
                if (magnitude >= 0x7F800000u) /* inf or NaN */
                    continue;
                uint32_t bin = magnitude >> shift;
                counts[bin]++;
                mixed[bin] |= (magnitude & low_mask) != 0;
                largest = magnitude > largest ? magnitude : largest;
                count++;
            }
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&bins);
    PyBuffer_Release(&inexact);
    if (!ok)
        return NULL;
    float top;
    memcpy(&top, &largest, sizeof top);
    return Py_BuildValue("Ld", count, (double)top);
}

static PyObject *native_levels_u8(PyObject *self, PyObject *args)
{
    Py_buffer x, out;
    float scale, big;
    int all_within = 0;
    if (!PyArg_ParseTuple(args, "y*w*ff", &x, &out, &scale, &big))
        return NULL;
    Py_ssize_t n = x.len / (Py_ssize_t)sizeof(float);
    int ok = x.len % (Py_ssize_t)sizeof(float) == 0 && out.len == n;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "levels_u8: one byte of levels for each value");
    } else {
        const float *src = x.buf;
        unsigned char *dst = out.buf;
        Py_BEGIN_ALLOW_THREADS
        all_within = DISPATCH(levels_u8, (src, n, scale, big, dst));
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    if (!ok)
        return NULL;
    return PyBool_FromLong(all_within);
}

static PyObject *native_mean_2x2(PyObject *self, PyObject *args)
{
    Py_buffer x, out;
    Py_ssize_t k, W, C;
    if (!PyArg_ParseTuple(args, "y*w*(nnn)", &x, &out, &k, &W, &C))
        return NULL;
    const Py_ssize_t value = (Py_ssize_t)sizeof(float);
    int ok = k >= 0 && W > 0 && C > 0 && x.len == value * 2 * k * W * C
             && out.len == value * k * ((W + 1) / 2) * C;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "mean_2x2: inconsistent shapes");
    } else {
        const float *src = x.buf;
        float *dst = out.buf;
        Py_BEGIN_ALLOW_THREADS
        DISPATCH(mean_2x2, (src, k, W, C, dst));
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *native_spread_claims(PyObject *self, PyObject *args)
{
    Py_buffer dA, claimed, dA_prev;
    Py_ssize_t m, n_H, n_W, n_C, Hc, Wc, H, W, f, i0, i1, h0, h1;
    if (!PyArg_ParseTuple(args, "y*y*w*(nnnn)(nn)(nn)n(nnnn)", &dA, &claimed, &dA_prev, &m, &n_H,
                          &n_W, &n_C, &Hc, &Wc, &H, &W, &f, &i0, &i1, &h0, &h1))
        return NULL;
    int ok = m >= 0 && n_H >= 0 && n_W >= 0 && n_C >= 0 && f >= 1 && Hc >= f * n_H &&
             Wc >= f * n_W && H >= f * n_H && W >= f * n_W && i0 >= 0 && i1 <= m && h0 >= 0 &&
             h1 <= n_H && dA.len == (Py_ssize_t)sizeof(float) * m * n_H * n_W * n_C &&
             claimed.len == m * Hc * Wc * n_C &&
             dA_prev.len == (Py_ssize_t)sizeof(float) * m * H * W * n_C;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "spread_claims: inconsistent shapes");
    } else {
        const float *d = dA.buf;
        const unsigned char *cl = claimed.buf;
        float *out = dA_prev.buf;
        /* A row of dA spread over its windows' columns (n_W * f * n_C values). */
        float *spread = PyMem_RawMalloc(sizeof(float) * (size_t)(n_W * f * n_C + 1));
        if (spread == NULL) {
            PyErr_NoMemory();
            ok = 0;
        } else {
            Py_BEGIN_ALLOW_THREADS
            DISPATCH(spread_claims,
                     (d, cl, out, n_H, n_W, n_C, Hc, Wc, H, W, f, i0, i1, h0, h1, spread));
            Py_END_ALLOW_THREADS
            PyMem_RawFree(spread);
        }
    }
    PyBuffer_Release(&dA);
    PyBuffer_Release(&claimed);
    PyBuffer_Release(&dA_prev);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* --- order statistics --------------------------------------------------------------- */

/* A float32 pattern as a key that orders as the values do; NaN of either sign after inf,
 * as numpy puts it (its key is the largest, a NaN's pattern again). */
static inline uint32_t order_key(uint32_t bits)
{
    uint32_t nan = (bits & 0x7fffffffu) > 0x7f800000u;
    return (bits ^ ((uint32_t)((int32_t)bits >> 31) | 0x80000000u)) | (0u - nan);
}

static inline uint32_t key_bits(uint32_t key)
{
    return key ^ ((key >> 31) ? 0x80000000u : 0xffffffffu);
}

/* How many of the n keys have each value of (key >> shift) & mask (at most 2048 of them),
 * into `counts`: four tallies in turn, so that runs of equal keys (a photo's candidates
 * fall in a few groups) do not wait on one count. */
static void count_groups(const uint32_t *keys, Py_ssize_t n, int shift, uint32_t mask,
                         Py_ssize_t *counts)
{
    Py_ssize_t tallies[4][2048];
    for (int t = 0; t < 4; t++)
        memset(tallies[t], 0, sizeof(Py_ssize_t) * (mask + 1));
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int t = 0; t < 4; t++)
            tallies[t][(keys[i + t] >> shift) & mask]++;
    for (; i < n; i++)
        tallies[0][(keys[i] >> shift) & mask]++;
    for (uint32_t g = 0; g <= mask; g++)
        counts[g] = tallies[0][g] + tallies[1][g] + tallies[2][g] + tallies[3][g];
}

/* The key of rank k (0: the smallest) of the n keys, selected on 11, 11 and 10 bits: each
 * pass counts the candidates by the next bits and keeps the group rank k falls in
 * (`scratch`: room for n keys), with no branch on the keys. */
static uint32_t select_key(const uint32_t *keys, Py_ssize_t n, Py_ssize_t k, uint32_t *scratch)
{
    static const int shifts[3] = {21, 10, 0};
    static const uint32_t masks[3] = {0x7ff, 0x7ff, 0x3ff};
    const uint32_t *candidates = keys;
    uint32_t prefix = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int shift = shifts[pass];
        const uint32_t mask = masks[pass];
        Py_ssize_t counts[2048];
        count_groups(candidates, n, shift, mask, counts);
        uint32_t group = 0;
        while (k >= counts[group])
            k -= counts[group++];
        prefix |= group << shift;
        if (pass == 2)
            break;
        Py_ssize_t kept = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t key = candidates[i];
            scratch[kept] = key;
            kept += ((key >> shift) & mask) == group;
        }
        candidates = scratch;
        n = kept;
    }
    return prefix;
}

/* select_ranks(values, scratch, (k0, k1)): the float32 patterns of ranks k0 <= k1 of
 * the float32 values (as np.partition orders them: NaN last), the values left as they
 * are. Rank k0 + 1 is found from k0's key in one pass more. */
static PyObject *native_select_ranks(PyObject *self, PyObject *args)
{
    Py_buffer values, scratch;
    Py_ssize_t k0, k1;
    if (!PyArg_ParseTuple(args, "y*w*(nn)", &values, &scratch, &k0, &k1))
        return NULL;
    Py_ssize_t n = values.len / (Py_ssize_t)sizeof(uint32_t);
    if (values.len % (Py_ssize_t)sizeof(uint32_t) || scratch.len < 2 * values.len || k0 < 0 ||
        k1 < k0 || k1 >= n) {
        PyBuffer_Release(&values);
        PyBuffer_Release(&scratch);
        PyErr_SetString(PyExc_ValueError, "select_ranks: inconsistent sizes or ranks");
        return NULL;
    }
    const uint32_t *bits = values.buf;
    uint32_t *keys = scratch.buf, *left = keys + n, first, second;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        keys[i] = order_key(bits[i]);
    first = select_key(keys, n, k0, left);
    second = first;
    if (k1 == k0 + 1) {
        /* Rank k0 + 1: the same key where more than k0 + 1 keys are at most it, else the
         * smallest key above it. */
        Py_ssize_t at_most = 0;
        uint32_t above = 0xffffffffu;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t key = keys[i], higher = key > first ? key : 0xffffffffu;
            at_most += key <= first;
            above = higher < above ? higher : above;
        }
        second = at_most > k1 ? first : above;
    } else if (k1 > k0) {
        second = select_key(keys, n, k1, left);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&values);
    PyBuffer_Release(&scratch);
    return Py_BuildValue("(kk)", (unsigned long)key_bits(first), (unsigned long)key_bits(second));
}

static PyObject *native_huffman_block(PyObject *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "y*n", &data, &limit))
        return NULL;
    if (data.len > ((Py_ssize_t)1 << 30)) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "huffman_block: at most 1 GiB at a time");
        return NULL;
    }
    PyObject *block = PyBytes_FromStringAndSize(NULL, huffman_block_bound(data.len));
    if (block == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    const unsigned char *src = data.buf;
    unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(block);
    Py_ssize_t written;
    Py_BEGIN_ALLOW_THREADS
    written = huffman_block(src, data.len, limit, dst);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (written < 0) {
        Py_DECREF(block);
        Py_RETURN_NONE;
    }
    if (_PyBytes_Resize(&block, written) < 0)
        return NULL;
    return block;
}

/* A TIFF's horizontal differencing (Predictor 2) undone in place: each sample plus the
 * same sample of the pixel before it, along each row, modulo 2**bits. One 8-bit sample
 * (a grey tile, the large images' case) keeps its running sum in a register: 4.4 times
 * the speed of the general loop below, which reads back what it just stored. */
static void undo_differencing_u8(unsigned char *data, Py_ssize_t rows, Py_ssize_t width)
{
    for (Py_ssize_t r = 0; r < rows; r++) {
        unsigned char *row = data + r * width;
        unsigned char sum = row[0];
        for (Py_ssize_t i = 1; i < width; i++)
            row[i] = sum = (unsigned char)(sum + row[i]);
    }
}

static PyObject *native_undo_differencing(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t rows, cols, samples, itemsize;
    if (!PyArg_ParseTuple(args, "w*(nnnn)", &buf, &rows, &cols, &samples, &itemsize))
        return NULL;
    int ok = rows >= 0 && cols >= 0 && samples > 0 && (itemsize == 1 || itemsize == 2) &&
             buf.len == rows * cols * samples * itemsize;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "undo_differencing: inconsistent shapes");
    } else if (samples == 1 && itemsize == 1) {
        unsigned char *data = buf.buf;
        Py_BEGIN_ALLOW_THREADS
        undo_differencing_u8(data, rows, cols);
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS
        const Py_ssize_t width = cols * samples;
        for (Py_ssize_t r = 0; r < rows; r++) {
            if (itemsize == 1) {
                unsigned char *row = (unsigned char *)buf.buf + r * width;
                for (Py_ssize_t i = samples; i < width; i++)
                    row[i] = (unsigned char)(row[i] + row[i - samples]);
            } else {
                uint16_t *row = (uint16_t *)buf.buf + r * width;
                for (Py_ssize_t i = samples; i < width; i++)
                    row[i] = (uint16_t)(row[i] + row[i - samples]);
            }
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&buf);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *native_vector_level(PyObject *self, PyObject *noargs)
{
    return PyUnicode_FromString(use_avx2 ? "avx2" : BASELINE_NAME);
}

static PyObject *native_vector_levels(PyObject *self, PyObject *noargs)
{
    if (cpu_has_avx2())
        return Py_BuildValue("(ss)", BASELINE_NAME, "avx2");
    return Py_BuildValue("(s)", BASELINE_NAME);
}

static PyObject *native_set_vector_level(PyObject *self, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    if (strcmp(name, BASELINE_NAME) == 0) {
        use_avx2 = 0;
    } else if (strcmp(name, "avx2") == 0 && cpu_has_avx2()) {
        use_avx2 = 1;
    } else {
        PyErr_Format(PyExc_ValueError, "vector level %R is not available here", arg);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef native_methods[] = {
    {"correlate", native_correlate, METH_VARARGS,
     "correlate(A, K, Z, bias, scratch, (m, H, W, C), (groups, f_h, f_w, Cg, Ng), (n_H, n_W, n_out), "
     "(stride, dilation, top, left), (i0, i1, h0, h1)): rows h0..h1 of images i0..i1 of Z."},
    {"separable", native_separable, METH_VARARGS,
     "separable(A, u, v, Z, scratch, not_finite, (m, H, W), (f_h, f_w), (n_H, n_W), (top, bottom, left, right), "
     "bias, step, stream, (i, h0, h1)): rows h0..h1 of image i of Z, stored past the caches where "
     "stream (AVX2); not_finite[r] set where row h0 + r holds NaN or inf."},
    {"sum_separable", native_sum_separable, METH_VARARGS,
     "sum_separable(pixels, u, v, row_src, col_src, Z, scratch, tags, not_finite, "
     "(m, H, W, C, first, n_summed), (padded width, left, ring rows), bias, stream, (i, h0, h1)): "
     "rows h0..h1 of image i of Z, the sum of 8-bit channels first..first+n_summed bordered by "
     "copies and correlated with outer(u, v)."},
    {"sum_channels", native_sum_channels, METH_VARARGS,
     "sum_channels(colour, out, (rows, W, C), (offset, stride)): the sum of the 8-bit channels "
     "of rows of W pixels, as float32, into out's rows from value `offset`, `stride` apart."},
    {"select_ranks", native_select_ranks, METH_VARARGS,
     "select_ranks(values, scratch, (k0, k1)): the float32 patterns of ranks k0 <= k1 of the "
     "float32 values, NaN last; scratch holds two uint32 per value."},
    {"abs_at_least", native_abs_at_least, METH_VARARGS,
     "abs_at_least(x, out, (H, W), margin, threshold): |x| of the values of a float32 map at "
     "least threshold, margin left out on every side, into out (as many as fit); their count."},
    {"magnitude_bins", native_magnitude_bins, METH_VARARGS,
     "magnitude_bins(x, bins, inexact, (H, W), (r0, r1, c0, c1), shift): the finite |x| of a "
     "window of a float32 map counted by their patterns' high bits; (count, largest)."},
    {"levels_u8", native_levels_u8, METH_VARARGS,
     "levels_u8(x, out, scale, big): out = rint(clip(|x| * scale, 0, 255)) as uint8; False "
     "where an |x| is NaN or over big."},
    {"mean_2x2", native_mean_2x2, METH_VARARGS,
     "mean_2x2(x, out, (k, W, C)): out (k, ceil(W / 2), C) = the 2 x 2 means of float32 rows "
     "x (2k, W, C), an odd last column with itself, summed in double."},
    {"spread_claims", native_spread_claims, METH_VARARGS,
     "spread_claims(dA, claimed, dA_prev, (m, n_H, n_W, n_C), (Hc, Wc), (H, W), f, "
     "(i0, i1, h0, h1)): dA_prev = dA * claimed over the f x f windows of those rows."},
    {"huffman_block", native_huffman_block, METH_VARARGS,
     "huffman_block(data, limit): the bytes of data as one dynamic-Huffman deflate block of "
     "literals (not the last), then an empty stored block, so that it ends on a byte boundary; "
     "None where that is more than limit bytes (limit < 0: no limit)."},
    {"undo_differencing", native_undo_differencing, METH_VARARGS,
     "undo_differencing(data, (rows, cols, samples, itemsize)): a TIFF's horizontal "
     "differencing undone in place, rows of cols pixels of 8- or 16-bit samples (native order)."},
    {"vector_level", native_vector_level, METH_NOARGS, "The vector level the kernels run at."},
    {"vector_levels", native_vector_levels, METH_NOARGS, "The vector levels this CPU runs."},
    {"set_vector_level", native_set_vector_level, METH_O, "Run the kernels at another level."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "convcli's native engine (C).", -1, native_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    use_avx2 = cpu_has_avx2();
    return PyModule_Create(&native_module);
}
