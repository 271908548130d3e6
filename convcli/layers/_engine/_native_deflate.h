/* Huffman-only deflate blocks (RFC 1951) for PNG rows, included by _native.c.
 *
 * The rows of an edge map or a photo, Up-filtered, hold few repeats that an
 * LZ77 search could find: their deflate is mostly the Huffman coding of single
 * bytes. One pass counts the bytes, a prefix code is built from the counts (at
 * most 14 bits: deflate allows 15), and a second pass writes each byte's
 * code: one dynamic block, then an empty stored block, so that the block ends
 * on a byte boundary and any deflate stream can go on after it.
 */

#include <stdint.h>

#define LITLEN_CODES 257   /* the 256 literals and the end of block */
#define END_OF_BLOCK 256
#define LITLEN_MAX_BITS 15
#define LITERAL_MAX_BITS 14  /* this encoder's limit: four codes and 7 bits fit in 64 */
#define LENGTH_CODES 19    /* the alphabet that codes the code lengths */
#define LENGTH_MAX_BITS 7

/* The order in which a block header gives the lengths of the code-length codes. */
static const unsigned char length_code_order[LENGTH_CODES] = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
                                                              11, 4,  12, 3, 13, 2, 14, 1, 15};

/* Depths of the leaves of a Huffman tree for the n counts (every count > 0, n >= 2),
 * into depth[]: the two-queue construction on the leaves sorted by count. */
static void huffman_depths(const uint64_t *count, int n, unsigned char *depth)
{
    int order[LITLEN_CODES];
    uint64_t weight[2 * LITLEN_CODES];
    int parent[2 * LITLEN_CODES];
    for (int i = 0; i < n; i++)
        order[i] = i;
    /* Insertion sort by count, then by index: at most 257 leaves. */
    for (int i = 1; i < n; i++) {
        int leaf = order[i], j = i - 1;
        while (j >= 0 && count[order[j]] > count[leaf]) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = leaf;
    }
    for (int i = 0; i < n; i++)
        weight[i] = count[order[i]];
    /* Nodes n.. are the internal ones, made in order of weight. */
    int next_leaf = 0, next_node = n, made = n;
    while (made < 2 * n - 1) {
        int pick[2];
        for (int k = 0; k < 2; k++) {
            if (next_leaf < n && (next_node >= made || weight[next_leaf] <= weight[next_node]))
                pick[k] = next_leaf++;
            else
                pick[k] = next_node++;
        }
        weight[made] = weight[pick[0]] + weight[pick[1]];
        parent[pick[0]] = parent[pick[1]] = made;
        made++;
    }
    /* The root is the last node made; a node's depth is its parent's plus one. */
    int node_depth[2 * LITLEN_CODES];
    node_depth[made - 1] = 0;
    for (int node = made - 2; node >= 0; node--)
        node_depth[node] = node_depth[parent[node]] + 1;
    for (int i = 0; i < n; i++)
        depth[order[i]] = (unsigned char)node_depth[i];
}

/* Code lengths of a prefix code for count[0..n) (0: the symbol is not used), none
 * over max_bits. At least two symbols get a code, as zlib's decoder wants a complete
 * code: where fewer are used, symbols 0 and 1 are given one. Where the optimal code
 * is too deep, the counts are halved (each kept at least 1) until it fits: a code of
 * equal counts is at most ceil(log2(n)) deep. */
static void code_lengths(const uint64_t *count, int n, int max_bits, unsigned char *lengths)
{
    uint64_t used_count[LITLEN_CODES];
    int symbol[LITLEN_CODES];
    unsigned char depth[LITLEN_CODES];
    int used = 0;
    for (int s = 0; s < n; s++) {
        lengths[s] = 0;
        if (count[s]) {
            symbol[used] = s;
            used_count[used++] = count[s];
        }
    }
    for (int s = 0; used < 2; s++) {
        if (!count[s]) {
            symbol[used] = s;
            used_count[used++] = 1;
        }
    }
    for (;;) {
        huffman_depths(used_count, used, depth);
        int deepest = 0;
        for (int i = 0; i < used; i++)
            deepest = depth[i] > deepest ? depth[i] : deepest;
        if (deepest <= max_bits)
            break;
        for (int i = 0; i < used; i++)
            used_count[i] = (used_count[i] >> 1) | 1;
    }
    for (int i = 0; i < used; i++)
        lengths[symbol[i]] = depth[i];
}

