/* The kernels of convcli's native engine, compiled once per vector level.
 *
 * _native.c includes this file twice: with SUFFIX _base for the baseline
 * instruction set, and with SUFFIX _avx2 inside `#pragma GCC target`, so
 * that the same C compiles to SSE2 and to AVX2 code. Both add the same
 * products in the same order (-ffp-contract=off keeps every multiply and
 * add rounded on its own), so both give the same bits.
 *
 * Vectors are GCC/clang vector types (vec) of VL floats: eight in AVX2
 * registers, four in SSE2 or NEON ones. Which outputs share a vector does
 * not change any output's value.
 */

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, SUFFIX)

static inline vec FN(load)(const float *p)
{
    vec x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void FN(store)(float *p, vec x)
{
    memcpy(p, &x, sizeof x);
}

/* --- direct correlation ---------------------------------------------------------------- */

/* Stage the padded rows [R0, R0 + rows) of image i as planes: for each row,
 * channel and phase (column mod stride), the columns of that phase, zeros
 * outside the image. Plane x of phase ph holds padded column x * s + ph. */
static void FN(stage_rows)(const conv_args *a, Py_ssize_t i, Py_ssize_t R0, Py_ssize_t rows,
                           float *stage)
{
    const Py_ssize_t C = a->C, s = a->s, PW = a->plane_width;
    for (Py_ssize_t r = 0; r < rows; r++) {
        Py_ssize_t y = R0 + r - a->top;
        float *row = stage + r * C * s * PW;
        if (y < 0 || y >= a->H) {
            memset(row, 0, sizeof(float) * C * s * PW);
            continue;
        }
        const float *src = a->A + ((i * a->H) + y) * a->W * C;
        for (Py_ssize_t ph = 0; ph < s; ph++) {
            /* plane x holds padded column x*s + ph, image column x*s + ph - left:
             * zeros before x0 and from x1 on, the image's columns between. */
            Py_ssize_t x0 = a->left > ph ? (a->left - ph + s - 1) / s : 0;
            Py_ssize_t x1 = (a->W + a->left - ph + s - 1) / s;
            x0 = x0 < PW ? x0 : PW;
            x1 = x1 < x0 ? x0 : x1 < PW ? x1 : PW;
            for (Py_ssize_t c = 0; c < C; c++) {
                float *plane = row + (c * s + ph) * PW;
                memset(plane, 0, sizeof(float) * x0);
                memset(plane + x1, 0, sizeof(float) * (PW - x1));
            }
            const float *first = src + (x0 * s + ph - a->left) * C;
            Py_ssize_t step = s * C;
            if (C == 1 && s == 1) {
                memcpy(row + x0, first, sizeof(float) * (x1 - x0));
            } else if (C == 3) {
                float *p0 = row + ph * PW, *p1 = row + (s + ph) * PW, *p2 = row + (2 * s + ph) * PW;
                for (Py_ssize_t x = x0; x < x1; x++, first += step) {
                    p0[x] = first[0];
                    p1[x] = first[1];
                    p2[x] = first[2];
                }
            } else {
                for (Py_ssize_t x = x0; x < x1; x++, first += step)
                    for (Py_ssize_t c = 0; c < C; c++)
                        row[(c * s + ph) * PW + x] = first[c];
            }
        }
    }
}

/* NN output channels (n0 on) of group g for PV vectors of 8 outputs from
 * column w0 of output row h; `stage` holds the tile's staged rows from h0.
 * Each output adds its products over (di, dj, c) in that order from zero. */
static inline __attribute__((always_inline)) void FN(conv_block)(
    const conv_args *a, const float *stage, Py_ssize_t i, Py_ssize_t h, Py_ssize_t h0,
    Py_ssize_t g, Py_ssize_t n0, Py_ssize_t w0, const int NN, const int PV)
{
    const Py_ssize_t C = a->C, Cg = a->Cg, s = a->s, d = a->d, PW = a->plane_width;
    (void)d;
    const Py_ssize_t f_h = a->f_h, f_w = a->f_w, Ng = a->Ng;
    vec acc[8][4];
    for (int n = 0; n < NN; n++)
        for (int v = 0; v < PV; v++)
            acc[n][v] = (vec){0};
    for (Py_ssize_t di = 0; di < f_h; di++) {
        const float *row = stage + ((h - h0) * s + di * d) * C * s * PW;
        for (Py_ssize_t dj = 0; dj < f_w; dj++) {
            const float *wt = a->K + (((g * f_h + di) * f_w + dj) * Cg) * Ng + n0;
            const float *p = row + g * Cg * s * PW + a->tap_offset[dj] + w0;
            for (Py_ssize_t c = 0; c < Cg; c++, wt += Ng, p += s * PW) {
                vec x[4];
                for (int v = 0; v < PV; v++)
                    x[v] = FN(load)(p + VL * v);
                for (int n = 0; n < NN; n++) {
                    float wn = wt[n];
                    for (int v = 0; v < PV; v++)
                        acc[n][v] += x[v] * wn;
                }
            }
        }
    }
    const Py_ssize_t groups = a->groups, n_out = a->n_out, n_W = a->n_W;
    const float *bias = a->bias;
    float *zrow = a->Z + ((i * a->n_H) + h) * n_W * n_out;
    for (int v = 0; v < PV; v++) {
        float lanes[8][VL];
        for (int n = 0; n < NN; n++)
            FN(store)(lanes[n], acc[n][v]);
        Py_ssize_t w = w0 + VL * v;
        int valid = (int)(n_W - w < VL ? n_W - w : VL);
        float *z = zrow + w * n_out + n0 * groups + g;
        const float *b = bias + n0 * groups + g;
        for (int p = 0; p < valid; p++, z += n_out)
            for (int n = 0; n < NN; n++)
                z[n * groups] = lanes[n][p] + b[n * groups];
    }
}

#define CONV_BLOCK(NN, PV)                                                                     \
    static void FN(conv_block_##NN##_##PV)(const conv_args *a, const float *stage,             \
                                           Py_ssize_t i, Py_ssize_t h, Py_ssize_t h0,          \
                                           Py_ssize_t g, Py_ssize_t n0, Py_ssize_t w0)         \
    {                                                                                          \
        FN(conv_block)(a, stage, i, h, h0, g, n0, w0, NN, PV);                                 \
    }
CONV_BLOCK(1, 4)
CONV_BLOCK(1, 1)
CONV_BLOCK(2, 4)
CONV_BLOCK(2, 1)
CONV_BLOCK(3, 3)
CONV_BLOCK(3, 1)
CONV_BLOCK(4, 2)
CONV_BLOCK(4, 1)
CONV_BLOCK(5, 1)
CONV_BLOCK(6, 1)
CONV_BLOCK(7, 1)
CONV_BLOCK(8, 1)
#undef CONV_BLOCK

/* Output channels n0 .. n0 + NB * VL of a convolution with one group, for
 * PIX outputs from column w0 of row h: vectors across output channels,
 * each input value broadcast. The same sums in the same order as
 * conv_block, stored as whole vectors. */
static inline __attribute__((always_inline)) void FN(conv_channels)(
    const conv_args *a, const float *stage, Py_ssize_t i, Py_ssize_t h, Py_ssize_t h0,
    Py_ssize_t n0, Py_ssize_t w0, const int NB, const int PIX)
{
    const Py_ssize_t C = a->C, s = a->s, d = a->d, PW = a->plane_width;
    const Py_ssize_t f_h = a->f_h, f_w = a->f_w, Ng = a->Ng;
    vec acc[8][4];
    for (int q = 0; q < PIX; q++)
        for (int b = 0; b < NB; b++)
            acc[q][b] = (vec){0};
    for (Py_ssize_t di = 0; di < f_h; di++) {
        const float *row = stage + ((h - h0) * s + di * d) * C * s * PW;
        for (Py_ssize_t dj = 0; dj < f_w; dj++) {
            const float *wt = a->K + ((di * f_w + dj) * C) * Ng + n0;
            const float *p = row + a->tap_offset[dj] + w0;
            for (Py_ssize_t c = 0; c < C; c++, wt += Ng, p += s * PW) {
                vec wv[4];
                for (int b = 0; b < NB; b++)
                    wv[b] = FN(load)(wt + VL * b);
                for (int q = 0; q < PIX; q++) {
                    float x = p[q];
                    for (int b = 0; b < NB; b++)
                        acc[q][b] += x * wv[b];
                }
            }
        }
    }
    const Py_ssize_t n_out = a->n_out;
    float *z = a->Z + (((i * a->n_H) + h) * a->n_W + w0) * n_out + n0;
    for (int q = 0; q < PIX; q++, z += n_out)
        for (int b = 0; b < NB; b++)
            FN(store)(z + VL * b, acc[q][b] + FN(load)(a->bias + n0 + VL * b));
}

#define CONV_CHANNELS(NB, PIX)                                                                 \
    static void FN(conv_channels_##NB##_##PIX)(const conv_args *a, const float *stage,         \
                                               Py_ssize_t i, Py_ssize_t h, Py_ssize_t h0,      \
                                               Py_ssize_t n0, Py_ssize_t w0)                   \
    {                                                                                          \
        FN(conv_channels)(a, stage, i, h, h0, n0, w0, NB, PIX);                                \
    }
CONV_CHANNELS(1, 8)
CONV_CHANNELS(1, 1)
CONV_CHANNELS(2, 4)
CONV_CHANNELS(2, 1)
CONV_CHANNELS(4, 2)
CONV_CHANNELS(4, 1)
#undef CONV_CHANNELS

typedef void (*FN(conv_channels_fn))(const conv_args *, const float *, Py_ssize_t, Py_ssize_t,
                                     Py_ssize_t, Py_ssize_t, Py_ssize_t);

/* Output row h of a convolution with one group: whole vectors of output
 * channels by conv_channels; returns the first channel left for conv_block. */
static Py_ssize_t FN(conv_row_channels)(const conv_args *a, const float *stage, Py_ssize_t i,
                                        Py_ssize_t h, Py_ssize_t h0)
{
    static const FN(conv_channels_fn) wide[5] = {
        0, FN(conv_channels_1_8), FN(conv_channels_2_4), 0, FN(conv_channels_4_2)};
    static const FN(conv_channels_fn) narrow[5] = {
        0, FN(conv_channels_1_1), FN(conv_channels_2_1), 0, FN(conv_channels_4_1)};
    static const int pixels[5] = {0, 8, 4, 0, 2};
    Py_ssize_t n0 = 0;
    while (a->Ng - n0 >= VL) {
        int nb = a->Ng - n0 >= 4 * VL ? 4 : a->Ng - n0 >= 2 * VL ? 2 : 1;
        Py_ssize_t w0 = 0;
        for (; w0 + pixels[nb] <= a->n_W; w0 += pixels[nb])
            wide[nb](a, stage, i, h, h0, n0, w0);
        for (; w0 < a->n_W; w0++)
            narrow[nb](a, stage, i, h, h0, n0, w0);
        n0 += nb * VL;
    }
    return n0;
}

typedef void (*FN(conv_block_fn))(const conv_args *, const float *, Py_ssize_t, Py_ssize_t,
                                   Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t);

/* Output row h of image i, every group and output channel. */
static void FN(conv_row)(const conv_args *a, const float *stage, Py_ssize_t i, Py_ssize_t h,
                         Py_ssize_t h0)
{
    static const FN(conv_block_fn) wide[9] = {
        0, FN(conv_block_1_4), FN(conv_block_2_4), FN(conv_block_3_3), FN(conv_block_4_2),
        FN(conv_block_5_1), FN(conv_block_6_1), FN(conv_block_7_1), FN(conv_block_8_1)};
    static const FN(conv_block_fn) narrow[9] = {
        0, FN(conv_block_1_1), FN(conv_block_2_1), FN(conv_block_3_1), FN(conv_block_4_1),
        FN(conv_block_5_1), FN(conv_block_6_1), FN(conv_block_7_1), FN(conv_block_8_1)};
    static const int wide_vectors[9] = {0, 4, 4, 3, 2, 1, 1, 1, 1};
    Py_ssize_t first = a->groups == 1 ? FN(conv_row_channels)(a, stage, i, h, h0) : 0;
    for (Py_ssize_t g = 0; g < a->groups; g++) {
        for (Py_ssize_t n0 = first; n0 < a->Ng; n0 += 8) {
            int nn = (int)(a->Ng - n0 < 8 ? a->Ng - n0 : 8);
            Py_ssize_t step = VL * wide_vectors[nn], w0 = 0;
            for (; w0 + step <= a->n_W; w0 += step)
                wide[nn](a, stage, i, h, h0, g, n0, w0);
            for (; w0 < a->n_W; w0 += VL)
                narrow[nn](a, stage, i, h, h0, g, n0, w0);
        }
    }
}

/* Output rows [h0, h1) of images [i0, i1); `stage` holds the staged rows of one image. */
static void FN(conv_tile)(const conv_args *a, Py_ssize_t i0, Py_ssize_t i1, Py_ssize_t h0,
                          Py_ssize_t h1, float *stage)
{
    Py_ssize_t rows = (h1 - h0 - 1) * a->s + (a->f_h - 1) * a->d + 1;
    for (Py_ssize_t i = i0; i < i1; i++) {
        FN(stage_rows)(a, i, h0 * a->s, rows, stage);
        for (Py_ssize_t h = h0; h < h1; h++)
            FN(conv_row)(a, stage, i, h, h0);
    }
}

/* --- separable correlation ------------------------------------------------------------- */

/* One value of a pass: taps t over f values p[0], p[step], ...: in the order of the
 * taps, the first term taken as it is (not added to a zero: a sum that is zero may then
 * be -0, which the bias added last makes +0, as a sum from zero gives it); a symmetric
 * kernel adds each pair of values that share a tap first, (p[k] + p[f-1-k]) * t[k],
 * then the middle one. */
#define PASS_SUM(T, acc, value, t, f, symmetric)                                              \
    do {                                                                                       \
        Py_ssize_t half = (symmetric) ? (f) / 2 : 0;                                           \
        if (half > 0) {                                                                        \
            acc = (value(0) + value((f) - 1)) * (t)[0];                                        \
            for (Py_ssize_t k = 1; k < half; k++)                                              \
                acc += (value(k) + value((f) - 1 - k)) * (t)[k];                               \
            if ((f) % 2)                                                                       \
                acc += value(half) * (t)[half];                                                \
        } else {                                                                               \
            acc = value(half) * (t)[half];                                                     \
            for (Py_ssize_t k = half + 1; k < (f); k++)                                        \
                acc += value(k) * (t)[k];                                                      \
        }                                                                                      \
    } while (0)

/* PASS_SUM for NV vectors at once (independent sums, so that they overlap):
 * value(k, b) is vector b's value under tap k. */
#define PASS_SUMS(NV, acc, value, t, f, symmetric)                                             \
    do {                                                                                       \
        Py_ssize_t half = (symmetric) ? (f) / 2 : 0;                                           \
        if (half > 0) {                                                                        \
            float t0 = (t)[0];                                                                 \
            for (int b = 0; b < NV; b++)                                                       \
                acc[b] = (value(0, b) + value((f) - 1, b)) * t0;                               \
            for (Py_ssize_t k = 1; k < half; k++) {                                            \
                float tk = (t)[k];                                                             \
                for (int b = 0; b < NV; b++)                                                   \
                    acc[b] += (value(k, b) + value((f) - 1 - k, b)) * tk;                      \
            }                                                                                  \
            if ((f) % 2)                                                                       \
                for (int b = 0; b < NV; b++)                                                   \
                    acc[b] += value(half, b) * (t)[half];                                      \
        } else {                                                                               \
            float t0 = (t)[half];                                                              \
            for (int b = 0; b < NV; b++)                                                       \
                acc[b] = value(half, b) * t0;                                                  \
            for (Py_ssize_t k = half + 1; k < (f); k++) {                                      \
                float tk = (t)[k];                                                             \
                for (int b = 0; b < NV; b++)                                                   \
                    acc[b] += value(k, b) * tk;                                                \
            }                                                                                  \
        }                                                                                      \
    } while (0)

/* Vectors of a vertical pass at once: 8 independent sums keep the adders busy (4 left a
 * 15x15 Gaussian's vertical pass about 5% slower). */
#define VERTICAL_VECTORS 8
/* The vertical passes of `count` consecutive output rows (up to ROWS_AT_ONCE;
 * row r reads the input rows rows[r .. r + f_h)) into lines[r], W columns,
 * column block by column block: the input rows they share are fetched once
 * from the L2 cache. */
static void FN(vertical_rows)(const sep_args *a, const float **rows, float **lines, int count)
{
    const Py_ssize_t W = a->W, W8 = W - W % VL, f_h = a->f_h;
    const float *u = a->u;
    const int sym_u = a->symmetric_u;
    Py_ssize_t x = 0;
    for (; x + VERTICAL_VECTORS * VL <= W; x += VERTICAL_VECTORS * VL) {
        /* The rows this band reads first come from memory: fetch them ahead. */
        for (int r = 0; r < count; r++) {
            const float *fresh = rows[f_h - 1 + r] + x + PREFETCH_VALUES;
            for (int line = 0; line < VERTICAL_VECTORS * VL; line += 16)
                __builtin_prefetch(fresh + line, 0, 3);
        }
        for (int r = 0; r < count; r++) {
            const float **rr = rows + r;
            vec acc[VERTICAL_VECTORS];
#define ROW_VALUES(k, b) FN(load)(rr[k] + x + VL * (b))
            PASS_SUMS(VERTICAL_VECTORS, acc, ROW_VALUES, u, f_h, sym_u);
#undef ROW_VALUES
            for (int b = 0; b < VERTICAL_VECTORS; b++)
                FN(store)(lines[r] + x + VL * b, acc[b]);
        }
    }
    for (int r = 0; r < count; r++) {
        const float **rr = rows + r;
        float *t = lines[r];
        Py_ssize_t xx = x;
        for (; xx < W8; xx += VL) {
            vec acc = (vec){0};
#define ROW_VALUE(k) FN(load)(rr[k] + xx)
            PASS_SUM(vec, acc, ROW_VALUE, u, f_h, sym_u);
#undef ROW_VALUE
            FN(store)(t + xx, acc);
        }
        for (; xx < W; xx++) {
            float acc = 0;
#define ROW_VALUE(k) rr[k][xx]
            PASS_SUM(float, acc, ROW_VALUE, u, f_h, sym_u);
#undef ROW_VALUE
            t[xx] = acc;
        }
    }
}

/* The horizontal pass of a vertical result `line` (padded columns) into the
 * n_W outputs `out`, plus the bias; returns whether any is NaN or inf. The
 * taps are `step` values apart: 1, or the channels of interleaved pixels
 * (each channel then passes with the same kernel, as it would alone). */
static int FN(horizontal_row)(const sep_args *a, const float *line, float *out)
{
    const Py_ssize_t n_W = a->n_W, n8 = n_W - n_W % VL, f_w = a->f_w, step = a->step;
    const float *v = a->v;
    const int sym_v = a->symmetric_v;
    /* Read once: the stores to out could change a float or int of *a, for the compiler. */
    const float bias = a->bias;
    const int stream = a->stream && !((uintptr_t)out & 31); /* aligned, as Z rows of 8k values */
    vec finite = (vec){0}; /* x - x is 0 for finite x, NaN for NaN and inf */
    Py_ssize_t w = 0;
    for (; w + 4 * VL <= n_W; w += 4 * VL) {
        vec acc[4] = {{0}, {0}, {0}, {0}};
#define LINE_VALUES(j, b) FN(load)(line + w + VL * (b) + (j) * step)
        PASS_SUMS(4, acc, LINE_VALUES, v, f_w, sym_v);
#undef LINE_VALUES
        for (int b = 0; b < 4; b++) {
            acc[b] += bias;
            finite += acc[b] - acc[b];
#if VL == 8
            if (stream) /* out + w is aligned as out is: w is a multiple of 32 */
                _mm256_stream_ps(out + w + VL * b, (__m256)acc[b]);
            else
#endif
                FN(store)(out + w + VL * b, acc[b]);
        }
    }
    for (; w < n8; w += VL) {
        vec acc = (vec){0};
#define LINE_VALUE(j) FN(load)(line + w + (j) * step)
        PASS_SUM(vec, acc, LINE_VALUE, v, f_w, sym_v);
#undef LINE_VALUE
        acc += bias;
        finite += acc - acc;
        FN(store)(out + w, acc);
    }
    float tail = 0;
    for (; w < n_W; w++) {
        float acc = 0;
#define LINE_VALUE(j) line[w + (j) * step]
        PASS_SUM(float, acc, LINE_VALUE, v, f_w, sym_v);
#undef LINE_VALUE
        out[w] = acc + bias;
        tail += out[w] - out[w];
    }
    float lanes[VL];
    FN(store)(lanes, finite);
    for (int k = 0; k < VL; k++)
        tail += lanes[k];
    return tail != 0; /* NaN != 0 */
}

/* Output rows [h0, h1) of image i of a one-channel image correlated with
 * outer(u, v), ROWS_AT_ONCE rows at a time: the vertical passes into the
 * lines (padded columns, zeros at the sides; `line_len` values apart from
 * `lines`), then the horizontal passes. Rows of the padding read `zeros`, so
 * that a row's value is the same whether its zeros are padding or image.
 * not_finite[h - h0] says whether row h holds NaN or inf. */
static void FN(separable_rows)(const sep_args *a, Py_ssize_t i, Py_ssize_t h0, Py_ssize_t h1,
                               float *lines, const float *zeros, char *not_finite)
{
    const Py_ssize_t W = a->W, left = a->left, f_h = a->f_h;
    const float *image = a->A + i * a->H * W;
    const float *rows[MAX_TAPS + ROWS_AT_ONCE];
    float *line[ROWS_AT_ONCE];
    memset(lines, 0, sizeof(float) * a->line_len * ROWS_AT_ONCE);
    for (int r = 0; r < ROWS_AT_ONCE; r++)
        line[r] = lines + r * a->line_len + left;
    for (Py_ssize_t h = h0; h < h1; h += ROWS_AT_ONCE) {
        int count = (int)(h1 - h < ROWS_AT_ONCE ? h1 - h : ROWS_AT_ONCE);
        for (Py_ssize_t k = 0; k < f_h + count - 1; k++) {
            Py_ssize_t y = h + k - a->top;
            rows[k] = (y >= 0 && y < a->H) ? image + y * W : zeros;
        }
        FN(vertical_rows)(a, rows, line, count);
        for (int r = 0; r < count; r++) {
            float *out = a->Z + (i * a->n_H + h + r) * a->n_W;
            not_finite[h + r - h0] = (char)FN(horizontal_row)(a, line[r] - left, out);
        }
    }
}

/* --- channel sums and levels ------------------------------------------------------------ */

#if VL == 8
/* The 24 bytes of 8 pixels of 3 8-bit channels from `q`, 4 pixels in each 128-bit lane
 * (12 of the 16 bytes each lane loads: 28 bytes from `q` are read, so the callers leave a
 * row's last 10 pixels to their plain loops). */
static inline __m256i FN(load8_rgb)(const unsigned char *q)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q)),
                                   _mm_loadu_si128((const __m128i *)(q + 12)), 1);
}

/* The sums of the first pixels of a row of 3-channel 8-bit pixels, 8 at a time; returns
 * how many it did (the rest to the caller). Each 128-bit lane takes 4 pixels (12 of the 16
 * bytes it loads, so a row's last 10 pixels are left to the caller: no read past the row),
 * spreads them to 4 bytes each, R G B 0, and adds them in pairs, then the pairs: exact
 * integer sums, the same as the plain loop's. 0.2 of the time GCC's vectorised loop
 * takes. */
static Py_ssize_t FN(sum3_u8)(const unsigned char *p, Py_ssize_t W, float *o)
{
    const __m256i spread = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                            0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    Py_ssize_t x = 0;
    for (; x + 10 <= W; x += 8) {
        __m256i bytes = FN(load8_rgb)(p + 3 * x);
        __m256i pairs = _mm256_maddubs_epi16(_mm256_shuffle_epi8(bytes, spread), ones8);
        _mm256_storeu_ps(o + x, _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones16)));
    }
    return x;
}

/* Channel `first` (0 to 2) of the first pixels of a row of 3-channel 8-bit pixels, 8 at a
 * time, read as sum3_u8 reads them; returns how many it did (the rest to the caller).
 * Each 128-bit lane spreads its 4 pixels' bytes of that channel to 4 bytes each, the
 * other three zero: the channel's values as 32-bit integers. */