/* The canonical codes of the lengths (RFC 1951, 3.2.2), bit-reversed: deflate sends
 * a code's first bit first, and bits are packed from the low end of each byte. */
static void canonical_codes(const unsigned char *lengths, int n, uint16_t *codes)
{
    int length_count[LITLEN_MAX_BITS + 1] = {0};
    int next_code[LITLEN_MAX_BITS + 1];
    for (int s = 0; s < n; s++)
        length_count[lengths[s]]++;
    length_count[0] = 0;
    int code = 0;
    for (int bits = 1; bits <= LITLEN_MAX_BITS; bits++) {
        code = (code + length_count[bits - 1]) << 1;
        next_code[bits] = code;
    }
    for (int s = 0; s < n; s++) {
        int len = lengths[s];
        codes[s] = 0;
        if (len) {
            unsigned c = (unsigned)next_code[len]++, reversed = 0;
            for (int b = 0; b < len; b++)
                reversed |= ((c >> b) & 1u) << (len - 1 - b);
            codes[s] = (uint16_t)reversed;
        }
    }
}

typedef struct {
    unsigned char *out;
    uint64_t bits;  /* not yet written, from the low end */
    int count;      /* how many of them */
} bit_writer;

/* The 8 bytes of `bits`, low byte first. */
static inline void store_le64(unsigned char *dst, uint64_t bits)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, &bits, 8);
#else
    for (int b = 0; b < 8; b++)
        dst[b] = (unsigned char)(bits >> (8 * b));
#endif
}

/* Append the low `n` (at most 32) bits of `value`; whole bytes go out four at a time. */
static inline void put_bits(bit_writer *w, uint32_t value, int n)
{
    w->bits |= (uint64_t)value << w->count;
    w->count += n;
    if (w->count >= 32) {
        for (int b = 0; b < 4; b++)
            w->out[b] = (unsigned char)(w->bits >> (8 * b));
        w->out += 4;
        w->bits >>= 32;
        w->count -= 32;
    }
}

/* Write what is left, padded with zero bits to a whole byte. */
static void flush_bits(bit_writer *w)
{
    while (w->count > 0) {
        *w->out++ = (unsigned char)w->bits;
        w->bits >>= 8;
        w->count -= 8;
    }
    w->bits = 0;
    w->count = 0;
}

/* The most bytes huffman_block writes for n input bytes: 14 bits each, the header,
 * the end of block and the stored block, with room for store_le64's 8-byte stores. */
static Py_ssize_t huffman_block_bound(Py_ssize_t n)
{
    return n * 2 + 512;
}

/* Blocks of at least COUNT_SAMPLED_FROM bytes have their bytes counted in one slice of
 * COUNT_SLICE bytes in every COUNT_EVERY: a quarter of the counting (0.3 of a 2400x1800
 * edge map's 0.77 ms a block), for a code within a fraction of a percent of the one the
 * whole counts give where the slices are like the rest. Every byte value then gets a code
 * (each count is at least 1), and the block's size is known only once it is written. */
#define COUNT_SLICE 1024
#define COUNT_EVERY 4
#define COUNT_SAMPLED_FROM ((Py_ssize_t)1 << 16)

/* Add the n bytes of data to the four tables of counts: four per byte value, so that
 * repeated bytes do not wait on one counter; eight bytes loaded at once. */
static void count_bytes(const unsigned char *data, Py_ssize_t n, uint32_t partial[4][256])
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t eight;
        memcpy(&eight, data + i, 8);
        for (int k = 0; k < 8; k++)
            partial[k & 3][(eight >> (8 * k)) & 0xff]++;
    }
    for (; i < n; i++)
        partial[0][data[i]]++;
}

/* One dynamic-Huffman deflate block (not the last) of the n bytes of data, then an
 * empty stored block, into out (huffman_block_bound(n) of room); returns the number
 * of bytes written, or -1 (out to be ignored) where they are more than limit (limit
 * < 0: no limit). */