static Py_ssize_t FN(pick3_u8)(const unsigned char *p, Py_ssize_t W, int first, float *o)
{
    char order[16];
    for (int j = 0; j < 16; j++)
        order[j] = (char)(j % 4 == 0 ? 3 * (j / 4) + first : -1);
    const __m256i spread = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)order));
    Py_ssize_t x = 0;
    for (; x + 10 <= W; x += 8) {
        __m256i bytes = FN(load8_rgb)(p + 3 * x);
        _mm256_storeu_ps(o + x, _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, spread)));
    }
    return x;
}
#endif

/* The sum of the C 8-bit channels of `rows` rows of W pixels, as float32,
 * into rows of `out` that are `out_stride` values apart (exact: at most
 * 255 * C, far below 2**24). */
static void FN(sum_channels_u8)(const unsigned char *colour, Py_ssize_t rows, Py_ssize_t W,
                                Py_ssize_t C, float *out, Py_ssize_t out_stride)
{
    for (Py_ssize_t y = 0; y < rows; y++) {
        const unsigned char *p = colour + y * W * C;
        float *o = out + y * out_stride;
        if (C == 1) {
            for (Py_ssize_t x = 0; x < W; x++)
                o[x] = (float)p[x];
        } else if (C == 3) {
#if VL == 8
            Py_ssize_t x = FN(sum3_u8)(p, W, o);
#else
            Py_ssize_t x = 0;
#endif
            for (; x < W; x++)
                o[x] = (float)(p[3 * x] + p[3 * x + 1] + p[3 * x + 2]);
        } else if (C == 4) {
            for (Py_ssize_t x = 0; x < W; x++)
                o[x] = (float)(p[4 * x] + p[4 * x + 1] + p[4 * x + 2] + p[4 * x + 3]);
        } else {
            for (Py_ssize_t x = 0; x < W; x++) {
                int total = 0;
                for (Py_ssize_t c = 0; c < C; c++)
                    total += p[x * C + c];
                o[x] = (float)total;
            }
        }
    }
}

/* The sum of channels [first, first + n_summed) of a row of W 8-bit pixels of C channels, as
 * float32, into `o`: all of them as sum_channels_u8 makes it, or one channel alone. */
static void FN(sum_some_channels_u8)(const unsigned char *p, Py_ssize_t W, Py_ssize_t C,
                                     Py_ssize_t first, Py_ssize_t n_summed, float *o)
{
    if (first == 0 && n_summed == C) {
        FN(sum_channels_u8)(p, 1, W, C, o, W);
        return;
    }
    Py_ssize_t x = 0;
#if VL == 8
    if (C == 3 && n_summed == 1)
        x = FN(pick3_u8)(p, W, (int)first, o);
#endif
    for (; x < W; x++) {
        int total = 0;
        for (Py_ssize_t c = first; c < first + n_summed; c++)
            total += p[x * C + c];
        o[x] = (float)total;
    }
}

/* The sum of channels [first, first + n_summed) of the C 8-bit channels of pixel row `pixels`
 * (W_in pixels) as row `row` of a padded sum: the inside from column `left` on, the
 * border columns copies of it (col_src[x]: the inside column padded column x copies, -1
 * for a zero). */
static void FN(bordered_sum_row)(const unsigned char *pixels, Py_ssize_t W_in, Py_ssize_t C,
                                 Py_ssize_t first, Py_ssize_t n_summed, Py_ssize_t left,
                                 const int64_t *col_src, Py_ssize_t W, float *row)
{
    FN(sum_some_channels_u8)(pixels, W_in, C, first, n_summed, row + left);
    for (Py_ssize_t x = 0; x < W; x++) {
        if (x == left)
            x += W_in;
        if (x < W)
            row[x] = col_src[x] < 0 ? 0.0f : row[left + col_src[x]];
    }
}