static Py_ssize_t huffman_block(const unsigned char *data, Py_ssize_t n, Py_ssize_t limit,
                                unsigned char *out)
{
    uint32_t partial[4][256];
    memset(partial, 0, sizeof(partial));
    int sampled = n >= COUNT_SAMPLED_FROM;
    if (!sampled)
        count_bytes(data, n, partial);
    else
        for (Py_ssize_t start = 0; start < n; start += COUNT_SLICE * COUNT_EVERY)
            count_bytes(data + start, n - start < COUNT_SLICE ? n - start : COUNT_SLICE, partial);
    uint64_t count[LITLEN_CODES];
    for (int s = 0; s < 256; s++) {
        count[s] = (uint64_t)partial[0][s] + partial[1][s] + partial[2][s] + partial[3][s];
        if (sampled)
            count[s] = count[s] * COUNT_EVERY + 1;
    }
    count[END_OF_BLOCK] = 1;

    unsigned char lengths[LITLEN_CODES];
    uint16_t codes[LITLEN_CODES];
    code_lengths(count, LITLEN_CODES, LITERAL_MAX_BITS, lengths);
    canonical_codes(lengths, LITLEN_CODES, codes);

    /* The code lengths sent: 257 literal/length codes, then 2 distance codes of one
     * bit (none is used; two make a complete code, as zlib's encoder sends them). */
    unsigned char sent[LITLEN_CODES + 2];
    memcpy(sent, lengths, LITLEN_CODES);
    sent[LITLEN_CODES] = sent[LITLEN_CODES + 1] = 1;
    uint64_t length_count[LENGTH_CODES] = {0};
    for (int s = 0; s < LITLEN_CODES + 2; s++)
        length_count[sent[s]]++;
    unsigned char length_lengths[LENGTH_CODES];
    uint16_t length_codes[LENGTH_CODES];
    code_lengths(length_count, LENGTH_CODES, LENGTH_MAX_BITS, length_lengths);
    canonical_codes(length_lengths, LENGTH_CODES, length_codes);
    int header_codes = LENGTH_CODES;
    while (header_codes > 4 && length_lengths[length_code_order[header_codes - 1]] == 0)
        header_codes--;

    if (limit >= 0 && !sampled) {
        /* The block's size: its header, the codes, the end of block; 3 bits and the pad
         * to a byte of the stored block, and its 4 bytes. (Sampled counts cannot tell it:
         * slices unlike the rest of the block put it far off. Those blocks are written,
         * and their size checked at the end.) */
        uint64_t bits = 3 + 5 + 5 + 4 + 3 * (uint64_t)header_codes;
        for (int s = 0; s < LITLEN_CODES + 2; s++)
            bits += length_lengths[sent[s]];
        for (int s = 0; s < LITLEN_CODES; s++)
            bits += count[s] * lengths[s];
        if ((Py_ssize_t)((bits + 3 + 7) / 8 + 4) > limit)
            return -1;
    }

    bit_writer w = {out, 0, 0};
    put_bits(&w, 2u << 1, 3);               /* BFINAL 0, BTYPE 10: dynamic codes */
    put_bits(&w, LITLEN_CODES - 257, 5);     /* HLIT */
    put_bits(&w, 2 - 1, 5);                  /* HDIST */
    put_bits(&w, (uint32_t)(header_codes - 4), 4);  /* HCLEN */
    for (int k = 0; k < header_codes; k++)
        put_bits(&w, length_lengths[length_code_order[k]], 3);
    for (int s = 0; s < LITLEN_CODES + 2; s++)
        put_bits(&w, length_codes[sent[s]], length_lengths[sent[s]]);

    /* The bytes, four at a time: codes of at most 14 bits and the 7 bits left over fit in
     * 64; each round stores 8 bytes and keeps the whole ones. */
    uint64_t bits = w.bits;
    int pending = w.count;
    unsigned char *dst = w.out;
    for (; pending >= 8; pending -= 8) { /* put_bits leaves up to 31 bits */
        *dst++ = (unsigned char)bits;
        bits >>= 8;
    }
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        for (int k = 0; k < 4; k++) {
            bits |= (uint64_t)codes[data[i + k]] << pending;
            pending += lengths[data[i + k]];
        }
        store_le64(dst, bits);
        dst += pending >> 3;
        bits >>= pending & 56;
        pending &= 7;
    }
    w.bits = bits;
    w.count = pending;
    w.out = dst;
    for (; i < n; i++)
        put_bits(&w, codes[data[i]], lengths[data[i]]);
    put_bits(&w, codes[END_OF_BLOCK], lengths[END_OF_BLOCK]);

    /* An empty stored block: BFINAL 0, BTYPE 00, to the byte boundary, LEN 0, NLEN ~0. */
    put_bits(&w, 0, 3);
    flush_bits(&w);
    static const unsigned char empty_stored[4] = {0x00, 0x00, 0xff, 0xff};
    memcpy(w.out, empty_stored, 4);
    Py_ssize_t written = (Py_ssize_t)(w.out + 4 - out);
    return limit >= 0 && written > limit ? -1 : written;
}