/* Output rows [h0, h1) of the sum of channels [first, first + n_summed) of one 8-bit
 * picture (H_in rows of W_in pixels of C channels; one channel alone where n_summed is 1),
 * bordered by copies (row_src[y]: the picture row padded row y
 * copies, -1 for zeros; col_src likewise for the columns, `left` of them before the
 * inside), correlated with outer(u, v): the values separable_rows gives of that
 * padded sum, without it. a->W is the padded width. Each padded row is summed once
 * into `ring` (ring_rows rows of a->W; tags[s] the padded row slot s holds), so the
 * vertical passes read rows from the cache. not_finite as separable_rows. */
static void FN(sum_separable_rows)(const sep_args *a, const unsigned char *pixels,
                                   Py_ssize_t W_in, Py_ssize_t C, Py_ssize_t first,
                                   Py_ssize_t n_summed, Py_ssize_t left, const int64_t *row_src,
                                   const int64_t *col_src, Py_ssize_t h0, Py_ssize_t h1,
                                   float *ring, int64_t *tags,
                                   Py_ssize_t ring_rows, float *lines, const float *zeros,
                                   char *not_finite)
{
    const Py_ssize_t W = a->W, f_h = a->f_h;
    const float *rows[MAX_TAPS + ROWS_AT_ONCE];
    float *line[ROWS_AT_ONCE];
    for (int r = 0; r < ROWS_AT_ONCE; r++)
        line[r] = lines + r * W;
    for (Py_ssize_t s = 0; s < ring_rows; s++)
        tags[s] = -1;
    for (Py_ssize_t h = h0; h < h1; h += ROWS_AT_ONCE) {
        int count = (int)(h1 - h < ROWS_AT_ONCE ? h1 - h : ROWS_AT_ONCE);
        /* f_h + count - 1 <= ring_rows consecutive rows: each has a slot of its own. */
        for (Py_ssize_t k = 0; k < f_h + count - 1; k++) {
            Py_ssize_t y = h + k, slot = y % ring_rows;
            if (row_src[y] < 0) {
                rows[k] = zeros;
                continue;
            }
            float *row = ring + slot * W;
            if (tags[slot] != y) {
                FN(bordered_sum_row)(pixels + row_src[y] * W_in * C, W_in, C, first, n_summed, left,
                                     col_src, W, row);
                tags[slot] = y;
            }
            rows[k] = row;
        }
        FN(vertical_rows)(a, rows, line, count);
        for (int r = 0; r < count; r++) {
            float *out = a->Z + (h + r) * a->n_W;
            not_finite[h + r - h0] = (char)FN(horizontal_row)(a, line[r], out);
        }
    }
}

/* |x| of the values of a (H, W) float32 map at least `threshold`, leaving out
 * `margin` rows and columns on every side, into `out` (up to `capacity` of
 * them, in row order); returns how many there are. */
static Py_ssize_t FN(abs_at_least)(const float *x, Py_ssize_t H, Py_ssize_t W, Py_ssize_t margin,
                                   float threshold, float *out, Py_ssize_t capacity)
{
    Py_ssize_t count = 0;
    const Py_ssize_t end = W - margin;
    for (Py_ssize_t y = margin; y < H - margin; y++) {
        const float *row = x + y * W;
        Py_ssize_t i = margin;
        /* Four vectors at a time first: most hold no value at the threshold and are
         * passed over after one test. */
        for (; i + 4 * VL <= end; i += 4 * VL) {
#if VL == 8
            /* Each vector's mask of the values at the threshold, then those values alone. */
            const __m256 sign = _mm256_set1_ps(-0.0f), at = _mm256_set1_ps(threshold);
            unsigned masks[4], any = 0;
            for (int b = 0; b < 4; b++) {
                __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(row + i + VL * b));
                masks[b] = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, at, _CMP_GE_OQ));
                any |= masks[b];
            }
            if (!any)
                continue;
            for (int b = 0; b < 4; b++) {
                for (unsigned mask = masks[b]; mask; mask &= mask - 1) {
                    if (count < capacity)
                        out[count] = fabsf(row[i + VL * b + __builtin_ctz(mask)]);
                    count++;
                }
            }
#else
            veci at_least = (veci){0};
            for (int b = 0; b < 4; b++) {
                veci bits = (veci)FN(load)(row + i + VL * b) & 0x7fffffff; /* |x| */
                at_least |= (vec)bits >= threshold;
            }
            int any = 0;
            for (int k = 0; k < VL; k++)
                any |= at_least[k];
            if (!any)
                continue;
            for (int k = 0; k < 4 * VL; k++) {
                float a = fabsf(row[i + k]);
                if (a >= threshold) {
                    if (count < capacity)
                        out[count] = a;
                    count++;
                }
            }
#endif
        }
        for (; i < end; i++) {
            float a = fabsf(row[i]);
            if (a >= threshold) {
                if (count < capacity)
                    out[count] = a;
                count++;
            }
        }
    }
    return count;
}

/* 8-bit levels of n float32 values: rint(clip(|x| * scale, 0, 255)), as numpy's
 * float32 abs, multiply, clip and rint give them (round half to even: adding
 * and taking away 2**23 rounds a float32 in 0..255 so). Returns 0 where an
 * |x| is NaN or over `big` (the levels are then not used), else 1. */
static int FN(levels_u8)(const float *x, Py_ssize_t n, float scale, float big,
                         unsigned char *out)
{
    const float round = 8388608.0f; /* 2**23 */
    int ok = 1;
    Py_ssize_t i = 0;
#if VL == 8
    /* 32 values at a time, the same operations on each (max and min give 0 for NaN, as
     * the comparisons below do), their levels packed to bytes in order. */
    const __m256 sign = _mm256_set1_ps(-0.0f), vscale = _mm256_set1_ps(scale);
    const __m256 vbig = _mm256_set1_ps(big), zero = _mm256_setzero_ps();
    const __m256 top = _mm256_set1_ps(255.0f), vround = _mm256_set1_ps(round);
    __m256 fine = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (; i + 32 <= n; i += 32) {
        __m256i q[4];
        for (int b = 0; b < 4; b++) {
            __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i + 8 * b));
            fine = _mm256_and_ps(fine, _mm256_cmp_ps(a, vbig, _CMP_LE_OQ));
            __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(a, vscale), zero), top);
            v = _mm256_sub_ps(_mm256_add_ps(v, vround), vround);
            q[b] = _mm256_cvttps_epi32(v);
        }
        __m256i words = _mm256_packs_epi32(q[0], q[1]), words2 = _mm256_packs_epi32(q[2], q[3]);
        __m256i bytes = _mm256_packus_epi16(words, words2); /* 4 bytes of each q per lane */
        bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(out + i), bytes);
    }
    ok = _mm256_movemask_ps(fine) == 0xff;
#endif
    for (; i < n; i++) {
        float a = fabsf(x[i]);
        ok &= a <= big;
        float v = a * scale;
        v = v > 0.0f ? v : 0.0f; /* and NaN to 0, never converted */
        v = v > 255.0f ? 255.0f : v;
        v = (v + round) - round;
        out[i] = (unsigned char)(int)v;
    }
    return ok;
}

/* --- a pyramid's 2 x 2 means --------------------------------------------------------------- */

/* out (k, ceil(W / 2), C) = the means of the 2 x 2 blocks of x (2k, W, C), an odd last
 * column with itself: ((top + bottom) + (top' + bottom')) / 4 in double, rounded to float,
 * as numpy sums the row pairs, then the column pairs, in float64. */
static void FN(mean_2x2)(const float *x, Py_ssize_t k, Py_ssize_t W, Py_ssize_t C, float *out)
{
    const Py_ssize_t half = (W + 1) / 2;
    for (Py_ssize_t r = 0; r < k; r++) {
        const float *top = x + 2 * r * W * C, *bottom = top + W * C;
        float *row = out + r * half * C;
        for (Py_ssize_t j = 0; j < half; j++) {
            const Py_ssize_t left = 2 * j * C;
            const Py_ssize_t right = 2 * j + 1 < W ? left + C : left;
            for (Py_ssize_t c = 0; c < C; c++) {
                double pair = (double)top[left + c] + (double)bottom[left + c];
                double next = (double)top[right + c] + (double)bottom[right + c];
                row[j * C + c] = (float)((pair + next) / 4.0);
            }
        }
    }
}

/* --- max pooling's backward pass --------------------------------------------------------- */

/* dA_prev = dA * claimed over the f x f windows of output rows [h0, h1) of
 * images [i0, i1), as numpy's multiply of dA by the boolean claims: the
 * pixels not claimed get 0 * dA (NaN where dA is NaN or inf). */
static void FN(spread_claims)(const float *dA, const unsigned char *claimed, float *dA_prev,
                              Py_ssize_t n_H, Py_ssize_t n_W, Py_ssize_t n_C, Py_ssize_t Hc,
                              Py_ssize_t Wc, Py_ssize_t H, Py_ssize_t W, Py_ssize_t f,
                              Py_ssize_t i0, Py_ssize_t i1, Py_ssize_t h0, Py_ssize_t h1,
                              float *spread)
{
    const Py_ssize_t run = f * n_C, len = n_W * run; /* run: one window row of one output */
    for (Py_ssize_t i = i0; i < i1; i++) {
        for (Py_ssize_t h = h0; h < h1; h++) {
            /* Row h of dA, each value repeated over its window's f columns: then each of
             * the window rows is one contiguous product with its claims. */
            const float *d = dA + ((i * n_H + h) * n_W) * n_C;
            for (Py_ssize_t w = 0; w < n_W; w++)
                for (Py_ssize_t q = 0; q < f; q++)
                    for (Py_ssize_t c = 0; c < n_C; c++)
                        spread[w * run + q * n_C + c] = d[w * n_C + c];
            for (Py_ssize_t r = 0; r < f; r++) {
                Py_ssize_t y = h * f + r;
                const unsigned char *cl = claimed + ((i * Hc + y) * Wc) * n_C;
                float *out = dA_prev + ((i * H + y) * W) * n_C;
                for (Py_ssize_t k = 0; k < len; k++)
                    out[k] = spread[k] * (float)cl[k];
            }
        }
    }
}

#undef PASS_SUM
#undef PASS_SUMS
#undef VERTICAL_VECTORS
#undef FN
#undef CAT
#undef CAT2
