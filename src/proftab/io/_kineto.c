/*
 * _kineto: a streaming scanner for Kineto / Chrome trace JSON that writes Arrow-layout
 * column buffers directly, with exact decimal -> int64 ns conversion of "ts" and "dur".
 *
 * Contract (used by proftab/io/kineto.py):
 *   p = Parser(typed_keys, salvage=False, max_token=DEFAULT_MAX_TOKEN)
 *                                   typed_keys: list of (json_key: bytes, column: int, kind: int)
 *   p.feed(chunk) -> bool           any bytes-like; may split the text anywhere; True once the
 *                                   scanner has stopped at a fatal error (feed no more)
 *   p.finish() -> dict              columns as Buffer objects + counts, see build_result()
 * Module constants: the kind codes I64..BOOL, FLAG_* bits, MAX_DEPTH, MAX_TYPED and
 * DEFAULT_MAX_TOKEN (tests/test_scanner_constants.py ties them to proftab.schema).
 * Two walks give identical results: scalar (the default, the reference) and simd (a 64-byte
 * structural index, SSE2/AVX2); set_path/get_path/set_classifier/path_mismatches or
 * PROFTAB_SCANNER=scalar|simd|check choose and compare them (docs/robustness.md "Scanner paths").
 * Both walks take shortcuts learned from the text already read (remembered separators between values,
 * with the keys they lead to, the last pid/tid token; see sep_t, intmemo_t), each only where the bytes are
 * exactly those it was learned from; the "reference" path learns nothing, for tests to compare with.
 * Every string written to a column is valid UTF-8 (repaired and flagged otherwise).
 * Errors are reported, never raised from the scanner: finish() returns "error" (message,
 * byte offset, excerpt) and "complete" (whether the top-level value was closed); the
 * Python side decides between raising TraceError and salvaging.
 *
 * Every array element of traceEvents becomes one row (rejected elements included, with a
 * reason), so row count == len(traceEvents) for a complete file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ portable bit helpers */

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
static __inline int ctz64(uint64_t x) { unsigned long i; _BitScanForward64(&i, x); return (int)i; }
static __inline int add_overflow_i64(int64_t a, int64_t b, int64_t *r) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 1;
    *r = a + b;
    return 0;
}
#else
#define ctz64(x) __builtin_ctzll(x)
#define add_overflow_i64(a, b, r) __builtin_add_overflow(a, b, r)
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#define ALWAYS_INLINE static __forceinline
#define NOINLINE static __declspec(noinline)
#else
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define NOINLINE static __attribute__((noinline))
#endif

/* ------------------------------------------------------------------ buffers */

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

/* Capacity doubles from 256 bytes, except that a buffer outgrowing GROW_SMALL jumps straight to GROW_LARGE.
   Under the 1 MiB mmap threshold (set_malloc_policy) a large buffer is then a mapping of its own: each later
   doubling is an mremap (no copy) and pages of the slack that no row reaches are never backed by memory.
   Growth copies at most GROW_SMALL bytes per buffer instead of every heap-sized step up to 1 MiB. */
#define GROW_SMALL ((size_t)1 << 16)
#define GROW_LARGE ((size_t)1 << 21)
NOINLINE int buf_grow(buf_t *b, size_t need) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    if (cap > GROW_SMALL && cap < GROW_LARGE) cap = GROW_LARGE;
    char *np = realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(buf_t *b, size_t extra) {
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    return buf_grow(b, need);
}

/* grow to at least `size` bytes, zero-filling new bytes; len becomes at least `size`.
   Only up to the next 64 KiB step is written: the capacity grows geometrically (buf_reserve), but its untouched
   slack is never zeroed, so the OS need not back it with memory until a later row reaches it. */
#define ZERO_STEP ((size_t)1 << 16)  /* zero this much ahead: one call per 64 KiB, not per row */
static int buf_zero_to(buf_t *b, size_t size) {
    if (size <= b->len) return 0;
    size_t want = (size + ZERO_STEP - 1) & ~(ZERO_STEP - 1);
    if (buf_reserve(b, want - b->len)) return -1;
    memset(b->p + b->len, 0, want - b->len);
    b->len = want;
    return 0;
}

/* exact-size variant used when handing a buffer over */
static int buf_exact(buf_t *b, size_t size) {
    if (size > b->len) {
        if (buf_reserve(b, size - b->len)) return -1;
        memset(b->p + b->len, 0, size - b->len);
    }
    b->len = size;
    return 0;
}

static int buf_append(buf_t *b, const void *src, size_t n) {
    if (n == 0) return 0;  /* src may be NULL (an empty buffer): memcpy(_, NULL, 0) is UB */
    if (buf_reserve(b, n)) return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int buf_putc(buf_t *b, char c) {
    if (b->len == b->cap && buf_reserve(b, 1)) return -1;
    b->p[b->len++] = c;
    return 0;
}

static void buf_free(buf_t *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------ columns */

enum { K_I64 = 0, K_U64 = 1, K_F64 = 2, K_STR = 3, K_JSON = 4, K_BOOL = 5 };

/* Fixed-width column written at row index; rows arrive in increasing order (a row may be written again).
   While every row so far is valid ("dense", next >= 0) the column keeps no bitmap and writes no zeros:
   rows [0, next) are its data, and data.len is not kept up to date (fix_sync sets it). The first skipped
   row makes it sparse (next = -1): the bitmap is built then (rows [0, nvalid) set), and from there rows
   past data.len are zero and bits past valid.len 0. A zeroed struct is an empty dense column. */
typedef struct {
    buf_t data;   /* n * width */
    buf_t valid;  /* bitmap (sparse only) */
    int64_t nvalid;  /* sparse only; dense: next */
    int64_t next;    /* dense: the next row (all before it valid); -1: sparse */
    int64_t room;    /* dense: rows the data capacity holds */
} fixcol_t;

/* String column: offsets (int64, n+1), data, validity. Rows arrive in increasing order.
   Not `sparse`: every row in [0, filled) is valid and there is no bitmap yet (as for fixcol_t). */
typedef struct {
    buf_t offsets;
    buf_t data;
    buf_t valid;
    int64_t filled;  /* offsets written for rows [0, filled) */
    int64_t nvalid;
    int sparse;
} strcol_t;

/* a bitmap of `bytes` bytes with bits [0, nset) set, the rest zero; `bm` is empty */
static int bitmap_ones(buf_t *bm, int64_t nset, size_t bytes) {
    if (buf_zero_to(bm, bytes)) return -1;
    size_t full = (size_t)(nset >> 3);
    memset(bm->p, 0xFF, full);
    if (nset & 7) bm->p[full] = (char)((1u << (nset & 7)) - 1);
    return 0;
}

/* a dense column's data.len and nvalid made current */
static inline void fix_sync(fixcol_t *c, size_t width) {
    if (c->next < 0) return;
    c->nvalid = c->next;
    c->data.len = (size_t)c->next * width;
}

NOINLINE int fix_set_slow(fixcol_t *c, int64_t row, const void *v, size_t width) {
    if (c->next >= 0) {
        fix_sync(c, width);
        if (row < c->next) {  /* written again */
            memcpy(c->data.p + (size_t)row * width, v, width);
            return 0;
        }
        if (row == c->next) {  /* the next row: only the capacity was short */
            if (buf_reserve(&c->data, width)) return -1;
            memcpy(c->data.p + c->data.len, v, width);
            c->next = c->nvalid = row + 1;
            c->room = (int64_t)(c->data.cap / width);
            return 0;
        }
        if (bitmap_ones(&c->valid, c->nvalid, (size_t)(row >> 3) + 1)) return -1;
        c->next = -1;
    }
    if ((size_t)(row + 1) * width > c->data.len && buf_zero_to(&c->data, (size_t)(row + 1) * width)) return -1;
    if ((size_t)(row >> 3) + 1 > c->valid.len && buf_zero_to(&c->valid, (size_t)(row >> 3) + 1)) return -1;
    memcpy(c->data.p + (size_t)row * width, v, width);
    unsigned char *vb = (unsigned char *)c->valid.p + (row >> 3);
    if (!(*vb & (1u << (row & 7)))) c->nvalid++;
    *vb |= (unsigned char)(1u << (row & 7));
    return 0;
}

/* write row `row` (the table's current row: table_reserve has run for it) */
ALWAYS_INLINE int fix_set(fixcol_t *c, int64_t row, const void *v, size_t width) {
    if (row == c->next) {  /* dense: table_reserve made room */
        memcpy(c->data.p + (size_t)row * width, v, width);
        c->next = row + 1;
        return 0;
    }
    if (c->next < 0 && (size_t)(row + 1) * width <= c->data.len && (size_t)(row >> 3) < c->valid.len) {
        memcpy(c->data.p + (size_t)row * width, v, width);  /* sparse, and zeroed room for it */
        unsigned char *vb = (unsigned char *)c->valid.p + (row >> 3);
        if (!(*vb & (1u << (row & 7)))) c->nvalid++;
        *vb |= (unsigned char)(1u << (row & 7));
        return 0;
    }
    return fix_set_slow(c, row, v, width);
}

/* a column handed over: data.len and nvalid current, and the bitmap (`bytes` long) built if it has a null */
static int fix_finish(fixcol_t *c, int64_t nrows, size_t width) {
    if (c->next < 0) return 0;
    fix_sync(c, width);
    if (c->nvalid == nrows) return 0;
    c->next = -1;
    return bitmap_ones(&c->valid, c->nvalid, (size_t)((nrows + 7) >> 3));
}

static int str_fill_to(strcol_t *c, int64_t row) {
    /* write offsets for rows [filled, row) so that offsets[row] is the current data length */
    if (c->filled == 0 && c->offsets.len == 0) {
        int64_t z = 0;
        if (buf_append(&c->offsets, &z, 8)) return -1;
    }
    if (c->filled < row) {
        size_t k = (size_t)(row - c->filled);
        if (buf_reserve(&c->offsets, k * 8)) return -1;
        int64_t cur = (int64_t)c->data.len;
        int64_t *o = (int64_t *)(void *)(c->offsets.p + c->offsets.len);
        for (size_t i = 0; i < k; i++) o[i] = cur;
        c->offsets.len += k * 8;
        c->filled = row;
    }
    return 0;
}

NOINLINE int str_begin_slow(strcol_t *c, int64_t row) {
    if (!c->sparse && row > c->filled) {  /* rows [filled, row) are null: the bitmap starts here */
        if (bitmap_ones(&c->valid, c->filled, (size_t)(row >> 3) + 1)) return -1;
        c->sparse = 1;
    }
    if (str_fill_to(c, row)) return -1;
    if (c->sparse) {
        if (buf_zero_to(&c->valid, (size_t)(row >> 3) + 1)) return -1;
        ((unsigned char *)c->valid.p)[row >> 3] |= (unsigned char)(1u << (row & 7));
    }
    c->nvalid++;
    return 0;
}

/* begin writing row `row` (data appended afterwards), end with str_end */
ALWAYS_INLINE int str_begin(strcol_t *c, int64_t row) {
    if (row == c->filled && c->offsets.len) {  /* the next row, no gap to fill */
        if (!c->sparse) {
            c->nvalid++;
            return 0;
        }
        if ((size_t)(row >> 3) < c->valid.len) {
            ((unsigned char *)c->valid.p)[row >> 3] |= (unsigned char)(1u << (row & 7));
            c->nvalid++;
            return 0;
        }
    }
    return str_begin_slow(c, row);
}

NOINLINE int str_end_slow(strcol_t *c) {
    int64_t cur = (int64_t)c->data.len;
    if (buf_append(&c->offsets, &cur, 8)) return -1;
    c->filled++;
    return 0;
}

ALWAYS_INLINE int str_end(strcol_t *c) {
    if (c->offsets.len + 8 <= c->offsets.cap) {
        int64_t cur = (int64_t)c->data.len;
        memcpy(c->offsets.p + c->offsets.len, &cur, 8);
        c->offsets.len += 8;
        c->filled++;
        return 0;
    }
    return str_end_slow(c);
}

static int str_finish(strcol_t *c, int64_t nrows) {
    if (!c->sparse && c->filled < nrows) {
        if (bitmap_ones(&c->valid, c->filled, (size_t)((nrows + 7) >> 3))) return -1;
        c->sparse = 1;
    }
    if (str_fill_to(c, nrows)) return -1;
    return c->sparse ? buf_zero_to(&c->valid, (size_t)((nrows + 7) >> 3)) : 0;
}

/* Dictionary-encoded string column (ph, cat, name, bp, s): int32 codes + valid bitmap. */
#define DICT_CACHE_BITS 10
#define DICT_CACHE (1 << DICT_CACHE_BITS)
typedef struct {
    fixcol_t codes;
    buf_t dict_offsets; /* int64 */
    buf_t dict_data;
    int32_t n;
    uint64_t *slots;    /* hash table: 0 = empty, else (hash >> 32) << 32 | (code + 1) */
    uint64_t *hashes;   /* per code */
    uint8_t *bad;       /* per code: raw bytes are not valid UTF-8 (repaired at finish) */
    int32_t last_code;  /* the code of the previous lookup (when n > 0) */
    const char *last_p; /* its text in dict_data (kept valid: dict_data only moves when a new code becomes last) */
    size_t last_n;
    int any_bad;
    int any_flagged;    /* some code has a nonzero `bad` */
    size_t nslots;
    int32_t cache[DICT_CACHE];  /* code + 1 (0 = empty) by dict_cache_slot: a guess, checked against the entry */
} dictcol_t;

static int utf8_valid(const unsigned char *s, size_t n);
#define DICT_BAD_UTF8 1
#define DICT_RAW_CONTROL 2

/* any byte < 0x20 (JSON forbids raw control characters inside strings) */
static int has_control(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++) if (s[i] < 0x20) return 1;
    return 0;
}

static inline uint64_t load8(const char *s) { uint64_t w; memcpy(&w, s, 8); return w; }
static inline uint32_t load4(const char *s) { uint32_t w; memcpy(&w, s, 4); return w; }

/* the n < 8 bytes at s as a zero-padded word (on little-endian what memcpy into a zeroed word gives),
   read with fixed-size loads that stay inside [s, s+n): no libc call for a variable length */
static inline uint64_t load_upto7(const char *s, size_t n) {
    if (n >= 4) return (uint64_t)load4(s) | ((uint64_t)load4(s + n - 4) << (8 * (n - 4)));
    if (n == 0) return 0;
    const unsigned char *u = (const unsigned char *)s;
    return (uint64_t)u[0] | ((uint64_t)u[n >> 1] << (8 * (n >> 1))) | ((uint64_t)u[n - 1] << (8 * (n - 1)));
}

/* n bytes equal (inline, overlapping word compares; reads only [a, a+n) and [b, b+n)) */
static inline int bytes_eq(const char *a, const char *b, size_t n) {
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8)
            if (load8(a + i) != load8(b + i)) return 0;
        return load8(a + n - 8) == load8(b + n - 8);
    }
    if (n >= 4) return load4(a) == load4(b) && load4(a + n - 4) == load4(b + n - 4);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static inline uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xff51afd7ed558ccdULL);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h = (h ^ load8(s + i)) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    h = (h ^ load_upto7(s + i, n - i)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

static int dict_grow(dictcol_t *d) {
    size_t ns = d->nslots ? d->nslots * 2 : 1024;
    uint64_t *slots = calloc(ns, sizeof(uint64_t));
    if (!slots) return -1;
    for (int32_t code = 0; code < d->n; code++) {
        uint64_t h = d->hashes[code];
        size_t i = h & (ns - 1);
        while (slots[i]) i = (i + 1) & (ns - 1);
        slots[i] = (h >> 32 << 32) | ((uint64_t)code + 1);
    }
    free(d->slots);
    d->slots = slots;
    d->nslots = ns;
    uint64_t *nh = realloc(d->hashes, ns * sizeof(uint64_t));
    if (!nh) return -1;
    d->hashes = nh;
    uint8_t *nb = realloc(d->bad, ns);
    if (!nb) return -1;
    d->bad = nb;
    return 0;
}

/* the n bytes at s equal dictionary entry `code` */
static inline int dict_entry_is(const dictcol_t *d, int32_t code, const char *s, size_t n) {
    const int64_t *offs = (const int64_t *)d->dict_offsets.p;
    int64_t a = offs[code];
    return (size_t)(offs[code + 1] - a) == n && (n == 0 || bytes_eq(d->dict_data.p + a, s, n));
}

NOINLINE int32_t dict_intern_slow(dictcol_t *d, const char *s, size_t n) {
    if ((size_t)(d->n + 1) * 2 > d->nslots && dict_grow(d)) return -1;
    uint64_t h = hash_bytes(s, n);
    size_t mask = d->nslots - 1, i = h & mask;
    for (uint64_t e; (e = d->slots[i]) != 0; i = (i + 1) & mask) {
        if ((e >> 32) == (h >> 32)) {
            int32_t code = (int32_t)(uint32_t)e - 1;
            if (dict_entry_is(d, code, s, n)) return code;
        }
    }
    if (d->dict_offsets.len == 0) {
        int64_t z = 0;
        if (buf_append(&d->dict_offsets, &z, 8)) return -1;
    }
    if (buf_append(&d->dict_data, s, n)) return -1;
    int64_t end = (int64_t)d->dict_data.len;
    if (buf_append(&d->dict_offsets, &end, 8)) return -1;
    int32_t code = d->n++;
    d->hashes[code] = h;
    d->bad[code] = (uint8_t)((utf8_valid((const unsigned char *)s, n) ? 0 : DICT_BAD_UTF8) |
                             (has_control((const unsigned char *)s, n) ? DICT_RAW_CONTROL : 0));
    if (d->bad[code] & DICT_BAD_UTF8) d->any_bad = 1;
    if (d->bad[code]) d->any_flagged = 1;
    d->slots[i] = (h >> 32 << 32) | ((uint64_t)code + 1);
    return code;
}

/* The front cache's slot for the n bytes at s: from the length and the first and last 8 bytes only, so a few
   instructions instead of a hash of every byte. A hit is confirmed by comparing the entry in full; strings that
   share a slot only cost the table lookup below (they cannot make a lookup slower than that). */
static inline size_t dict_cache_slot(const char *s, size_t n) {
    uint64_t a, b;
    if (n >= 8) { a = load8(s); b = load8(s + n - 8); }
    else { a = load_upto7(s, n); b = 0; }
    uint64_t h = (a * 0x9E3779B97F4A7C15ULL) ^ ((b ^ n) * 0xC2B2AE3D27D4EB4FULL);
    return (size_t)(h >> (64 - DICT_CACHE_BITS));
}

/* the code of the n bytes at s, added to the dictionary when new (codes in order of first appearance) */
static inline int32_t dict_intern(dictcol_t *d, const char *s, size_t n) {
    if (n == d->last_n && d->n > 0 && (n == 0 || bytes_eq(d->last_p, s, n))) return d->last_code;
    size_t k = dict_cache_slot(s, n);
    int32_t code = d->cache[k] - 1;
    if (code < 0 || !dict_entry_is(d, code, s, n)) {
        code = dict_intern_slow(d, s, n);
        if (code < 0) return code;
        d->cache[k] = code + 1;
    }
    d->last_code = code;
    d->last_p = n ? d->dict_data.p + ((const int64_t *)d->dict_offsets.p)[code] : NULL;  /* (p is NULL while all entries are empty) */
    d->last_n = n;
    return code;
}

static void dict_free(dictcol_t *d) {
    buf_free(&d->codes.data);
    buf_free(&d->codes.valid);
    buf_free(&d->dict_offsets);
    buf_free(&d->dict_data);
    free(d->slots);
    free(d->hashes);
    free(d->bad);
    d->slots = NULL;
    d->hashes = NULL;
    d->bad = NULL;
}

/* ------------------------------------------------------------------ structural index (state) */

/*
 * The SIMD path (set_path("simd") or PROFTAB_SCANNER=simd; the scalar walk is the default) indexes the text
 * 64 bytes at a time before the walk reads it, in the style of simdjson's stage 1: one bit per
 * byte for each of "unescaped quote", "backslash" and "JSON whitespace". The walk (the same
 * recursive-descent code as the scalar path) then takes token boundaries from those bitmaps:
 * the next non-whitespace byte, the end of a string, instead of looping over bytes. The index
 * is built lazily and only forward, into a window of IX_WIN blocks, so its memory is fixed
 * (24 KiB per parser) whatever the size of the text.
 */
#define IX_WIN 1024     /* blocks held: 64 KiB of text */
#define IX_BATCH 64     /* blocks classified per step: 4 KiB of text */

typedef struct { uint64_t q, bs, ws; } ixblk_t;

typedef struct ix {
    const char *base, *end;  /* the text of one run(); block k covers base[64k, 64k+64) */
    size_t nblocks;
    size_t lo, filled;       /* blocks [lo, lo+filled) are in blk[0, filled) */
    uint64_t carry;          /* byte 0 of block lo+filled is escaped (an odd backslash run before it) */
    int check;               /* "check" path: every answer is compared with the scalar code */
    ixblk_t blk[IX_WIN];
} ix_t;

/* ------------------------------------------------------------------ parser state */

#define MAX_TYPED 64
#define KEYTAB 512

typedef struct {
    const char *key;
    size_t keylen;
    int col;
    int kind;
} typed_key_t;

enum { D_PH, D_CAT, D_NAME, D_BP, D_S, D_REASON, N_DICT };
enum { F_EVENT_INDEX, F_PID, F_TID, F_TS, F_DUR, F_ID, F_OFFSET, F_FLAGS, N_FIX };
enum { S_PID_TEXT, S_TID_TEXT, S_ID_TEXT, S_ARGS, S_EXTRA, S_EXCERPT, S_MVALUE, N_STR };

/* flags: exported as FLAG_* module constants; tests/test_scanner_constants.py ties them to proftab.Flag */
#define FL_NAME_REPAIRED 1
#define FL_TS_ROUNDED 2
#define FL_ARGS_REPAIRED 32
#define FL_JSON_REPAIRED 64

/* nesting limit of a skipped value (iterative: the C stack does not grow with depth) */
#define MAX_DEPTH 100000
/* default cap on a single incomplete top-level item (one event or envelope value) */
#define DEFAULT_MAX_TOKEN ((int64_t)1 << 30)

enum { ST_START, ST_ENVELOPE, ST_EVENTS, ST_DONE, ST_RESYNC };

/* Rows go to one of two tables: 0 = complete-event phases (X B E b e), 1 = everything else
 * (instants, flows, counters, metadata, rejected elements). The big table then needs no
 * filtering copy on the Python side. */
typedef struct {
    dictcol_t dicts[N_DICT];
    fixcol_t fix[N_FIX];
    strcol_t strs[N_STR];
    fixcol_t tfix[MAX_TYPED];
    strcol_t tstr[MAX_TYPED];
    int64_t rows;
    int64_t cap_rows;  /* every fixed-width column still dense at row cap_rows - 1 has room for rows [0, cap_rows) */
} table_t;

typedef struct {
    /* one parsed element, committed only when complete. The fields up to `ntyped` are reset per
       element (128 bytes: a few vector stores); the others are read only where a reset field says
       they were written (a string's length and flags where its pointer is set, pid where has_pid, ...) */
    const char *ph, *cat, *name, *bp, *s;
    const char *pid_txt, *tid_txt, *id_txt;
    const char *args_raw;  /* whole args object, used for C and M events */
    const char *reason;    /* reject reason */
    uint64_t typed_cols;   /* bit col: a typed value for column col is in typed[] */
    int has_pid, has_tid, has_ts, has_dur, has_id;
    int flags;
    int nargs, nextra;
    int args_esc;          /* string flags over the whole args object */
    int ntyped;
    /* not reset: */
    size_t ph_n, cat_n, name_n, bp_n, s_n;
    int ph_esc, cat_esc, name_esc, bp_esc, s_esc;
    int64_t pid, tid, ts, dur, id;
    size_t pid_txt_n, tid_txt_n, id_txt_n;
    int pid_txt_str, tid_txt_str, id_txt_str; /* 1: JSON string (decode), 0: raw number text */
    size_t args_raw_n;
    buf_t args;   /* remainder JSON object text */
    buf_t extra;
    struct { int col; int kind; const char *p; size_t n; int esc; int64_t i; double f; } typed[MAX_TYPED];
} elem_t;

/* The last integer token of a field (pid, tid) and its value: Kineto repeats the same pid and tid on
   every event, so the token and the delimiter after it are compared as two masked words and the value
   reused (fast_int would read the same bytes to the same value). */
typedef struct {
    uint64_t w[2], m[2];  /* token bytes + the delimiter after it, masked */
    int64_t value;
    uint8_t n;            /* token length (0: empty) */
} intmemo_t;

/* The bytes between the end of one value in an object and the start of the next one's value (the
   whitespace, the comma, the next key and its colon), as a generic parse read them last time after a
   given key, and what they led to: the next key (its position in these bytes and its id) or the
   object's end. When the same bytes come again they are taken whole (sep_find): the generic parse of
   equal bytes gives the same key, so only a memory compare is done. Two per previous key. */
#define SEP_MAX 40
#define SEP_CLOSE (-100)  /* `next`: the bytes end with the object's closing brace */
typedef struct {
    unsigned char b[48];  /* the bytes, zero padded */
    unsigned char m[48];  /* 0xFF over the bytes used */
    uint8_t n;            /* length (0: empty) */
    uint8_t koff, kn;     /* the next key's text: bytes [koff, koff + kn) */
    int16_t next;         /* the next key's id (event key id, or typed index / -1 in args), or SEP_CLOSE */
} sep_t;
typedef struct { sep_t way[2]; uint8_t older; } sepset_t;

typedef struct {
    PyObject_HEAD
    /* config */
    typed_key_t keys[MAX_TYPED];
    int nkeys;
    int ntypedcols;
    int colkind[MAX_TYPED];
    int16_t keytab[KEYTAB];   /* index into keys + 1 */
    /* input */
    buf_t pending;
    int64_t consumed;         /* absolute offset of pending[0] */
    int state;
    int top_is_list;
    int complete;
    int salvage;
    int saw_events;
    int finished;
    int64_t resyncs;
    int64_t lenient;          /* JSON syntax deviations accepted (double commas, missing commas, ...) */
    int64_t fed;              /* total bytes fed */
    int64_t max_token;        /* cap on one incomplete item held in `pending` */
    size_t retry_at;          /* rescan `pending` only once it has grown to this size (linear rescans) */
    int dirty;                /* `pending` holds bytes not scanned yet */
    int after_comma;          /* in the events array: the last token was ',' (or the opening '[') */
    buf_t keybuf;             /* decoded escaped key */
    char ph_dec[8];           /* decoded escaped ph */
    char reason_buf[200];
    int64_t rows;
    int max_frac;
    /* error */
    int has_error;
    char errmsg[256];
    int64_t err_offset;
    char excerpt[128];
    /* columns */
    table_t tabs[2];
    buf_t envelope;   /* '"key": value, ...' raw pieces */
    int nenvelope;
    buf_t scratch;
    elem_t e;
    int oom;
    ix_t ix;          /* the structural index of the current run() (SIMD path) */
    sepset_t esep[16];                    /* after each event key (EK_*), see sep_t */
    intmemo_t pid_memo, tid_memo;         /* see intmemo_t */
    sepset_t asep[MAX_TYPED + 2];         /* after each typed args key, an untyped one, the '{' */
} Parser;

/* ------------------------------------------------------------------ scanning helpers */

typedef struct {
    const char *p, *end;
    const char *msg;  /* why the last BAD happened */
    ix_t *ix;         /* structural index over [.., end) (SIMD path), or NULL (scalar) */
} cur_t;

enum { OK = 0, NEED_MORE = 1, BAD = 2 };

/* byte classes for scalar scanning: 1 = ends a scalar, 2 = cannot appear in a scalar */
static unsigned char DELIM[256];
/* 1 for , } ] : (what may follow a closing quote) */
static unsigned char CLOSE[256];

static void init_tables(void) {
    const char *ends = ",}] \n\r\t:";
    for (const char *q = ends; *q; q++) DELIM[(unsigned char)*q] = 1;
    DELIM[(unsigned char)'"'] = 2;
    DELIM[(unsigned char)'{'] = 2;
    DELIM[(unsigned char)'['] = 2;
    for (const char *q = ",}]:"; *q; q++) CLOSE[(unsigned char)*q] = 1;
}

/* ------------------------------------------------------------------ structural index (stage 1) */

/* which walk run() uses: the scalar reference, the indexed one, or both compared (tests) */
enum { PATH_SCALAR = 0, PATH_SIMD = 1, PATH_CHECK = 2 };
static int g_path = PATH_SCALAR;
/* 0 on the "reference" path: the scalar walk without what the parser learns from the text it has read
   (remembered separators, the last pid/tid token; also the one-word event key match and
   scanning a chunk where it lies), so that tests can compare the two. Nothing is remembered then, so the
   lookups find nothing: parsers created after set_path("reference") take the generic code throughout. */
static int g_learn = 1;
static int64_t g_mismatch;  /* "check" path: answers where the two walks differed (0 = identical) */
static int g_abort_on_mismatch;  /* PROFTAB_SCANNER_ABORT set: a difference aborts (for the fuzz harness) */

static void note_mismatch(void) {
    g_mismatch++;
    if (g_abort_on_mismatch) abort();
}

/* classify n whole 64-byte blocks at p: quote, backslash and whitespace bits (escapes not applied) */
typedef void (*classify_fn)(const char *p, size_t n, ixblk_t *out);

static void classify_portable(const char *p, size_t n, ixblk_t *out) {
    for (size_t b = 0; b < n; b++, p += 64) {
        uint64_t q = 0, bs = 0, ws = 0;
        for (int i = 0; i < 64; i++) {
            unsigned char ch = (unsigned char)p[i];
            uint64_t bit = 1ULL << i;
            if (ch == '"') q |= bit;
            else if (ch == '\\') bs |= bit;
            else if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') ws |= bit;
        }
        out[b].q = q;
        out[b].bs = bs;
        out[b].ws = ws;
    }
}

/* x86-64 only (SSE2 with GCC/Clang/MSVC, AVX2 with GCC/Clang); elsewhere (arm64 included: no NEON
   classifier yet) the portable one above. -DPROFTAB_NO_SIMD builds the portable one everywhere. */
#if !defined(PROFTAB_NO_SIMD) && (((defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)) || \
    (defined(_MSC_VER) && !defined(__clang__) && (defined(_M_X64) || defined(_M_AMD64))))
#define IX_HAVE_SSE2 1
#include <emmintrin.h>
/* SSE2 is part of x86-64: no dispatch needed */
static void classify_sse2(const char *p, size_t n, ixblk_t *out) {
    const __m128i Q = _mm_set1_epi8('"'), B = _mm_set1_epi8('\\'), S = _mm_set1_epi8(' ');
    const __m128i N = _mm_set1_epi8('\n'), R = _mm_set1_epi8('\r'), T = _mm_set1_epi8('\t');
    for (size_t b = 0; b < n; b++, p += 64) {
        uint64_t q = 0, bs = 0, ws = 0;
        for (int i = 0; i < 4; i++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
            __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, S), _mm_cmpeq_epi8(v, N)),
                                     _mm_or_si128(_mm_cmpeq_epi8(v, R), _mm_cmpeq_epi8(v, T)));
            q |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, Q)) << (16 * i);
            bs |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, B)) << (16 * i);
            ws |= (uint64_t)(uint32_t)_mm_movemask_epi8(w) << (16 * i);
        }
        out[b].q = q;
        out[b].bs = bs;
        out[b].ws = ws;
    }
}
#endif

#if !defined(PROFTAB_NO_SIMD) && (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define IX_HAVE_AVX2 1
#include <immintrin.h>
/* AVX2, compiled for that target only and chosen at import when the CPU has it */
__attribute__((target("avx2"))) static void classify_avx2(const char *p, size_t n, ixblk_t *out) {
    const __m256i Q = _mm256_set1_epi8('"'), B = _mm256_set1_epi8('\\');
    /* whitespace by table: the byte whose low nibble indexes an entry equal to itself
       (' ' 0x20, '\t' 0x09, '\n' 0x0A, '\r' 0x0D). Every other entry is 0, whose low nibble is
       not its index, so no byte matches it; a byte >= 0x80 shuffles to 0 and never matches either */
    const __m256i W = _mm256_setr_epi8(' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0,
                                       ' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0);
    for (size_t b = 0; b < n; b++, p += 64) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)p);
        __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
        uint64_t q = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, Q)) |
                     (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, Q)) << 32;
        uint64_t bs = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, B)) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, B)) << 32;
        uint64_t ws = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(W, lo), lo)) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(W, hi), hi)) << 32;
        out[b].q = q;
        out[b].bs = bs;
        out[b].ws = ws;
    }
}
#endif

static classify_fn g_classify = classify_portable;
static const char *g_isa = "portable";

static void init_event_keys(void);

/* pick the widest classifier this CPU runs, and the default path (PROFTAB_SCANNER overrides) */
static void init_index(void) {
#ifdef IX_HAVE_SSE2
    g_classify = classify_sse2;
    g_isa = "sse2";
#endif
#ifdef IX_HAVE_AVX2
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) { g_classify = classify_avx2; g_isa = "avx2"; }
#endif
    /* the default is the scalar walk: the indexed one takes 1-4% more instructions on real traces
       (docs/benchmarks.md "Scanner paths"), so it is opt-in until its walk consumes the index whole */
    g_path = PATH_SCALAR;
    g_abort_on_mismatch = getenv("PROFTAB_SCANNER_ABORT") != NULL;
    const char *env = getenv("PROFTAB_SCANNER");
    if (env && !strcmp(env, "scalar")) g_path = PATH_SCALAR;
    else if (env && !strcmp(env, "simd")) g_path = PATH_SIMD;
    else if (env && !strcmp(env, "check")) g_path = PATH_CHECK;
    else if (env && !strcmp(env, "reference")) { g_path = PATH_SCALAR; g_learn = 0; }
    init_event_keys();
}

static void ix_reset(ix_t *x, const char *base, const char *end, int check) {
    x->base = base;
    x->end = end;
    x->nblocks = ((size_t)(end - base) + 63) >> 6;
    x->lo = x->filled = 0;
    x->carry = 0;
    x->check = check;
}

/* classify blocks [start, start+n) into out; the last block of the text is padded with zero bytes
   (none of the three classes); then mark escaped bytes and drop escaped quotes */
static void ix_classify(ix_t *x, size_t start, size_t n, ixblk_t *out) {
    const char *p = x->base + (start << 6);
    size_t rem = (size_t)(x->end - x->base) & 63, full = n;
    if (rem && start + n == x->nblocks) full = n - 1;
    if (full) g_classify(p, full, out);
    if (full < n) {
        char tmp[64];
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, p + (full << 6), rem);
        g_classify(tmp, 1, out + full);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t bs = out[i].bs;
        if (!(bs | x->carry)) continue;
        /* a backslash that is not itself escaped escapes the next byte (the scalar scan_string's rule);
           backslashes are rare, so one step per backslash */
        uint64_t esc = x->carry;
        x->carry = 0;
        while (bs) {
            int k = ctz64(bs);
            bs &= bs - 1;
            if ((esc >> k) & 1) continue;
            if (k == 63) x->carry = 1;
            else esc |= 2ULL << k;
        }
        out[i].q &= ~esc;
    }
}

/* block k (classifying forward up to it), or NULL when k is behind the window or past the text */
static const ixblk_t *ix_fill(ix_t *x, size_t k) {
    if (k < x->lo || k >= x->nblocks) return NULL;
    while (k >= x->lo + x->filled) {
        if (x->filled == IX_WIN) { x->lo += IX_WIN; x->filled = 0; }
        size_t start = x->lo + x->filled, n = IX_WIN - x->filled;
        if (n > IX_BATCH) n = IX_BATCH;
        if (n > x->nblocks - start) n = x->nblocks - start;
        ix_classify(x, start, n, x->blk + x->filled);
        x->filled += n;
    }
    return &x->blk[k - x->lo];
}

static inline const ixblk_t *ix_get(ix_t *x, size_t k) {
    size_t d = k - x->lo;  /* wraps when k < lo: then ix_fill says no */
    if (d < x->filled) return &x->blk[d];
    return ix_fill(x, k);
}

enum { IX_NONWS, IX_QUOTE_OR_BS, IX_QUOTE };

static inline uint64_t ix_bits(const ixblk_t *b, int what) {
    return what == IX_NONWS ? ~b->ws : what == IX_QUOTE ? b->q : (b->q | b->bs);
}

/* the first byte at or after p in class `what` (end if none), or NULL when the index cannot
   answer (p behind the window): the caller then runs the scalar code */
static inline const char *ix_next(ix_t *x, const char *p, int what) {
    if (p >= x->end) return x->end;
    size_t off = (size_t)(p - x->base), k = off >> 6;
    const ixblk_t *b = ix_get(x, k);
    if (!b) return NULL;
    uint64_t m = ix_bits(b, what) & (~0ULL << (off & 63));
    while (!m) {
        if (++k >= x->nblocks) return x->end;
        b = ix_get(x, k);
        if (!b) return NULL;
        m = ix_bits(b, what);
    }
    const char *r = x->base + (k << 6) + ctz64(m);
    return r < x->end ? r : x->end;
}

static inline void skip_ws_scalar(cur_t *c) {
    const char *p = c->p, *end = c->end;
    if (end - p >= 16) {
        /* the usual runs, each answered with one look: one space (": ", ", ") or a newline and up
           to 8 spaces (the indentation of Kineto's exporter) */
        if (*p == ' ' && (unsigned char)p[1] > ' ') { c->p = p + 1; return; }
        if (*p == '\n') {
            uint64_t w;
            memcpy(&w, p + 1, 8);
            uint64_t x = w ^ 0x2020202020202020ULL;
            if (x) {
                const char *q = p + 1 + (ctz64(x) >> 3);
                if ((unsigned char)*q > ' ') { c->p = q; return; }
            }
        }
    }
    for (;;) {
        if (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t x = w ^ 0x2020202020202020ULL;
            if (!x) { p += 8; continue; }
            p += ctz64(x) >> 3;
        } else {
            while (p < end && *p == ' ') p++;
            if (p >= end) break;
        }
        unsigned char ch = (unsigned char)*p;
        if (ch > ' ') break;  /* the usual end: one compare */
        if (ch == '\n' || ch == '\r' || ch == '\t') { p++; continue; }
        break;
    }
    c->p = p;
}

/* skip JSON whitespace; on the SIMD path the next non-whitespace byte comes from the index */
NOINLINE void check_ws(const cur_t *c, const char *q) {
    cur_t r = {c->p, c->end, NULL, NULL};
    skip_ws_scalar(&r);
    if (r.p != q) note_mismatch();
}

ALWAYS_INLINE void skip_ws(cur_t *c) {
    if (c->p < c->end && (unsigned char)*c->p > ' ') return;  /* not whitespace: nothing to skip */
    if (c->ix) {
        const char *q = ix_next(c->ix, c->p, IX_NONWS);
        if (q) {
            if (c->ix->check) check_ws(c, q);
            c->p = q;
            return;
        }
    }
    skip_ws_scalar(c);
}

/*
 * Scan a JSON string starting at '"'. On OK, s and n hold the raw content (without quotes);
 * *esc has bit 1 if it contains a backslash escape, bit 2 if a byte >= 0x80, bit 4 if an
 * unescaped quote was taken as content (the tolerant repair of old Kineto names).
 * A quote closes the string only if the next non-space byte is one of , } ] : (or the end of
 * a complete text); otherwise it is part of the string.
 */
#define HAS_ZERO(v) (((v) - 0x0101010101010101ULL) & ~(v) & 0x8080808080808080ULL)

/* first '"' or '\\' in [p, end), or end */
static inline const char *find_quote_or_backslash(const char *p, const char *end) {
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t m = HAS_ZERO(w ^ 0x2222222222222222ULL) | HAS_ZERO(w ^ 0x5C5C5C5C5C5C5C5CULL);
        if (m) return p + (ctz64(m) >> 3);
        p += 8;
    }
    while (p < end && *p != '"' && *p != '\\') p++;
    return p;
}

/* the string that opened at c->p closes at the quote q (a structural character follows it): its
   text, length and escape flags out, the cursor past the quote; both string walks end here */
static inline int close_string(cur_t *c, const char *q, const char **s, size_t *n, int *esc, int flags) {
    *s = c->p + 1;
    *n = (size_t)(q - (c->p + 1));
    *esc = flags;
    c->p = q + 1;
    return OK;
}

NOINLINE int scan_string_slow(cur_t *c, const char **s, size_t *n, int *esc) {
    const char *p = c->p + 1;
    int flags = 0;
    for (;;) {
        const char *q = find_quote_or_backslash(p, c->end);
        if (q >= c->end) return NEED_MORE;
        if (*q == '\\') {
            flags |= 1;
            if (q + 1 >= c->end) return NEED_MORE;
            p = q + 2;
            continue;
        }
        /* an unescaped quote: closing if followed by a structural char */
        const char *f = q + 1;
        while (f < c->end && (*f == ' ' || *f == '\n' || *f == '\r' || *f == '\t')) f++;
        if (f >= c->end) return NEED_MORE;
        if (*f == ',' || *f == '}' || *f == ']' || *f == ':') return close_string(c, q, s, n, esc, flags);
        flags |= 4;
        p = q + 1;
    }
}

/* quote or backslash bytes of w: the lowest set bit is exact (HAS_ZERO may mark bytes above it) */
#define QUOTE_OR_BS(w) (HAS_ZERO((w) ^ 0x2222222222222222ULL) | HAS_ZERO((w) ^ 0x5C5C5C5C5C5C5C5CULL))

/* The common string, answered inline: its first quote-or-backslash within 16 bytes is a quote followed
   directly by , } ] or :. Everything else (escapes, spaces after the quote, longer strings, the end of
   the buffer near) goes to scan_string_slow, which gives the same answer for these strings. */
ALWAYS_INLINE int scan_string_scalar(cur_t *c, const char **s, size_t *n, int *esc) {
    const char *p = c->p + 1;
    if (c->end - p >= 17) {
        uint64_t w, m;
        const char *b = p;
        memcpy(&w, b, 8);
        m = QUOTE_OR_BS(w);
        if (!m) {
            b += 8;
            memcpy(&w, b, 8);
            m = QUOTE_OR_BS(w);
        }
        if (m) {
            const char *q = b + (ctz64(m) >> 3);
            if (*q == '"' && CLOSE[(unsigned char)q[1]]) {
                *s = p;
                *n = (size_t)(q - p);
                *esc = 0;
                c->p = q + 1;
                return OK;
            }
        }
    }
    return scan_string_slow(c, s, n, esc);
}

/* scan_string on the index: the string ends at an unescaped quote found in the quote bitmap (the
   backslash bitmap says whether an escape came before it), closing only if the next non-space byte
   is , } ] : exactly as in the scalar code. -1: the index cannot answer (run the scalar code). */
static int scan_string_ix(cur_t *c, const char **s, size_t *n, int *esc) {
    ix_t *x = c->ix;
    if (c->end != x->end) return -1;
    const char *p = c->p + 1;
    int flags = 0;
    if (p < c->end) {
        /* the common case, in one lookup: the string closes in the block it starts in, with no
           backslash before, and , } ] : follows the quote directly */
        size_t off = (size_t)(p - x->base);
        const ixblk_t *b = ix_get(x, off >> 6);
        if (b) {
            uint64_t m = (b->q | b->bs) >> (off & 63);
            if (m) {
                const char *q = p + ctz64(m);
                if (q + 1 < c->end && *q == '"') {
                    char f = q[1];
                    if (f == ',' || f == '}' || f == ']' || f == ':') {
                        *s = p;
                        *n = (size_t)(q - p);
                        *esc = 0;
                        c->p = q + 1;
                        return OK;
                    }
                }
            }
        }
    }
    for (;;) {
        const char *q = ix_next(x, p, IX_QUOTE_OR_BS);
        if (!q) return -1;
        if (q >= c->end) return NEED_MORE;
        if (*q == '\\') {
            flags |= 1;
            q = ix_next(x, q, IX_QUOTE);
            if (!q) return -1;
            if (q >= c->end) return NEED_MORE;
        }
        const char *f = ix_next(x, q + 1, IX_NONWS);
        if (!f) return -1;
        if (f >= c->end) return NEED_MORE;
        if (*f == ',' || *f == '}' || *f == ']' || *f == ':') return close_string(c, q, s, n, esc, flags);
        flags |= 4;
        p = q + 1;
    }
}

/* "check" path: the scalar answer for the string at p0 must equal the index's (r, s, n, esc, end) */
NOINLINE void check_string(const cur_t *c, const char *p0, int r, const char *s, size_t n, int esc) {
    cur_t t = {p0, c->end, NULL, NULL};
    const char *s2 = NULL; size_t n2 = 0; int e2 = 0;
    int r2 = scan_string_scalar(&t, &s2, &n2, &e2);
    if (r2 != r || (r == OK && (s2 != s || n2 != n || e2 != esc || t.p != c->p))) note_mismatch();
}

ALWAYS_INLINE int scan_string(cur_t *c, const char **s, size_t *n, int *esc) {
    if (c->ix) {
        const char *p0 = c->p;
        int r = scan_string_ix(c, s, n, esc);
        if (r >= 0) {
            if (c->ix->check) check_string(c, p0, r, r == OK ? *s : NULL, r == OK ? *n : 0, r == OK ? *esc : 0);
            return r;
        }
    }
    return scan_string_scalar(c, s, n, esc);
}

/* Skip a scalar (number / literal): run until a delimiter. */
static int skip_scalar(cur_t *c) {
    const char *p = c->p;
    unsigned char cls = 0;
    while (p < c->end && !(cls = DELIM[(unsigned char)*p])) p++;
    if (cls == 2) { c->msg = "malformed value"; return BAD; }
    if (p >= c->end) return NEED_MORE;
    if (p == c->p) { c->msg = "missing value"; return BAD; }
    /* validate literal/number shape loosely */
    char f = *c->p;
    if (!((f >= '0' && f <= '9') || f == '-' || f == 't' || f == 'f' || f == 'n' || f == 'N' || f == 'I')) {
        c->msg = "invalid value";
        return BAD;
    }
    c->p = p;
    return OK;
}

/* Skip an object or array at c->p, iteratively (depth bounded by MAX_DEPTH, not by the C stack). */
static int skip_container_body(cur_t *c, int *esc, int depth0, uint64_t *isobj, uint64_t **heap, int cap);

static int skip_container(cur_t *c, int *esc, int depth0) {
    /* one bit per open level (1 = object): 512 levels on the stack, more on the heap */
    uint64_t small[8];
    uint64_t *heap = NULL;
    int r = skip_container_body(c, esc, depth0, small, &heap, 512);
    free(heap);
    return r;
}

static int skip_container_body(cur_t *c, int *esc, int depth0, uint64_t *isobj, uint64_t **heap, int cap) {
    int depth = 0, r;
    const char *s; size_t n;
    char ch = *c->p;
open:
    if (depth + depth0 >= MAX_DEPTH) { c->msg = "nesting deeper than 100000 levels"; return BAD; }
    if (depth >= cap) {
        int ncap = cap * 4 > MAX_DEPTH + 64 ? MAX_DEPTH + 64 : cap * 4;
        uint64_t *nb = realloc(*heap, (size_t)(ncap / 64 + 1) * sizeof(uint64_t));
        if (!nb) { c->msg = "out of memory"; return BAD; }
        if (!*heap) memcpy(nb, isobj, (size_t)(cap / 64) * sizeof(uint64_t));
        *heap = nb;
        isobj = nb;
        cap = ncap;
    }
    if (ch == '{') isobj[depth >> 6] |= 1ULL << (depth & 63);
    else isobj[depth >> 6] &= ~(1ULL << (depth & 63));
    depth++;
    c->p++;
    skip_ws(c);
    if (c->p >= c->end) return NEED_MORE;
    if (*c->p == ((isobj[(depth - 1) >> 6] >> ((depth - 1) & 63)) & 1 ? '}' : ']')) { c->p++; goto closed; }
member:
    if ((isobj[(depth - 1) >> 6] >> ((depth - 1) & 63)) & 1) {
        if (*c->p != '"') { c->msg = "expected a string key"; return BAD; }
        int e = 0;
        r = scan_string(c, &s, &n, &e);
        if (r) return r;
        *esc |= e;
        skip_ws(c);
        if (c->p >= c->end) return NEED_MORE;
        if (*c->p != ':') { c->msg = "expected ':' after a key"; return BAD; }
        c->p++;
        skip_ws(c);
        if (c->p >= c->end) return NEED_MORE;
    }
    ch = *c->p;
    if (ch == '{' || ch == '[') goto open;
    if (ch == '"') {
        int e = 0;
        r = scan_string(c, &s, &n, &e);
        *esc |= e;
    } else {
        r = skip_scalar(c);
    }
    if (r) return r;
after_value:
    skip_ws(c);
    if (c->p >= c->end) return NEED_MORE;
    {
        int obj = (isobj[(depth - 1) >> 6] >> ((depth - 1) & 63)) & 1;
        if (*c->p == ',') {
            c->p++;
            skip_ws(c);
            if (c->p >= c->end) return NEED_MORE;
            goto member;
        }
        if (*c->p == (obj ? '}' : ']')) { c->p++; goto closed; }
        c->msg = obj ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array";
        return BAD;
    }
closed:
    if (--depth == 0) return OK;
    goto after_value;
}

/* Skip one JSON value; *esc accumulates string flags. */
static int skip_value(cur_t *c, int *esc, int depth) {
    if (c->p >= c->end) return NEED_MORE;
    char ch = *c->p;
    if (ch == '"') {
        const char *s; size_t n; int e = 0;
        int r = scan_string(c, &s, &n, &e);
        *esc |= e;
        return r;
    }
    if (ch == '{' || ch == '[') return skip_container(c, esc, depth);
    return skip_scalar(c);
}

/* ------------------------------------------------------------------ number parsing */

/* integer token -> int64; returns 0 ok, 1 not an integer, 2 overflow */
static int parse_i64(const char *s, size_t n, int64_t *out) {
    if (n > 0 && n <= 18 && s[0] != '-') {
        int64_t v = 0;
        for (size_t k = 0; k < n; k++) {
            unsigned d = (unsigned char)s[k] - '0';
            if (d > 9) return 1;
            v = v * 10 + d;
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    int neg = 0;
    if (n == 0) return 1;
    if (s[0] == '-') { neg = 1; i = 1; if (n == 1) return 1; }
    uint64_t v = 0;
    for (; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9) return 1;
        if (v > (UINT64_MAX - d) / 10) return 2;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return 2;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return 2;
        *out = (int64_t)v;
    }
    return 0;
}

static int parse_u64(const char *s, size_t n, uint64_t *out) {
    if (n == 0 || s[0] == '-') return 1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9) return 1;
        if (v > (UINT64_MAX - d) / 10) return 2;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/*
 * Exact decimal microseconds -> int64 nanoseconds. Accepts -?digits(.digits)?([eE][+-]?digits)?
 * Rounds to the nearest ns, ties to even; sets *rounded when discarded digits were non-zero.
 * *frac is the number of fraction digits after applying the exponent (for the resolution).
 * Returns 0 ok, 1 not a number, 2 out of range. Plain digits[.d{1,3}] tokens are read in
 * place by fast_time; this handles the rest (strings, signs, exponents, long fractions).
 */
static int parse_us_to_ns(const char *s, size_t n, int64_t *out, int *frac, int *rounded) {
    char digits[72];
    int nd = 0, nint = 0, nfrac = 0, neg = 0, seen = 0;
    size_t i = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) { neg = s[i] == '-'; i++; }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (nd == 0 && s[i] == '0') { seen = 1; continue; }  /* leading zeros */
        if (nd >= 70) return 2;
        digits[nd++] = s[i];
        nint++;
        seen = 1;
    }
    if (i < n && s[i] == '.') {
        i++;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (nd >= 70) {
                /* beyond 70 significant digits only matters for rounding: keep a sticky digit */
                if (s[i] != '0') digits[69] = digits[69] == '0' ? '1' : digits[69];
                nfrac++;
                seen = 1;
                continue;
            }
            digits[nd++] = s[i];
            nfrac++;
            seen = 1;
        }
    }
    if (!seen) return 1;
    long e = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '-' || s[i] == '+')) { eneg = s[i] == '-'; i++; }
        if (i >= n) return 1;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (e > 100000) return 2;
            e = e * 10 + (s[i] - '0');
        }
        if (eneg) e = -e;
    }
    if (i != n) return 1;
    long f = (long)nfrac - e;
    *frac = f > 0 ? (int)(f > 1000 ? 1000 : f) : 0;
    /* value = 0.digits * 10^(nint + e) µs; ns integer digits = first (nint + e + 3) digits */
    long point = (long)nint + e + 3;
    if (nd == 0) { *out = 0; *rounded = 0; return 0; }
    uint64_t v = 0;
    long k;
    long ip = point < 0 ? 0 : point;
    for (k = 0; k < ip; k++) {
        unsigned d = k < nd ? (unsigned)(digits[k] - '0') : 0;
        if (v > (UINT64_MAX - d) / 10) return 2;
        v = v * 10 + d;
    }
    int rnd = 0, up = 0;
    if (point < nd) {
        /* discarded digits start at index point (may be negative: implicit zeros) */
        int any = 0;
        for (k = point < 0 ? 0 : point; k < nd; k++) if (digits[k] != '0') { any = 1; break; }
        rnd = any;
        if (point >= 0) {
            unsigned first = (unsigned)(digits[point] - '0');
            int rest = 0;
            for (k = point + 1; k < nd; k++) if (digits[k] != '0') { rest = 1; break; }
            if (first > 5 || (first == 5 && rest)) up = 1;
            else if (first == 5 && !rest) up = (int)(v & 1);  /* tie: to even */
        }
    }
    if (up) {
        if (v == UINT64_MAX) return 2;
        v++;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return 2;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX) return 2;
        *out = (int64_t)v;
    }
    *rounded = rnd;
    return 0;
}

/* ------------------------------------------------------------------ string output */

static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ULL) break;
    }
    if (n - i < 8 && !(load_upto7((const char *)s + i, n - i) & 0x8080808080808080ULL)) return 1;  /* an ASCII tail */
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        unsigned min;
        if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; c &= 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; c &= 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; c &= 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

/* append bytes replacing invalid UTF-8 sequences with U+FFFD; returns 1 if anything replaced */
static int append_utf8_repaired(buf_t *b, const unsigned char *s, size_t n, int *oom) {
    int repaired = 0;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { if (buf_putc(b, (char)c)) *oom = 1; i++; continue; }
        size_t len = 0;
        unsigned min = 0, v = 0;
        if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; v = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; v = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; v = c & 0x07; }
        int ok = len && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) ok = 0;
            else v = (v << 6) | (s[i + k] & 0x3F);
        }
        if (ok && (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))) ok = 0;
        if (ok) {
            if (buf_append(b, s + i, len)) *oom = 1;
            i += len;
        } else {
            if (buf_append(b, "\xEF\xBF\xBD", 3)) *oom = 1;
            repaired = 1;
            i++;
        }
    }
    return repaired;
}

static void put_utf8(buf_t *b, unsigned cp, int *oom) {
    char t[4];
    size_t n;
    if (cp < 0x80) { t[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { t[0] = (char)(0xC0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    if (buf_append(b, t, n)) *oom = 1;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/*
 * Decode a raw JSON string body into b (escapes resolved, invalid UTF-8 replaced).
 * Returns 1 if a repair was needed (bad escape, invalid UTF-8, lone surrogate).
 */
static int decode_string(buf_t *b, const char *s, size_t n, int esc, int *oom) {
    if (!(esc & 1)) {
        if (utf8_valid((const unsigned char *)s, n)) {
            if (buf_append(b, s, n)) *oom = 1;
            return (esc & 4) ? 1 : 0;
        }
        return append_utf8_repaired(b, (const unsigned char *)s, n, oom) | ((esc & 4) ? 1 : 0);
    }
    int repaired = (esc & 4) ? 1 : 0;
    size_t start = b->len;
    size_t i = 0;
    while (i < n) {
        char ch = s[i];
        if (ch != '\\') { if (buf_putc(b, ch)) *oom = 1; i++; continue; }
        if (i + 1 >= n) { repaired = 1; i++; continue; }
        char x = s[i + 1];
        i += 2;
        switch (x) {
        case '"': buf_putc(b, '"'); break;
        case '\\': buf_putc(b, '\\'); break;
        case '/': buf_putc(b, '/'); break;
        case 'b': buf_putc(b, '\b'); break;
        case 'f': buf_putc(b, '\f'); break;
        case 'n': buf_putc(b, '\n'); break;
        case 'r': buf_putc(b, '\r'); break;
        case 't': buf_putc(b, '\t'); break;
        case 'u': {
            int h[4];
            if (i + 4 > n) { repaired = 1; put_utf8(b, 0xFFFD, oom); i = n; break; }
            for (int k = 0; k < 4; k++) h[k] = hexval(s[i + k]);
            if (h[0] < 0 || h[1] < 0 || h[2] < 0 || h[3] < 0) { repaired = 1; put_utf8(b, 0xFFFD, oom); break; }
            unsigned cp = (unsigned)((h[0] << 12) | (h[1] << 8) | (h[2] << 4) | h[3]);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
                    int g[4];
                    for (int k = 0; k < 4; k++) g[k] = hexval(s[i + 2 + k]);
                    if (g[0] >= 0 && g[1] >= 0 && g[2] >= 0 && g[3] >= 0) {
                        unsigned lo = (unsigned)((g[0] << 12) | (g[1] << 8) | (g[2] << 4) | g[3]);
                        if (lo >= 0xDC00 && lo <= 0xDFFF) {
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            i += 6;
                            put_utf8(b, cp, oom);
                            break;
                        }
                    }
                }
                repaired = 1;
                cp = 0xFFFD;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                repaired = 1;
                cp = 0xFFFD;
            }
            put_utf8(b, cp, oom);
            break;
        }
        default:
            repaired = 1;
            buf_putc(b, '\\');
            buf_putc(b, x);
        }
    }
    {
        /* validate what we produced */
        if (!utf8_valid((const unsigned char *)b->p + start, b->len - start)) {
            size_t len = b->len - start;
            char *tmp = malloc(len ? len : 1);
            if (!tmp) { *oom = 1; return repaired; }
            memcpy(tmp, b->p + start, len);
            b->len = start;
            append_utf8_repaired(b, (const unsigned char *)tmp, len, oom);
            free(tmp);
            repaired = 1;
        }
    }
    return repaired;
}

/*
 * Append a raw JSON value span as valid JSON text: strings with unescaped inner quotes get
 * them escaped, invalid UTF-8 is replaced. Only used when a span carries repair flags.
 */
static void append_json_repaired(buf_t *b, const char *s, size_t n, int *oom) {
    cur_t c = {s, s + n, NULL, NULL};
    size_t i = 0;
    while (i < n) {
        if (s[i] != '"') {
            size_t j = i;
            while (j < n && s[j] != '"') j++;
            append_utf8_repaired(b, (const unsigned char *)s + i, j - i, oom);
            i = j;
            continue;
        }
        c.p = s + i;
        c.end = s + n;
        const char *body; size_t bn; int e = 0;
        int r = scan_string(&c, &body, &bn, &e);
        if (r != OK) {
            /* string reaching the end of the span: take the rest as its body */
            body = s + i + 1;
            bn = n - i - 1;
            if (bn && body[bn - 1] == '"') bn--;
            c.p = s + n;
        }
        buf_putc(b, '"');
        for (size_t k = 0; k < bn; k++) {
            if (body[k] == '\\' && k + 1 < bn) { buf_putc(b, body[k]); buf_putc(b, body[k + 1]); k++; continue; }
            if (body[k] == '\\') { buf_append(b, "\\\\", 2); continue; }  /* a lone backslash at the end: escaped */
            if (body[k] == '"' ) { buf_putc(b, '\\'); buf_putc(b, '"'); continue; }
            size_t j = k;
            while (j < bn && body[j] != '"' && body[j] != '\\') j++;
            append_utf8_repaired(b, (const unsigned char *)body + k, j - k, oom);
            k = j - 1;
        }
        buf_putc(b, '"');
        i = (size_t)(c.p - s);
    }
}

/* append raw JSON span, repairing only when needed */
static int append_json(buf_t *b, const char *s, size_t n, int esc, int *oom) {
    if ((esc & 4) || !utf8_valid((const unsigned char *)s, n)) {
        append_json_repaired(b, s, n, oom);
        return 1;
    }
    if (buf_append(b, s, n)) *oom = 1;
    return 0;
}

/* ------------------------------------------------------------------ element parsing */

static int key_is(const char *k, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n == m && memcmp(k, lit, n) == 0;
}

static int lookup_typed(Parser *P, const char *k, size_t n, int esc) {
    if (esc) return -1;
    uint64_t h = hash_bytes(k, n);
    size_t i = h & (KEYTAB - 1);
    while (P->keytab[i]) {
        typed_key_t *t = &P->keys[P->keytab[i] - 1];
        if (t->keylen == n && memcmp(t->key, k, n) == 0) return P->keytab[i] - 1;
        i = (i + 1) & (KEYTAB - 1);
    }
    return -1;
}

/* an escaped key ("n\u0061me"): decode it for matching into P->keybuf (the raw text is kept for output) */
static inline void key_for_match(Parser *P, const char **k, size_t *kn, int kesc) {
    if (!(kesc & 1)) return;
    P->keybuf.len = 0;
    decode_string(&P->keybuf, *k, *kn, kesc, &P->oom);
    *k = P->keybuf.p ? P->keybuf.p : "";
    *kn = P->keybuf.len;
}

/* a field added before `ntyped` must be added to elem_reset too */
_Static_assert(offsetof(elem_t, ntyped) + sizeof(int) == 11 * 8 + 10 * 4, "elem_reset zeroes each field up to ntyped");

static inline void elem_reset(elem_t *e) {
    /* field by field: a memset of these 128 bytes compiles to `rep stos`, slow to start */
    e->ph = e->cat = e->name = e->bp = e->s = NULL;
    e->pid_txt = e->tid_txt = e->id_txt = NULL;
    e->args_raw = NULL;
    e->reason = NULL;
    e->typed_cols = 0;
    e->has_pid = e->has_tid = e->has_ts = e->has_dur = e->has_id = 0;
    e->flags = 0;
    e->nargs = e->nextra = 0;
    e->args_esc = 0;
    e->ntyped = 0;
    e->args.len = 0;
    e->extra.len = 0;
}

static void append_kv(buf_t *b, int *count, const char *k, size_t kn, int kesc,
                      const char *v, size_t vn, int vesc, int *oom, int *repaired) {
    if (*count == 0) buf_putc(b, '{');
    else buf_append(b, ", ", 2);
    buf_putc(b, '"');
    *repaired |= append_json(b, k, kn, kesc, oom);
    buf_append(b, "\": ", 3);
    *repaired |= append_json(b, v, vn, vesc, oom);
    (*count)++;
}

/* scalar token at c->p (number/literal) -> span */
static int scan_scalar(cur_t *c, const char **s, size_t *n) {
    const char *p = c->p;
    int esc = 0;
    int r = skip_value(c, &esc, 0);
    if (r) return r;
    *s = p;
    *n = (size_t)(c->p - p);
    return OK;
}

/* a number token with a leading zero ("01", "-007"): not JSON, accepted and flagged */
static inline int leading_zero(const char *s, size_t n) {
    if (n && s[0] == '-') { s++; n--; }
    return n >= 2 && s[0] == '0' && s[1] >= '0' && s[1] <= '9';
}

/* parse a value that should be an integer id / pid / tid */
/*
 * Fast path for a plain integer token (-?digits, at most 18 digits, followed by a delimiter):
 * returns 1 and advances the cursor; returns 0 (cursor untouched) for anything else, including
 * a token that may continue past the end of the buffer.
 */
/* SWAR digits: for t = 8 text bytes ^ '0' each, the bytes that are not a digit (exact per byte: no carries) */
static inline uint64_t swar_nondigit(uint64_t t) {
    return (t & 0xF0F0F0F0F0F0F0F0ULL) | (((t & 0x0F0F0F0F0F0F0F0FULL) + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL);
}

/* the value of the first k (1..8) digits of t (bytes ^ '0', all digits up to k) */
static inline uint64_t swar_value(uint64_t t, int k) {
    uint64_t v = t << (8 * (8 - k));
    v = ((v & 0x0F0F0F0F0F0F0F0FULL) * 2561) >> 8;
    v = ((v & 0x00FF00FF00FF00FFULL) * 6553601) >> 16;
    return ((v & 0x0000FFFF0000FFFFULL) * 42949672960001ULL) >> 32;
}

static const int64_t POW10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* the run of digits at p (at most 24 bytes read; end - p >= 24): its length, capped at 17, and its value
   when the length is at most 16 */
static inline int swar_digits(const char *p, int64_t *value) {
    uint64_t w, t, nd;
    memcpy(&w, p, 8);
    t = w ^ 0x3030303030303030ULL;
    nd = swar_nondigit(t);
    if (nd) {
        int k = ctz64(nd) >> 3;
        *value = k ? (int64_t)swar_value(t, k) : 0;
        return k;
    }
    int64_t v = (int64_t)swar_value(t, 8);
    memcpy(&w, p + 8, 8);
    t = w ^ 0x3030303030303030ULL;
    nd = swar_nondigit(t);
    if (nd) {
        int k = ctz64(nd) >> 3;
        *value = k ? v * POW10[k] + (int64_t)swar_value(t, k) : v;
        return 8 + k;
    }
    *value = v * POW10[8] + (int64_t)swar_value(t, 8);
    memcpy(&w, p + 16, 8);
    t = (w ^ 0x3030303030303030ULL);
    nd = swar_nondigit(t);
    return (nd & 0xFF) ? 16 : 17;  /* 17: at least 17 digits */
}

static inline int fast_int(cur_t *c, int64_t *out) {
    const char *p = c->p, *end = c->end;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    const char *d0 = p;
    int64_t v = 0;
    if (end - p >= 24) {
        /* SWAR: the same token rule as the loop below (1-18 digits, then a delimiter) */
        int k = swar_digits(p, &v);
        if (k > 16) {
            /* 17 or more digits: the loop decides (rare) */
            v = 0;
            while (p < end && (unsigned)(*p - '0') <= 9 && p - d0 < 18) v = v * 10 + (*p++ - '0');
        } else {
            p += k;
        }
    } else {
        while (p < end && (unsigned)(*p - '0') <= 9 && p - d0 < 18) v = v * 10 + (*p++ - '0');
    }
    if (p == d0 || p >= end || DELIM[(unsigned char)*p] != 1 || (*d0 == '0' && p - d0 > 1)) return 0;
    *out = neg ? -v : v;
    c->p = p;
    return 1;
}

/* Fast path for µs time tokens digits[.d{1,3}] (at most 16 integer digits, < 9e15) -> exact ns. */
static inline int fast_time(cur_t *c, int64_t *out, int *frac) {
    static const int64_t scale[4] = {1000, 100, 10, 1};
    const char *p = c->p, *end = c->end;
    const char *d0 = p;
    int64_t v = 0;
    if (end - p >= 32) {
        /* SWAR: the same token rule as the loop below */
        int k = swar_digits(p, &v);
        if (k == 0 || k > 16 || v >= 9000000000000000LL || (*d0 == '0' && k > 1)) return 0;
        p += k;
        int nf = 0;
        if (*p == '.') {
            uint64_t w;
            memcpy(&w, p + 1, 8);
            uint64_t t = w ^ 0x3030303030303030ULL;
            uint64_t nd = swar_nondigit(t);
            nf = ctz64(nd | (1ULL << 63)) >> 3;  /* digits after the point (7 means 7 or more) */
            if (nf == 0 || nf > 3) return 0;
            v = v * POW10[nf] + (int64_t)swar_value(t, nf);
            p += 1 + nf;
        }
        if (DELIM[(unsigned char)*p] != 1) return 0;
        *out = v * scale[nf];
        *frac = nf;
        c->p = p;
        return 1;
    }
    while (p < end && (unsigned)(*p - '0') <= 9 && p - d0 < 16) v = v * 10 + (*p++ - '0');
    if (p == d0 || p >= end || v >= 9000000000000000LL || (*d0 == '0' && p - d0 > 1)) return 0;
    int nf = 0;
    if (*p == '.') {
        p++;
        while (p < end && (unsigned)(*p - '0') <= 9 && nf < 3) { v = v * 10 + (*p++ - '0'); nf++; }
        if (nf == 0) return 0;
    }
    if (p >= end || DELIM[(unsigned char)*p] != 1) return 0;
    *out = v * scale[nf];
    *frac = nf;
    c->p = p;
    return 1;
}

static int parse_idlike(cur_t *c, elem_t *e, int *has, int64_t *v, const char **txt, size_t *txtn, int *is_str) {
    if (c->p >= c->end) return NEED_MORE;
    if (fast_int(c, v)) { *has = 1; return OK; }
    if (*c->p == '"') {
        const char *s; size_t n; int e = 0;
        int r = scan_string(c, &s, &n, &e);
        if (r) return r;
        *txt = s; *txtn = n; *is_str = 1 | (e << 1);
        return OK;
    }
    const char *s; size_t n;
    int r = scan_scalar(c, &s, &n);
    if (r) return r;
    if (n == 4 && memcmp(s, "null", 4) == 0) return OK;
    if (leading_zero(s, n)) e->flags |= FL_JSON_REPAIRED;
    if (parse_i64(s, n, v) == 0) { *has = 1; return OK; }
    *txt = s; *txtn = n; *is_str = 0;
    return OK;
}

static int parse_time_value(Parser *P, cur_t *c, int *has, int64_t *v, elem_t *e, const char *which) {
    if (c->p >= c->end) return NEED_MORE;
    {
        int frac;
        if (fast_time(c, v, &frac)) {
            *has = 1;
            if (frac > P->max_frac) P->max_frac = frac;
            return OK;
        }
    }
    const char *s; size_t n;
    if (*c->p == '"') {
        int es = 0;
        int r = scan_string(c, &s, &n, &es);
        if (r) return r;
    } else {
        int r = scan_scalar(c, &s, &n);
        if (r) return r;
        if (leading_zero(s, n)) e->flags |= FL_JSON_REPAIRED;
    }
    if (n == 4 && memcmp(s, "null", 4) == 0) return OK;
    int frac = 0, rounded = 0;
    int r = parse_us_to_ns(s, n, v, &frac, &rounded);
    if (r == 1) { e->reason = which[0] == 't' ? "ts is not a number" : "dur is not a number"; return OK; }
    if (r == 2) { e->reason = which[0] == 't' ? "ts out of the int64 ns range" : "dur out of the int64 ns range"; return OK; }
    *has = 1;
    if (frac > P->max_frac) P->max_frac = frac;
    if (rounded) e->flags |= FL_TS_ROUNDED;
    return OK;
}

static int parse_string_field(cur_t *c, const char **s, size_t *n, int *esc, elem_t *e, const char *why) {
    if (c->p >= c->end) return NEED_MORE;
    if (*c->p != '"') {
        const char *v; size_t vn;
        int r = scan_scalar(c, &v, &vn);
        if (r) {
            /* an object/array where a string is expected */
            int ee = 0;
            r = skip_value(c, &ee, 0);
            if (r) return r;
        }
        e->reason = why;
        return OK;
    }
    return scan_string(c, s, n, esc);
}

/* the 48 bytes at p equal sp's bytes where its mask is set */
ALWAYS_INLINE int sep_equal(const char *p, const sep_t *sp) {
#ifdef IX_HAVE_SSE2
#define SEP_BLOCK(k) _mm_and_si128(_mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)(p + 16 * (k))), \
                                                  _mm_loadu_si128((const __m128i *)(const void *)(sp->b + 16 * (k)))), \
                                    _mm_loadu_si128((const __m128i *)(const void *)(sp->m + 16 * (k))))
    /* the blocks the separator covers: one up to 16 bytes, two up to 32 (most), three */
    __m128i acc = SEP_BLOCK(0);
    if (sp->n > 16) {
        acc = _mm_or_si128(acc, SEP_BLOCK(1));
        if (sp->n > 32) acc = _mm_or_si128(acc, SEP_BLOCK(2));
    }
#undef SEP_BLOCK
    return _mm_movemask_epi8(_mm_cmpeq_epi8(acc, _mm_setzero_si128())) == 0xFFFF;
#else
    uint64_t acc = 0;
    for (int k = 0; k < 6; k++) {
        uint64_t x, y, m;
        memcpy(&x, p + 8 * k, 8);
        memcpy(&y, sp->b + 8 * k, 8);
        memcpy(&m, sp->m + 8 * k, 8);
        acc |= (x ^ y) & m;
    }
    return acc == 0;
#endif
}

/* the remembered separator of set that the text at c->p starts with, or NULL */
ALWAYS_INLINE const sep_t *sep_find(const sepset_t *set, const cur_t *c) {
    if (c->end - c->p < 48) return NULL;
    if (set->way[0].n && sep_equal(c->p, &set->way[0])) return &set->way[0];
    if (set->way[1].n && sep_equal(c->p, &set->way[1])) return &set->way[1];
    return NULL;
}

/* remember the bytes [from, to) (read by a generic parse) as leading to `next` (key at key, kn bytes) */
static void sep_remember(sepset_t *set, const char *from, const char *to, int next, const char *key, size_t kn) {
    size_t n = (size_t)(to - from);
    if (n == 0 || n > SEP_MAX || !g_learn) return;
    sep_t *sp = &set->way[set->older];
    set->older ^= 1;
    memset(sp->b, 0, sizeof sp->b);
    memset(sp->m, 0, sizeof sp->m);
    memcpy(sp->b, from, n);
    memset(sp->m, 0xFF, n);
    sp->n = (uint8_t)n;
    sp->next = (int16_t)next;
    sp->koff = key ? (uint8_t)(key - from) : 0;
    sp->kn = key ? (uint8_t)kn : 0;
}

/* an integer at c->p into *out, as fast_int reads it, through the memo of the last one (a token is
   remembered once it came twice in a row: counters such as "External id" never are) */
ALWAYS_INLINE int memo_int(intmemo_t *m, cur_t *c, int64_t *out) {
    if (m->n && c->end - c->p >= 16) {
        uint64_t x0, x1;
        memcpy(&x0, c->p, 8);
        memcpy(&x1, c->p + 8, 8);
        if (!(((x0 ^ m->w[0]) & m->m[0]) | ((x1 ^ m->w[1]) & m->m[1]))) {
            *out = m->value;
            c->p += m->n;
            return 1;
        }
    }
    const char *from = c->p;
    if (!fast_int(c, out)) return 0;
    size_t n = (size_t)(c->p - from);
    if (*out != m->value) {
        m->value = *out;
        m->n = 0;
    } else if (n + 1 <= 16 && c->end - from >= 16 && g_learn) {
        unsigned char b[16] = {0}, k[16] = {0};
        memcpy(b, from, n + 1);
        memset(k, 0xFF, n + 1);
        memcpy(m->w, b, 16);
        memcpy(m->m, k, 16);
        m->n = (uint8_t)n;
    }
    return 1;
}

/* One step of an object's members, at c->p after a value (or after '{' when `first`): the remembered
   separator of `set` there is taken whole (*sp; its `next` says which key, or that the object closed);
   otherwise the comma or the closing brace and the whitespace up to the next key are read as the
   generic parse reads them (*sp NULL, c->p at the key's quote unless *closed). OK, NEED_MORE or BAD. */
ALWAYS_INLINE int object_step(sepset_t *set, cur_t *c, int first, const char *bad_sep, const sep_t **sp, int *closed) {
    *closed = 0;
    if ((*sp = sep_find(set, c))) {
        c->p += (*sp)->n;
        *closed = (*sp)->next == SEP_CLOSE;
        return OK;
    }
    const char *from = c->p;
    if (!first) {
        skip_ws(c);
        if (c->p >= c->end) return NEED_MORE;
        if (*c->p == '}') { c->p++; sep_remember(set, from, c->p, SEP_CLOSE, NULL, 0); *closed = 1; return OK; }
        if (*c->p != ',') { c->msg = bad_sep; return BAD; }
        c->p++;
    }
    skip_ws(c);
    if (c->p >= c->end) return NEED_MORE;
    if (*c->p == '}') { c->p++; *closed = 1; }
    return OK;
}

/* the quoted key at c->p and its colon, read generically: its raw text (k, kn, kesc) and the text it is
   matched by (mk, mkn: decoded into P->keybuf when escaped) */
static int scan_key(Parser *P, cur_t *c, const char *bad_colon, const char **k, size_t *kn, int *kesc,
                    const char **mk, size_t *mkn) {
    int r = scan_string(c, k, kn, kesc);
    if (r) return r;
    skip_ws(c);
    if (c->p >= c->end) return NEED_MORE;
    if (*c->p != ':') { c->msg = bad_colon; return BAD; }
    c->p++;
    *mk = *k;
    *mkn = *kn;
    key_for_match(P, mk, mkn, *kesc);
    return OK;
}

static int parse_args(Parser *P, cur_t *c, elem_t *e) {
    const char *start = c->p;
    if (c->p >= c->end) return NEED_MORE;
    if (*c->p != '{') {
        int esc = 0;
        int r = skip_value(c, &esc, 0);
        if (r) return r;
        /* non-object args: keep verbatim in extra */
        int rep = 0;
        append_kv(&e->extra, &e->nextra, "args", 4, 0, start, (size_t)(c->p - start), esc, &P->oom, &rep);
        if (rep) e->flags |= FL_ARGS_REPAIRED;
        return OK;
    }
    c->p++;
    int rep = 0;
    int prev = MAX_TYPED + 1;  /* asep index of the key read last: typed index, MAX_TYPED (untyped), '{' */
    for (;;) {
        const char *k; size_t kn; int kesc = 0;
        int ti, r, closed;
        const char *from = c->p;
        const sep_t *sp;
        r = object_step(&P->asep[prev], c, prev == MAX_TYPED + 1, "expected ',' or '}' in args", &sp, &closed);
        if (r) return r;
        if (closed) break;
        if (sp) {
            k = from + sp->koff;
            kn = sp->kn;
            ti = sp->next;
        } else {
            if (*c->p != '"') { c->msg = "expected a string key in args"; return BAD; }
            const char *mk; size_t mkn;
            r = scan_key(P, c, "expected ':' after a key in args", &k, &kn, &kesc, &mk, &mkn);
            if (r) return r;
            ti = lookup_typed(P, mk, mkn, 0);
            skip_ws(c);
            if (!kesc) sep_remember(&P->asep[prev], from, c->p, ti, k, kn);
        }
        prev = ti >= 0 ? ti : MAX_TYPED;
        skip_ws(c);
        const char *v = c->p;
        int vesc = 0;
        int64_t ival = 0;
        int is_int = fast_int(c, &ival);
        if (!is_int) {
            r = skip_value(c, &vesc, 1);
            if (r) return r;
        }
        size_t vn = (size_t)(c->p - v);
        int taken = 0;
        if (ti >= 0 && e->ntyped < MAX_TYPED) {
            typed_key_t *t = &P->keys[ti];
            if (!(e->typed_cols >> t->col & 1)) {
                int slot = e->ntyped;
                e->typed[slot].col = t->col;
                e->typed[slot].kind = t->kind;
                e->typed[slot].p = v;
                e->typed[slot].n = vn;
                e->typed[slot].esc = vesc;
                switch (t->kind) {
                case K_I64:
                    if (is_int) { e->typed[slot].i = ival; taken = 1; }
                    else if (parse_i64(v, vn, &e->typed[slot].i) == 0) taken = 1;
                    break;
                case K_U64: {
                    uint64_t u;
                    if (parse_u64(v, vn, &u) == 0) { e->typed[slot].i = (int64_t)u; taken = 1; }
                    break;
                }
                case K_F64:
                    if (vn > 0 && vn < 64 && ((v[0] >= '0' && v[0] <= '9') || v[0] == '-')) {
                        char tmp[64];
                        memcpy(tmp, v, vn);
                        tmp[vn] = 0;
                        char *endp;
                        double d = strtod(tmp, &endp);
                        if (endp == tmp + vn) { e->typed[slot].f = d; taken = 1; }
                    }
                    break;
                case K_STR:
                    if (vn >= 2 && v[0] == '"') { e->typed[slot].p = v + 1; e->typed[slot].n = vn - 2; taken = 1; }
                    break;
                case K_JSON:
                    if (!(vn == 4 && memcmp(v, "null", 4) == 0)) taken = 1;
                    break;
                case K_BOOL:
                    if (vn == 4 && memcmp(v, "true", 4) == 0) { e->typed[slot].i = 1; taken = 1; }
                    else if (vn == 5 && memcmp(v, "false", 5) == 0) { e->typed[slot].i = 0; taken = 1; }
                    else if (vn == 6 && memcmp(v, "\"true\"", 6) == 0) { e->typed[slot].i = 1; taken = 1; }
                    else if (vn == 7 && memcmp(v, "\"false\"", 7) == 0) { e->typed[slot].i = 0; taken = 1; }
                    break;
                }
                if (taken) { e->ntyped++; e->typed_cols |= (uint64_t)1 << t->col; }
            }
        }
        e->args_esc |= kesc | vesc;
        if (!taken) append_kv(&e->args, &e->nargs, k, kn, kesc, v, vn, vesc, &P->oom, &rep);
    }
    if (rep) e->flags |= FL_ARGS_REPAIRED;
    e->args_raw = start;
    e->args_raw_n = (size_t)(c->p - start);
    return OK;
}

/* The fields of an event proftab reads. Each is usually written as "key": (the quoted key, then its
   colon directly): match_event_key recognises that form with one masked 8-byte compare, which gives
   exactly what scan_string + ':' would (the key holds no quote or backslash and ':' follows its
   closing quote); any other spelling (spaces before the colon, escapes) goes through scan_string
   and event_key_id. */
enum { EK_PH, EK_CAT, EK_NAME, EK_PID, EK_TID, EK_TS, EK_DUR, EK_ID, EK_BP, EK_S, EK_ARGS, EK_OTHER, EK_START };
typedef struct { const char *text; size_t n; uint64_t word, mask; } event_key_t;
static event_key_t EVENT_KEYS[EK_OTHER] = {
    {"\"ph\":", 5, 0, 0}, {"\"cat\":", 6, 0, 0}, {"\"name\":", 7, 0, 0}, {"\"pid\":", 6, 0, 0},
    {"\"tid\":", 6, 0, 0}, {"\"ts\":", 5, 0, 0}, {"\"dur\":", 6, 0, 0}, {"\"id\":", 5, 0, 0},
    {"\"bp\":", 5, 0, 0}, {"\"s\":", 4, 0, 0}, {"\"args\":", 7, 0, 0},
};
/* by the key's first letter: up to two candidates (EK_OTHER = none) */
static unsigned char EK_FIRST[256][2];

static void init_event_keys(void) {
    for (int i = 0; i < 256; i++) EK_FIRST[i][0] = EK_FIRST[i][1] = EK_OTHER;
    for (int i = 0; i < EK_OTHER && g_learn; i++) {
        event_key_t *k = &EVENT_KEYS[i];
        uint64_t w = 0;
        memcpy(&w, k->text, k->n);
        k->word = w;
        k->mask = k->n >= 8 ? ~0ULL : (((uint64_t)1 << (8 * k->n)) - 1);
        unsigned char f = (unsigned char)k->text[1];
        if (EK_FIRST[f][0] == EK_OTHER) EK_FIRST[f][0] = (unsigned char)i;
        else EK_FIRST[f][1] = (unsigned char)i;
    }
}

/* c->p at '"': the id of the event key written there as "key": (at least 8 bytes must remain), or EK_OTHER */
ALWAYS_INLINE int match_event_key(const cur_t *c) {
    if (c->end - c->p < 8) return EK_OTHER;
    uint64_t w;
    memcpy(&w, c->p, 8);
    const unsigned char *cand = EK_FIRST[(unsigned char)c->p[1]];
    if (cand[0] != EK_OTHER && (w & EVENT_KEYS[cand[0]].mask) == EVENT_KEYS[cand[0]].word) return cand[0];
    if (cand[1] != EK_OTHER && (w & EVENT_KEYS[cand[1]].mask) == EVENT_KEYS[cand[1]].word) return cand[1];
    return EK_OTHER;
}

/* the id of a decoded key of n bytes */
static int event_key_id(const char *k, size_t n) {
    for (int i = 0; i < EK_OTHER; i++)
        if (EVENT_KEYS[i].n - 3 == n && memcmp(EVENT_KEYS[i].text + 1, k, n) == 0) return i;
    return EK_OTHER;
}

/* parse one traceEvents element into P->e (not committed) */
static int parse_element(Parser *P, cur_t *c) {
    elem_t *e = &P->e;
    elem_reset(e);
    if (c->p >= c->end) return NEED_MORE;
    if (*c->p != '{') {
        int esc = 0;
        int r = skip_value(c, &esc, 0);
        if (r) return r;
        e->reason = "element is not an object";
        return OK;
    }
    c->p++;
    int prev = EK_START;  /* the key whose value was read last */
    for (;;) {
        const char *k; size_t kn; int kesc = 0;
        int r, kid, closed;
        const char *from = c->p;
        const sep_t *sp;
        r = object_step(&P->esep[prev], c, prev == EK_START, "expected ',' or '}' after an event field", &sp, &closed);
        if (r) return r;
        if (closed) break;
        if (sp) {
            k = from + sp->koff;
            kn = sp->kn;
            kid = sp->next;
        } else {
            if (*c->p != '"') { c->msg = "expected a string key in an event"; return BAD; }
            kid = match_event_key(c);
            if (kid != EK_OTHER) {
                k = c->p + 1;
                kn = EVENT_KEYS[kid].n - 3;
                c->p += EVENT_KEYS[kid].n;
            } else {
                const char *mk; size_t mkn;
                r = scan_key(P, c, "expected ':' after a key in an event", &k, &kn, &kesc, &mk, &mkn);
                if (r) return r;
                kid = event_key_id(mk, mkn);
            }
            skip_ws(c);
            if (!kesc) sep_remember(&P->esep[prev], from, c->p, kid, k, kn);
        }
        prev = kid;
        skip_ws(c);
        if (c->p >= c->end) return NEED_MORE;
        switch (kid) {
        /* the usual values (a string, an integer, a decimal time) are read inline; the called
           functions repeat the same fast reads before their general cases */
        case EK_PH:
            r = *c->p == '"' ? scan_string(c, &e->ph, &e->ph_n, &e->ph_esc)
                             : parse_string_field(c, &e->ph, &e->ph_n, &e->ph_esc, e, "ph is not a string");
            break;
        case EK_CAT:
            r = *c->p == '"' ? scan_string(c, &e->cat, &e->cat_n, &e->cat_esc)
                             : parse_string_field(c, &e->cat, &e->cat_n, &e->cat_esc, e, "cat is not a string");
            break;
        case EK_NAME:
            r = *c->p == '"' ? scan_string(c, &e->name, &e->name_n, &e->name_esc)
                             : parse_string_field(c, &e->name, &e->name_n, &e->name_esc, e, "name is not a string");
            break;
        case EK_PID:
            if (memo_int(&P->pid_memo, c, &e->pid)) { e->has_pid = 1; r = OK; }
            else r = parse_idlike(c, e, &e->has_pid, &e->pid, &e->pid_txt, &e->pid_txt_n, &e->pid_txt_str);
            break;
        case EK_TID:
            if (memo_int(&P->tid_memo, c, &e->tid)) { e->has_tid = 1; r = OK; }
            else r = parse_idlike(c, e, &e->has_tid, &e->tid, &e->tid_txt, &e->tid_txt_n, &e->tid_txt_str);
            break;
        case EK_TS: case EK_DUR: {
            int is_ts = kid == EK_TS, frac;
            int64_t *v = is_ts ? &e->ts : &e->dur;
            if (fast_time(c, v, &frac)) {
                *(is_ts ? &e->has_ts : &e->has_dur) = 1;
                if (frac > P->max_frac) P->max_frac = frac;
                r = OK;
            } else {
                r = parse_time_value(P, c, is_ts ? &e->has_ts : &e->has_dur, v, e, is_ts ? "ts" : "dur");
            }
            break;
        }
        case EK_ID: r = parse_idlike(c, e, &e->has_id, &e->id, &e->id_txt, &e->id_txt_n, &e->id_txt_str); break;
        case EK_BP: r = parse_string_field(c, &e->bp, &e->bp_n, &e->bp_esc, e, "bp is not a string"); break;
        case EK_S: r = parse_string_field(c, &e->s, &e->s_n, &e->s_esc, e, "s is not a string"); break;
        /* typed values are extracted for every ph; commit_element keeps C/M args whole */
        case EK_ARGS: r = parse_args(P, c, e); break;
        default: {
            const char *v = c->p;
            int vesc = 0;
            r = skip_value(c, &vesc, 0);
            if (r == OK) {
                int rep = 0;
                append_kv(&e->extra, &e->nextra, k, kn, kesc, v, (size_t)(c->p - v), vesc, &P->oom, &rep);
                if (rep) e->flags |= FL_ARGS_REPAIRED;
            }
        }
        }
        if (r) return r;
    }
    if (!e->reason) {
        if (!e->ph) e->reason = "missing ph";
    }
    if (e->ph && (e->ph_esc & 1)) {
        /* classify on the decoded phase ("\u0058" is "X"), like the Python side does */
        P->keybuf.len = 0;
        int rep = decode_string(&P->keybuf, e->ph, e->ph_n, e->ph_esc, &P->oom);
        if (P->keybuf.len <= sizeof P->ph_dec) {
            if (P->keybuf.len) memcpy(P->ph_dec, P->keybuf.p, P->keybuf.len);
            e->ph = P->ph_dec;
            e->ph_n = P->keybuf.len;
            e->ph_esc = 0;
            if (rep) e->flags |= FL_NAME_REPAIRED;
        }
    }
    if (!e->reason && e->has_ts && e->has_dur) {
        int64_t end_ns;
        if (add_overflow_i64(e->ts, e->dur, &end_ns)) e->reason = "ts + dur out of the int64 ns range";
    }
    return OK;
}

/* the code of an escaped string: decoded into P->scratch first */
NOINLINE int32_t dict_intern_escaped(Parser *P, dictcol_t *d, const char *s, size_t n, int esc, int *flags) {
    P->scratch.len = 0;
    if (decode_string(&P->scratch, s, n, esc, &P->oom)) *flags |= FL_NAME_REPAIRED;
    if (has_control((const unsigned char *)s, n)) *flags |= FL_JSON_REPAIRED;
    return dict_intern(d, P->scratch.p ? P->scratch.p : "", P->scratch.len);
}

ALWAYS_INLINE int commit_dict(Parser *P, table_t *T, int which, int64_t row, const char *s, size_t n, int esc, int *flags) {
    dictcol_t *d = &T->dicts[which];
    int32_t code = esc ? dict_intern_escaped(P, d, s, n, esc, flags) : dict_intern(d, s, n);
    if (code < 0) return -1;
    if (d->any_flagged && d->bad[code]) {
        /* decoded text may hold escaped controls (valid JSON): only raw input bytes count */
        if (d->bad[code] & DICT_BAD_UTF8) *flags |= FL_NAME_REPAIRED;
        if (!esc && (d->bad[code] & DICT_RAW_CONTROL)) *flags |= FL_JSON_REPAIRED;
    }
    return fix_set(&d->codes, row, &code, 4);
}

static int commit_text(Parser *P, strcol_t *col, int64_t row, const char *s, size_t n, int is_str, int *flags) {
    if (str_begin(col, row)) return -1;
    if (is_str & 1) {
        if (decode_string(&col->data, s, n, is_str >> 1, &P->oom)) *flags |= FL_NAME_REPAIRED;
    } else if (utf8_valid((const unsigned char *)s, n)) {
        if (buf_append(&col->data, s, n)) return -1;
    } else {
        append_utf8_repaired(&col->data, (const unsigned char *)s, n, &P->oom);
        *flags |= FL_NAME_REPAIRED;
    }
    return str_end(col);
}

static int is_ph(elem_t *e, char ch) {
    return e->ph && e->ph_n == 1 && e->ph[0] == ch;
}

/* Room for row `row` in every fixed-width column that is dense up to it (next == row), so that fix_set's
   dense write needs no capacity check: once per doubling of the table, not once per column write.
   A column behind (next < row) is sparse from its next write on, which the slow path grows itself. */
NOINLINE int table_reserve(table_t *T, int64_t row) {
    static const size_t fix_width[N_FIX] = {8, 8, 8, 8, 8, 8, 8, 2};
    int64_t cap = T->cap_rows ? T->cap_rows : 32;
    while (cap <= row) cap *= 2;
    for (int i = 0; i < N_FIX + N_DICT + MAX_TYPED; i++) {
        fixcol_t *c = i < N_FIX ? &T->fix[i] : i < N_FIX + N_DICT ? &T->dicts[i - N_FIX].codes : &T->tfix[i - N_FIX - N_DICT];
        size_t width = i < N_FIX ? fix_width[i] : i < N_FIX + N_DICT ? 4 : 8;
        if (c->next != row || c->room >= cap) continue;
        fix_sync(c, width);
        if (buf_reserve(&c->data, (size_t)cap * width - c->data.len)) return -1;
        c->room = (int64_t)(c->data.cap / width);
    }
    T->cap_rows = cap;
    return 0;
}

static int commit_element(Parser *P, int64_t offset, const char *from, const char *to) {
    elem_t *e = &P->e;
    int is_event = e->ph && e->ph_n == 1 && !e->reason &&
                   (e->ph[0] == 'X' || e->ph[0] == 'B' || e->ph[0] == 'E' || e->ph[0] == 'b' || e->ph[0] == 'e');
    table_t *T = &P->tabs[is_event ? 0 : 1];
    int64_t row = T->rows;
    if (row >= T->cap_rows && table_reserve(T, row)) return -1;
    int64_t index = P->rows;
    int flags = e->flags;
    int bad = 0;
    if (fix_set(&T->fix[F_EVENT_INDEX], row, &index, 8)) return -1;
    if (e->ph && commit_dict(P, T, D_PH, row, e->ph, e->ph_n, e->ph_esc, &flags)) bad = 1;
    if (e->cat && commit_dict(P, T, D_CAT, row, e->cat, e->cat_n, e->cat_esc, &flags)) bad = 1;
    if (e->name && commit_dict(P, T, D_NAME, row, e->name, e->name_n, e->name_esc, &flags)) bad = 1;
    if (e->bp && commit_dict(P, T, D_BP, row, e->bp, e->bp_n, e->bp_esc, &flags)) bad = 1;
    if (e->s && commit_dict(P, T, D_S, row, e->s, e->s_n, e->s_esc, &flags)) bad = 1;
    if (e->has_pid && fix_set(&T->fix[F_PID], row, &e->pid, 8)) bad = 1;
    if (e->has_tid && fix_set(&T->fix[F_TID], row, &e->tid, 8)) bad = 1;
    if (e->has_ts && fix_set(&T->fix[F_TS], row, &e->ts, 8)) bad = 1;
    if (e->has_dur && fix_set(&T->fix[F_DUR], row, &e->dur, 8)) bad = 1;
    if (e->has_id && fix_set(&T->fix[F_ID], row, &e->id, 8)) bad = 1;
    if (e->pid_txt && commit_text(P, &T->strs[S_PID_TEXT], row, e->pid_txt, e->pid_txt_n, e->pid_txt_str, &flags)) bad = 1;
    if (e->tid_txt && commit_text(P, &T->strs[S_TID_TEXT], row, e->tid_txt, e->tid_txt_n, e->tid_txt_str, &flags)) bad = 1;
    if (e->id_txt && commit_text(P, &T->strs[S_ID_TEXT], row, e->id_txt, e->id_txt_n, e->id_txt_str, &flags)) bad = 1;
    int whole_args = is_ph(e, 'C') || is_ph(e, 'M');
    if (is_ph(e, 'M') && e->args_raw) {
        /* metadata value: args.name / args.labels / args.sort_index (strings decoded, numbers as text) */
        cur_t t = {e->args_raw + 1, e->args_raw + e->args_raw_n, NULL, NULL};
        for (;;) {
            skip_ws(&t);
            if (t.p >= t.end || *t.p != '"') break;
            const char *k; size_t kn; int kesc = 0;
            if (scan_string(&t, &k, &kn, &kesc)) break;
            skip_ws(&t);
            if (t.p >= t.end || *t.p != ':') break;
            t.p++;
            skip_ws(&t);
            const char *v = t.p;
            int vesc = 0;
            if (skip_value(&t, &vesc, 1)) break;
            if (key_is(k, kn, "name") || key_is(k, kn, "labels") || key_is(k, kn, "sort_index")) {
                strcol_t *col = &T->strs[S_MVALUE];
                if (str_begin(col, row)) return -1;
                if (*v == '"') decode_string(&col->data, v + 1, (size_t)(t.p - v) - 2, vesc, &P->oom);
                else append_json(&col->data, v, (size_t)(t.p - v), vesc, &P->oom);
                if (str_end(col)) return -1;
                break;
            }
            skip_ws(&t);
            if (t.p < t.end && *t.p == ',') { t.p++; continue; }
            break;
        }
    }
    if (whole_args && e->args_raw) {
        strcol_t *col = &T->strs[S_ARGS];
        if (str_begin(col, row)) return -1;
        int rep = append_json(&col->data, e->args_raw, e->args_raw_n, e->args_esc, &P->oom);
        if (rep) flags |= FL_ARGS_REPAIRED;
        if (str_end(col)) return -1;
    } else {
        for (int q = 0; q < e->ntyped; q++) {
            int col = e->typed[q].col, kind = e->typed[q].kind;
            if (kind != K_STR && kind != K_JSON) {
                /* I64, U64, BOOL: the integer; F64: the double's bits */
                int64_t bits = e->typed[q].i;
                if (kind == K_F64) memcpy(&bits, &e->typed[q].f, 8);
                if (fix_set(&T->tfix[col], row, &bits, 8)) bad = 1;
                continue;
            }
            strcol_t *sc = &T->tstr[col];
            if (str_begin(sc, row)) return -1;
            if (kind == K_STR ? decode_string(&sc->data, e->typed[q].p, e->typed[q].n, e->typed[q].esc, &P->oom)
                              : append_json(&sc->data, e->typed[q].p, e->typed[q].n, e->typed[q].esc, &P->oom))
                flags |= FL_ARGS_REPAIRED;
            if (str_end(sc)) return -1;
        }
        if (e->nargs) {
            buf_putc(&e->args, '}');
            strcol_t *col = &T->strs[S_ARGS];
            if (str_begin(col, row) || buf_append(&col->data, e->args.p, e->args.len) || str_end(col)) return -1;
        }
    }
    if (e->nextra) {
        buf_putc(&e->extra, '}');
        strcol_t *col = &T->strs[S_EXTRA];
        if (str_begin(col, row) || buf_append(&col->data, e->extra.p, e->extra.len) || str_end(col)) return -1;
    }
    if (e->reason) {
        int dummy = 0;
        if (fix_set(&T->fix[F_OFFSET], row, &offset, 8)) return -1;
        if (commit_dict(P, T, D_REASON, row, e->reason, strlen(e->reason), 0, &dummy)) bad = 1;
        strcol_t *col = &T->strs[S_EXCERPT];
        size_t n = (size_t)(to - from);
        if (n > 160) n = 160;
        if (str_begin(col, row)) return -1;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)from[i];
            buf_putc(&col->data, (ch < 0x20 || ch >= 0x7f) ? ' ' : (char)ch);
        }
        if (str_end(col)) return -1;
    }
    if (flags) {
        uint16_t f16 = (uint16_t)flags;
        if (fix_set(&T->fix[F_FLAGS], row, &f16, 2)) bad = 1;
    }
    T->rows++;
    P->rows++;
    if (bad || P->oom) return -1;
    return 0;
}

/* ------------------------------------------------------------------ driver */

static void set_error(Parser *P, const char *msg, const char *at, const char *base, const char *end) {
    if (P->has_error) return;
    P->has_error = 1;
    snprintf(P->errmsg, sizeof P->errmsg, "%s", msg);
    P->err_offset = P->consumed + (int64_t)(at - base);
    const char *from = at - base > 40 ? at - 40 : base;
    size_t n = (size_t)(end - from);
    if (n > 100) n = 100;
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof P->excerpt - 1; i++) {
        unsigned char ch = (unsigned char)from[i];
        P->excerpt[k++] = (ch < 0x20 || ch >= 0x7f) ? (ch == '\n' ? ' ' : '?') : (char)ch;
    }
    P->excerpt[k] = 0;
}

/*
 * Parse as much of [base, end) as possible. Returns the number of bytes consumed (the start
 * of the first incomplete top-level item).
 */
static size_t run(Parser *P, const char *base, const char *end) {
    cur_t c = {base, end, NULL, NULL};
    if (g_path != PATH_SCALAR) {
        ix_reset(&P->ix, base, end, g_path == PATH_CHECK);
        c.ix = &P->ix;
    }
    const char *mark = base;
    while (!P->has_error) {
        skip_ws(&c);
        mark = c.p;
        if (c.p >= c.end) break;
        if (P->state == ST_START) {
            if (*c.p == '{') { P->state = ST_ENVELOPE; c.p++; mark = c.p; continue; }
            if (*c.p == '[') { P->state = ST_EVENTS; P->top_is_list = 1; P->after_comma = 1; c.p++; mark = c.p; continue; }
            if ((unsigned char)c.p[0] == 0xEF && c.end - c.p >= 3 && (unsigned char)c.p[1] == 0xBB && (unsigned char)c.p[2] == 0xBF) { c.p += 3; continue; }
            set_error(P, "not a JSON trace: expected '{' or '[' at the start", c.p, base, end);
            break;
        }
        if (P->state == ST_DONE) {
            set_error(P, "unexpected data after the end of the trace", c.p, base, end);
            break;
        }
        if (P->state == ST_RESYNC) {
            /* next '{' whose previous non-space byte is ',' (or '}': a missing comma) and which opens
             * an object key */
            const char *q = c.p;
            int found = 0;
            for (; q < c.end; q++) {
                if (*q != '{') continue;
                const char *b = q - 1;
                while (b >= base && (*b == ' ' || *b == '\n' || *b == '\r' || *b == '\t')) b--;
                if (b < base || (*b != ',' && *b != '}')) continue;
                const char *f = q + 1;
                while (f < c.end && (*f == ' ' || *f == '\n' || *f == '\r' || *f == '\t')) f++;
                if (f >= c.end) break;
                if (*f == '"') { found = 1; break; }
            }
            if (found) { c.p = q; P->state = ST_EVENTS; P->after_comma = 1; continue; }
            /* keep a small tail so that a ',' before the next '{' is still visible */
            if (c.end - c.p > 256) c.p = c.end - 256;
            mark = c.p;
            break;
        }
        if (P->state == ST_EVENTS) {
            if (*c.p == ',') {
                if (P->after_comma) P->lenient++;  /* "[," or ",,": not JSON, accepted */
                P->after_comma = 1;
                c.p++;
                continue;
            }
            if (*c.p == ']') {
                if (P->after_comma && P->rows) P->lenient++;  /* trailing comma */
                P->after_comma = 0;
                c.p++;
                if (P->top_is_list) { P->state = ST_DONE; P->complete = 1; }
                else P->state = ST_ENVELOPE;
                continue;
            }
            c.msg = NULL;
            int r = parse_element(P, &c);
            if (r == NEED_MORE) { c.p = mark; break; }
            if (r == BAD) {
                if (P->salvage) {
                    /* keep a rejected row for the damaged element and resynchronise */
                    elem_reset(&P->e);
                    snprintf(P->reason_buf, sizeof P->reason_buf, "malformed JSON at byte %lld: %s",
                             (long long)(P->consumed + (c.p - base)), c.msg ? c.msg : "malformed event");
                    P->e.reason = P->reason_buf;
                    if (commit_element(P, P->consumed + (int64_t)(mark - base), mark, c.p)) { P->oom = 1; break; }
                    P->resyncs++;
                    P->state = ST_RESYNC;
                    continue;
                }
                set_error(P, c.msg ? c.msg : "malformed event", c.p, base, end);
                c.p = mark;
                break;
            }
            if (!P->after_comma) P->lenient++;  /* a missing comma between two events (salvage only) */
            if (commit_element(P, P->consumed + (int64_t)(mark - base), mark, c.p)) { P->oom = 1; set_error(P, "out of memory", c.p, base, end); break; }
            P->after_comma = 0;
            /* after an element: expect , or ] */
            skip_ws(&c);
            if (c.p >= c.end) continue;
            if (*c.p != ',' && *c.p != ']') {
                if (P->salvage && *c.p == '{') continue;  /* a missing comma: read on */
                if (P->salvage) {
                    /* a stray byte between events: skip to the next event */
                    P->resyncs++;
                    P->state = ST_RESYNC;
                    continue;
                }
                set_error(P, "expected ',' or ']' after an event", c.p, base, end);
                break;
            }
            continue;
        }
        /* ST_ENVELOPE */
        if (*c.p == ',') { c.p++; continue; }
        if (*c.p == '}') { c.p++; P->state = ST_DONE; P->complete = 1; continue; }
        if (*c.p != '"') { set_error(P, "expected a key in the top-level object", c.p, base, end); break; }
        const char *k; size_t kn; int kesc = 0;
        int r = scan_string(&c, &k, &kn, &kesc);
        if (r == NEED_MORE) { c.p = mark; break; }
        skip_ws(&c);
        if (c.p >= c.end) { c.p = mark; break; }
        if (*c.p != ':') { set_error(P, "expected ':' after a top-level key", c.p, base, end); break; }
        c.p++;
        skip_ws(&c);
        if (c.p >= c.end) { c.p = mark; break; }
        const char *mk = k; size_t mkn = kn;
        key_for_match(P, &mk, &mkn, kesc);
        if (key_is(mk, mkn, "traceEvents") && *c.p == '[') {
            if (P->saw_events) {
                set_error(P, "a second 'traceEvents' array (duplicate key)", k - 1, base, end);
                break;
            }
            c.p++;
            P->state = ST_EVENTS;
            P->saw_events = 1;
            P->after_comma = 1;
            continue;
        }
        const char *v = c.p;
        int vesc = 0;
        c.msg = NULL;
        r = skip_value(&c, &vesc, 0);
        if (r == NEED_MORE) { c.p = mark; break; }
        if (r == BAD) { set_error(P, c.msg ? c.msg : "malformed top-level value", c.p, base, end); break; }
        int rep = 0;
        append_kv(&P->envelope, &P->nenvelope, k, kn, kesc, v, (size_t)(c.p - v), vesc, &P->oom, &rep);
    }
    return (size_t)((P->has_error ? mark : c.p) - base);
}

/* ------------------------------------------------------------------ Buffer type */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
} BufferObject;

/* heap types from PyType_FromSpec (the stable ABI has no static PyTypeObject); set at import */
static PyObject *BufferType;
static PyObject *ParserType;

/* a heap type's instance: free it with the type's tp_free, then drop the reference it holds */
static void free_instance(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

static void Buffer_dealloc(BufferObject *self) {
    free(self->data);
    free_instance((PyObject *)self);
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (char *)"", self->size, 1, flags);
}

static PyType_Slot Buffer_slots[] = {
    {Py_tp_dealloc, (void *)Buffer_dealloc},
    {Py_bf_getbuffer, (void *)Buffer_getbuffer},
    {Py_tp_doc, (void *)"owned memory exposed through the buffer protocol"},
    {0, NULL},
};

static PyType_Spec Buffer_spec = {
    "proftab.io._kineto.Buffer", sizeof(BufferObject), 0, Py_TPFLAGS_DEFAULT, Buffer_slots,
};

/* steal the buffer's memory into a Buffer object, truncated/extended (zeroed) to size */
static PyObject *take_buf(buf_t *b, size_t size) {
    if (buf_exact(b, size)) return PyErr_NoMemory();
    if (b->cap > size + 4096) {
        /* give back the geometric-growth slack */
        char *np = realloc(b->p, size ? size : 1);
        if (np) { b->p = np; b->cap = size; }
    }
    BufferObject *o = PyObject_New(BufferObject, (PyTypeObject *)BufferType);
    if (!o) return NULL;
    o->data = b->p;
    o->size = (Py_ssize_t)size;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

/* ------------------------------------------------------------------ Parser type */

static void Parser_dealloc(Parser *P) {
    buf_free(&P->pending);
    for (int t = 0; t < 2; t++) {
        table_t *T = &P->tabs[t];
        for (int i = 0; i < N_DICT; i++) dict_free(&T->dicts[i]);
        for (int i = 0; i < N_FIX; i++) { buf_free(&T->fix[i].data); buf_free(&T->fix[i].valid); }
        for (int i = 0; i < N_STR; i++) { buf_free(&T->strs[i].offsets); buf_free(&T->strs[i].data); buf_free(&T->strs[i].valid); }
        for (int i = 0; i < MAX_TYPED; i++) {
            buf_free(&T->tfix[i].data); buf_free(&T->tfix[i].valid);
            buf_free(&T->tstr[i].offsets); buf_free(&T->tstr[i].data); buf_free(&T->tstr[i].valid);
        }
    }
    for (int i = 0; i < P->nkeys; i++) free((void *)P->keys[i].key);
    buf_free(&P->envelope);
    buf_free(&P->scratch);
    buf_free(&P->keybuf);
    buf_free(&P->e.args);
    buf_free(&P->e.extra);
    free_instance((PyObject *)P);
}

static int Parser_init(Parser *P, PyObject *args, PyObject *kw) {
    PyObject *spec;
    int salvage = 0;
    long long max_token = DEFAULT_MAX_TOKEN;
    static char *kwlist[] = {"typed_keys", "salvage", "max_token", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pL", kwlist, &spec, &salvage, &max_token)) return -1;
    if (max_token < 1) { PyErr_SetString(PyExc_ValueError, "max_token must be positive"); return -1; }
    P->salvage = salvage;
    P->max_token = max_token;
    PyObject *seq = PySequence_Fast(spec, "typed_keys must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = PyList_Check(seq) ? PyList_Size(seq) : PyTuple_Size(seq);
    if (n > MAX_TYPED) { Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "too many typed keys"); return -1; }
    memset(P->keytab, 0, sizeof P->keytab);
    memset(P->asep, 0, sizeof P->asep);  /* remembered args separators name typed indices of this spec */
    P->ntypedcols = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *k; Py_ssize_t kn; int col, kind;
        if (!PyArg_ParseTuple(PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i), "y#ii", &k, &kn, &col, &kind)) { Py_DECREF(seq); return -1; }
        if (col < 0 || col >= MAX_TYPED || kind < 0 || kind > K_BOOL) { Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "bad typed key"); return -1; }
        char *kc = malloc((size_t)kn + 1);
        if (!kc) { Py_DECREF(seq); PyErr_NoMemory(); return -1; }
        memcpy(kc, k, (size_t)kn);
        kc[kn] = 0;
        P->keys[i].key = kc;
        P->keys[i].keylen = (size_t)kn;
        P->keys[i].col = col;
        P->keys[i].kind = kind;
        P->colkind[col] = kind;
        if (col + 1 > P->ntypedcols) P->ntypedcols = col + 1;
        uint64_t h = hash_bytes(kc, (size_t)kn);
        size_t s = h & (KEYTAB - 1);
        while (P->keytab[s]) s = (s + 1) & (KEYTAB - 1);
        P->keytab[s] = (int16_t)(i + 1);
        P->nkeys = (int)i + 1;
    }
    Py_DECREF(seq);
    return 0;
}

/* After a scan: `pending` holds one incomplete item; cap its size and schedule the next rescan. */
static void after_scan(Parser *P) {
    P->dirty = 0;
    if (P->has_error) return;
    if ((int64_t)P->pending.len > P->max_token) {
        char msg[160];
        snprintf(msg, sizeof msg, "a single JSON value is larger than max_token=%lld bytes",
                 (long long)P->max_token);
        const char *none = "";
        set_error(P, msg, none, none, none);
        P->err_offset = P->consumed;
        return;
    }
    /* rescan only after the item has doubled: a huge token costs O(n) scanning in total */
    P->retry_at = P->pending.len * 2;
}

/* scan `pending` (all of it) */
static void scan_pending(Parser *P) {
    size_t used = run(P, P->pending.p, P->pending.p + P->pending.len);
    P->consumed += (int64_t)used;
    if (!P->has_error) {
        memmove(P->pending.p, P->pending.p + used, P->pending.len - used);
        P->pending.len -= used;
    }
    after_scan(P);
}

/* A chunk fed while `pending` holds the incomplete item the last chunk ended with. Rather than copying
   the whole chunk after it, only its first STITCH bytes are: once the item completes there, the rest
   of the chunk is scanned where it lies (the scan of a text split anywhere gives the same rows). When
   the item is longer, or a damaged stretch is being skipped (its look-back needs the bytes before),
   the rest is appended and scanned as one piece as before. Returns -1 when out of memory. */
#define STITCH ((size_t)1 << 16)
static int feed_stitched(Parser *P, const char *buf, size_t n) {
    size_t old = P->pending.len;
    size_t take = n < STITCH ? n : STITCH;
    if (take == n || old + take < P->retry_at || P->state == ST_RESYNC || !g_learn) {
        if (buf_append(&P->pending, buf, n)) return -1;
        if (P->pending.len >= P->retry_at) scan_pending(P);
        else P->dirty = 1;
        return 0;
    }
    if (buf_append(&P->pending, buf, take)) return -1;
    size_t used = run(P, P->pending.p, P->pending.p + P->pending.len);
    P->consumed += (int64_t)used;
    if (P->has_error) { after_scan(P); return 0; }
    if (used >= old && P->state != ST_RESYNC) {
        size_t off = used - old;  /* bytes of this chunk already scanned */
        P->pending.len = 0;
        size_t used2 = run(P, buf + off, buf + n);
        P->consumed += (int64_t)used2;
        if (!P->has_error && off + used2 < n && buf_append(&P->pending, buf + off + used2, n - off - used2)) return -1;
        after_scan(P);
        return 0;
    }
    memmove(P->pending.p, P->pending.p + used, P->pending.len - used);
    P->pending.len -= used;
    if (buf_append(&P->pending, buf + take, n - take)) return -1;
    scan_pending(P);
    return 0;
}

static PyObject *Parser_feed(Parser *P, PyObject *arg) {
    Py_buffer view;
    if (P->finished) { PyErr_SetString(PyExc_ValueError, "the parser is finished"); return NULL; }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (P->has_error) { PyBuffer_Release(&view); Py_RETURN_TRUE; }
    int oom = 0;
    P->fed += (int64_t)view.len;
    Py_BEGIN_ALLOW_THREADS
    if (P->pending.len == 0) {
        size_t used = run(P, (const char *)view.buf, (const char *)view.buf + view.len);
        P->consumed += (int64_t)used;
        if (!P->has_error && used < (size_t)view.len) {
            if (buf_append(&P->pending, (const char *)view.buf + used, (size_t)view.len - used)) oom = 1;
        }
        if (!oom) after_scan(P);
    } else if (feed_stitched(P, (const char *)view.buf, (size_t)view.len)) {
        oom = 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (oom || P->oom) return PyErr_NoMemory();
    return PyBool_FromLong(P->has_error);
}

/* (data, validity or None, null count), or None for an all-null column (no buffers allocated) */
static PyObject *fix_result(fixcol_t *c, int64_t nrows, size_t width) {
    PyObject *valid = NULL, *data = NULL;
    if (fix_finish(c, nrows, width)) return PyErr_NoMemory();
    int64_t nvalid = c->nvalid;
    if (nvalid == 0 && nrows > 0) {
        buf_free(&c->data); buf_free(&c->valid);
        Py_RETURN_NONE;
    }
    data = take_buf(&c->data, (size_t)nrows * width);
    if (!data) return NULL;
    if (nvalid == nrows) {
        buf_free(&c->valid);
        valid = Py_None;
        Py_INCREF(valid);
    } else {
        valid = take_buf(&c->valid, (size_t)((nrows + 7) >> 3));
        if (!valid) { Py_DECREF(data); return NULL; }
    }
    return Py_BuildValue("(NNL)", data, valid, (long long)(nrows - nvalid));
}

static PyObject *str_result(strcol_t *c, int64_t nrows) {
    if (c->nvalid == 0) {
        /* all null: no buffers at all */
        buf_free(&c->offsets); buf_free(&c->data); buf_free(&c->valid);
        Py_RETURN_NONE;
    }
    if (str_finish(c, nrows)) return PyErr_NoMemory();
    int64_t nvalid = c->nvalid;
    PyObject *offsets = take_buf(&c->offsets, (size_t)(nrows + 1) * 8);
    PyObject *data = take_buf(&c->data, c->data.len);
    PyObject *valid;
    if (nvalid == nrows) { buf_free(&c->valid); valid = Py_None; Py_INCREF(valid); }
    else valid = take_buf(&c->valid, (size_t)((nrows + 7) >> 3));
    if (!offsets || !data || !valid) { Py_XDECREF(offsets); Py_XDECREF(data); Py_XDECREF(valid); return NULL; }
    return Py_BuildValue("(NNNL)", offsets, data, valid, (long long)(nrows - nvalid));
}

/* (codes, dictionary offsets, dictionary data, dictionary size), or None for an all-null column */
static PyObject *dict_result(dictcol_t *d, int64_t nrows) {
    PyObject *codes = fix_result(&d->codes, nrows, 4);
    if (!codes) return NULL;
    if (codes == Py_None) return codes;
    if (d->any_bad) {
        buf_t no = {0}, nd = {0};
        int oom = 0;
        const int64_t *offs = (const int64_t *)d->dict_offsets.p;
        int64_t z = 0;
        buf_append(&no, &z, 8);
        for (int32_t k = 0; k < d->n; k++) {
            const char *e = d->dict_data.p + offs[k];
            size_t len = (size_t)(offs[k + 1] - offs[k]);
            if (d->bad[k] & DICT_BAD_UTF8) append_utf8_repaired(&nd, (const unsigned char *)e, len, &oom);
            else buf_append(&nd, e, len);
            int64_t end = (int64_t)nd.len;
            buf_append(&no, &end, 8);
        }
        buf_free(&d->dict_offsets);
        buf_free(&d->dict_data);
        d->dict_offsets = no;
        d->dict_data = nd;
        d->any_bad = 0;
    }
    if (d->dict_offsets.len == 0) { int64_t z = 0; buf_append(&d->dict_offsets, &z, 8); }
    PyObject *offs = take_buf(&d->dict_offsets, d->dict_offsets.len);
    PyObject *data = take_buf(&d->dict_data, d->dict_data.len);
    if (!offs || !data) { Py_DECREF(codes); Py_XDECREF(offs); Py_XDECREF(data); return NULL; }
    return Py_BuildValue("(NNNi)", codes, offs, data, (int)d->n);
}

static PyObject *table_result(Parser *P, table_t *T) {
    int64_t n = T->rows;
    PyObject *res = PyDict_New();
    if (!res) return NULL;
    static const char *dict_names[N_DICT] = {"ph", "cat", "name", "bp", "s", "reason"};
    static const char *fix_names[N_FIX] = {"event_index", "pid", "tid", "ts", "dur", "id", "offset", "flags"};
    static const size_t fix_width[N_FIX] = {8, 8, 8, 8, 8, 8, 8, 2};
    static const char *str_names[N_STR] = {"pid_text", "tid_text", "id_text", "args", "extra", "excerpt", "mvalue"};
    for (int i = 0; i < N_DICT; i++) {
        PyObject *o = dict_result(&T->dicts[i], n);
        if (!o || PyDict_SetItemString(res, dict_names[i], o)) { Py_XDECREF(o); Py_DECREF(res); return NULL; }
        Py_DECREF(o);
    }
    for (int i = 0; i < N_FIX; i++) {
        PyObject *o = fix_result(&T->fix[i], n, fix_width[i]);
        if (!o || PyDict_SetItemString(res, fix_names[i], o)) { Py_XDECREF(o); Py_DECREF(res); return NULL; }
        Py_DECREF(o);
    }
    for (int i = 0; i < N_STR; i++) {
        PyObject *o = str_result(&T->strs[i], n);
        if (!o || PyDict_SetItemString(res, str_names[i], o)) { Py_XDECREF(o); Py_DECREF(res); return NULL; }
        Py_DECREF(o);
    }
    PyObject *typed = PyList_New(P->ntypedcols);
    if (!typed) { Py_DECREF(res); return NULL; }
    for (int col = 0; col < P->ntypedcols; col++) {
        int kind = P->colkind[col];
        PyObject *o;
        if (kind == K_STR || kind == K_JSON) {
            o = str_result(&T->tstr[col], n);
        } else {
            o = fix_result(&T->tfix[col], n, 8);
        }
        if (!o) { Py_DECREF(typed); Py_DECREF(res); return NULL; }
        PyList_SetItem(typed, col, o);  /* steals o, as the macro did */
    }
    PyDict_SetItemString(res, "typed", typed);
    Py_DECREF(typed);
    PyObject *v = PyLong_FromLongLong(n);
    PyDict_SetItemString(res, "rows", v);
    Py_DECREF(v);
    return res;
}

static PyObject *Parser_finish(Parser *P, PyObject *unused) {
    (void)unused;
    if (P->finished) { PyErr_SetString(PyExc_ValueError, "the parser is finished"); return NULL; }
    P->finished = 1;
    if (P->dirty && !P->has_error) scan_pending(P);  /* a deferred rescan */
    /* a remaining pending tail means truncation (or garbage) */
    if (!P->has_error && P->pending.len) {
        /* report where the unfinished item starts */
        const char *base = P->pending.p, *end = base + P->pending.len;
        cur_t c = {base, end, NULL, NULL};
        skip_ws(&c);
        if (c.p < c.end) {
            if (P->state == ST_EVENTS || P->state == ST_ENVELOPE)
                set_error(P, "the file ends inside an event (truncated trace)", c.p, base, end);
            else
                set_error(P, "the file ends inside the top-level value (truncated trace)", c.p, base, end);
        }
    }
    if (!P->has_error && !P->complete) {
        const char *none = "";  /* one pointer for at/base/end: no excerpt, no arithmetic across objects */
        if (P->state == ST_START) set_error(P, "empty input: no JSON value", none, none, none);
        else set_error(P, "the file ends before the trace is closed (truncated trace)", none, none, none);
        P->err_offset = P->consumed + (int64_t)P->pending.len;
    }
    size_t tail = P->pending.len;
    buf_free(&P->pending);
    P->pending.len = tail;  /* only the length is reported below */
    buf_free(&P->scratch);
    PyObject *res = PyDict_New();
    if (!res) return NULL;
    static const char *tab_names[2] = {"events", "other"};
    for (int t = 0; t < 2; t++) {
        PyObject *o = table_result(P, &P->tabs[t]);
        if (!o || PyDict_SetItemString(res, tab_names[t], o)) { Py_XDECREF(o); Py_DECREF(res); return NULL; }
        Py_DECREF(o);
    }
#ifdef __GLIBC__
    malloc_trim(0);  /* hand the freed growth slack back to the OS */
#endif
    int64_t n = P->rows;
    PyObject *env = PyBytes_FromStringAndSize(P->envelope.p ? P->envelope.p : "", (Py_ssize_t)P->envelope.len);
    PyDict_SetItemString(res, "envelope", env);
    Py_DECREF(env);
    PyObject *v;
    v = PyLong_FromLongLong(n); PyDict_SetItemString(res, "rows", v); Py_DECREF(v);
    v = PyLong_FromLong(P->max_frac); PyDict_SetItemString(res, "max_frac", v); Py_DECREF(v);
    v = PyBool_FromLong(P->complete); PyDict_SetItemString(res, "complete", v); Py_DECREF(v);
    v = PyBool_FromLong(P->top_is_list); PyDict_SetItemString(res, "top_is_list", v); Py_DECREF(v);
    v = PyBool_FromLong(P->saw_events || P->top_is_list); PyDict_SetItemString(res, "saw_events", v); Py_DECREF(v);
    v = PyLong_FromLongLong(P->resyncs); PyDict_SetItemString(res, "resyncs", v); Py_DECREF(v);
    v = PyLong_FromLongLong(P->fed); PyDict_SetItemString(res, "bytes", v); Py_DECREF(v);
    v = PyLong_FromLongLong(P->lenient); PyDict_SetItemString(res, "lenient", v); Py_DECREF(v);
    if (P->has_error) {
        v = Py_BuildValue("(sLs)", P->errmsg, (long long)P->err_offset, P->excerpt);
        PyDict_SetItemString(res, "error", v);
        Py_DECREF(v);
    } else {
        PyDict_SetItemString(res, "error", Py_None);
    }
    return res;
}

static PyMethodDef Parser_methods[] = {
    {"feed", (PyCFunction)Parser_feed, METH_O, "feed(chunk): scan more JSON text"},
    {"finish", (PyCFunction)Parser_finish, METH_NOARGS, "finish() -> dict of column buffers"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Parser_slots[] = {
    {Py_tp_dealloc, (void *)Parser_dealloc},
    {Py_tp_doc, (void *)"Parser(typed_keys): streaming Kineto JSON scanner"},
    {Py_tp_methods, (void *)Parser_methods},
    {Py_tp_init, (void *)Parser_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec Parser_spec = {
    "proftab.io._kineto.Parser", sizeof(Parser), 0, Py_TPFLAGS_DEFAULT, Parser_slots,
};

/* ------------------------------------------------------------------ Arrow C data interface export */

/* The scanner's columns handed to Polars without pyarrow: a Column object implements the
   Arrow PyCapsule interface (`__arrow_c_array__`), so `pl.Series(column)` adopts its buffers
   without a copy. String columns are exported as string views (Polars' own layout), built here
   from the scanner's offsets, so Polars converts nothing; a mostly-null column's views stay
   untouched zero pages (calloc), which the OS does not back with memory. */

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#define ARROW_FLAG_NULLABLE 2

typedef struct ColumnObject {
    PyObject_HEAD
    const char *format;          /* a string literal */
    int64_t length, null_count;
    int64_t n_buffers;
    const void **buffers;        /* malloc'd; the pointers into the owners' memory or `owned` */
    PyObject *owners;            /* tuple of the Buffer objects whose memory is exported */
    char *owned;                 /* memory allocated here (string views), freed with the object */
    int64_t *variadic_sizes;     /* string views: the data buffers' sizes (the last buffer) */
    struct ColumnObject *dictionary;
} ColumnObject;

static PyObject *ColumnType;
static const int64_t zero_block[2] = {0, 0};  /* where a buffer of length 0 points */

static void Column_dealloc(ColumnObject *self) {
    Py_XDECREF(self->owners);
    Py_XDECREF((PyObject *)self->dictionary);
    free(self->buffers);
    free(self->owned);
    free(self->variadic_sizes);
    free_instance((PyObject *)self);
}

static ColumnObject *column_new(const char *format, int64_t length, int64_t null_count, int64_t n_buffers,
                                PyObject *owners) {
    ColumnObject *c = PyObject_New(ColumnObject, (PyTypeObject *)ColumnType);
    if (!c) return NULL;
    c->format = format;
    c->length = length;
    c->null_count = null_count;
    c->n_buffers = n_buffers;
    c->owners = owners;  /* the reference is the caller's, handed over */
    c->owned = NULL;
    c->variadic_sizes = NULL;
    c->dictionary = NULL;
    c->buffers = calloc((size_t)n_buffers, sizeof(void *));
    if (!c->buffers) { Py_DECREF(c); PyErr_NoMemory(); return NULL; }
    return c;
}

static void schema_release(struct ArrowSchema *s) {
    if (s->dictionary) {
        if (s->dictionary->release) s->dictionary->release(s->dictionary);
        free(s->dictionary);
    }
    s->release = NULL;
}

static void array_release(struct ArrowArray *a) {
    if (a->dictionary) {
        if (a->dictionary->release) a->dictionary->release(a->dictionary);
        free(a->dictionary);
    }
    free((void *)a->buffers);
    PyGILState_STATE g = PyGILState_Ensure();  /* Polars may release from any thread */
    Py_XDECREF((PyObject *)a->private_data);
    PyGILState_Release(g);
    a->release = NULL;
}

static int fill_schema(ColumnObject *c, struct ArrowSchema *s) {
    memset(s, 0, sizeof *s);
    s->format = c->format;
    s->name = "";
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = schema_release;
    if (c->dictionary) {
        s->dictionary = malloc(sizeof *s->dictionary);
        if (!s->dictionary) return -1;
        if (fill_schema(c->dictionary, s->dictionary)) { free(s->dictionary); s->dictionary = NULL; return -1; }
    }
    return 0;
}

static int fill_array(ColumnObject *c, struct ArrowArray *a) {
    memset(a, 0, sizeof *a);
    a->length = c->length;
    a->null_count = c->null_count;
    a->n_buffers = c->n_buffers;
    a->buffers = malloc((size_t)c->n_buffers * sizeof(void *));
    if (!a->buffers) return -1;
    memcpy((void *)a->buffers, c->buffers, (size_t)c->n_buffers * sizeof(void *));
    if (c->dictionary) {
        a->dictionary = malloc(sizeof *a->dictionary);
        if (!a->dictionary || fill_array(c->dictionary, a->dictionary)) {
            free(a->dictionary); a->dictionary = NULL; free((void *)a->buffers); return -1;
        }
    }
    Py_INCREF((PyObject *)c);
    a->private_data = c;
    a->release = array_release;
    return 0;
}

static void schema_capsule_free(PyObject *cap) {
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (s && s->release) s->release(s);
    free(s);
}

static void array_capsule_free(PyObject *cap) {
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (a && a->release) a->release(a);
    free(a);
}

static PyObject *Column_arrow_c_array(ColumnObject *self, PyObject *args, PyObject *kw) {
    PyObject *requested = Py_None;
    static char *kwlist[] = {"requested_schema", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &requested)) return NULL;
    (void)requested;  /* the column has one layout; a consumer casts if it needs another */
    struct ArrowSchema *s = malloc(sizeof *s);
    struct ArrowArray *a = malloc(sizeof *a);
    if (!s || !a || fill_schema(self, s)) { free(s); free(a); return PyErr_NoMemory(); }
    if (fill_array(self, a)) { s->release(s); free(s); free(a); return PyErr_NoMemory(); }
    PyObject *sc = PyCapsule_New(s, "arrow_schema", schema_capsule_free);
    if (!sc) { s->release(s); free(s); a->release(a); free(a); return NULL; }
    PyObject *ac = PyCapsule_New(a, "arrow_array", array_capsule_free);
    if (!ac) { Py_DECREF(sc); a->release(a); free(a); return NULL; }
    return Py_BuildValue("(NN)", sc, ac);
}

static PyObject *Column_len(ColumnObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLongLong(self->length);
}

static PyMethodDef Column_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))Column_arrow_c_array, METH_VARARGS | METH_KEYWORDS,
     "(schema capsule, array capsule) of the Arrow C data interface"},
    {"length", (PyCFunction)Column_len, METH_NOARGS, "number of rows"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Column_slots[] = {
    {Py_tp_dealloc, (void *)Column_dealloc},
    {Py_tp_methods, Column_methods},
    {Py_tp_doc, (void *)"a scanner column exported through the Arrow PyCapsule interface"},
    {0, NULL},
};

static PyType_Spec Column_spec = {
    "proftab.io._kineto.Column", sizeof(ColumnObject), 0, Py_TPFLAGS_DEFAULT, Column_slots,
};

/* the Buffer behind `o` (a Buffer object), or NULL with TypeError; None gives NULL, no error */
static BufferObject *as_buffer(PyObject *o, const char *what, int optional) {
    if (o == Py_None && optional) return NULL;
    if (!PyObject_TypeCheck(o, (PyTypeObject *)BufferType)) {
        PyErr_Format(PyExc_TypeError, "%s must be a scanner Buffer", what);
        return NULL;
    }
    return (BufferObject *)o;
}

static const void *buffer_ptr(BufferObject *b) {
    return b && b->data && b->size ? (const void *)b->data : (const void *)zero_block;
}

static const char *fixed_format(const char *kind) {
    static const char *names[] = {"i64", "u64", "f64", "i32", "u16", "u8", NULL};
    static const char *formats[] = {"l", "L", "g", "i", "S", "C"};
    for (int i = 0; names[i]; i++) if (!strcmp(kind, names[i])) return formats[i];
    return NULL;
}

static size_t fixed_width(const char *format) {
    switch (format[0]) {
        case 'l': case 'L': case 'g': return 8;
        case 'i': return 4;
        case 'S': return 2;
        default: return 1;
    }
}

/* fixed_column(kind, data, validity, length, null_count) */
static PyObject *py_fixed_column(PyObject *self, PyObject *args) {
    (void)self;
    const char *kind; PyObject *data, *valid; long long n, nulls;
    if (!PyArg_ParseTuple(args, "sOOLL", &kind, &data, &valid, &n, &nulls)) return NULL;
    const char *format = fixed_format(kind);
    if (!format) { PyErr_Format(PyExc_ValueError, "unknown column kind %s", kind); return NULL; }
    BufferObject *d = as_buffer(data, "data", 0);
    if (!d) return NULL;
    BufferObject *v = as_buffer(valid, "validity", 1);
    if (!v && PyErr_Occurred()) return NULL;
    if (n < 0 || (size_t)d->size < (size_t)n * fixed_width(format) || (v && (size_t)v->size < (size_t)((n + 7) >> 3))) {
        PyErr_SetString(PyExc_ValueError, "buffers shorter than the column");
        return NULL;
    }
    ColumnObject *c = column_new(format, n, v ? nulls : 0, 2, Py_BuildValue("(OO)", data, valid));
    if (!c) return NULL;
    c->buffers[0] = v ? buffer_ptr(v) : NULL;
    c->buffers[1] = buffer_ptr(d);
    return (PyObject *)c;
}

#define VIEW_INLINE 12
#define VIEW_BUFFER_MAX ((int64_t)INT32_MAX)

/* one string view: len, then 12 inline bytes, or a 4-byte prefix, buffer index, offset */
static inline void put_view(char *view, const char *s, int64_t len, int32_t buf, int64_t off) {
    int32_t l = (int32_t)len;
    memcpy(view, &l, 4);
    if (len <= VIEW_INLINE) {
        if (len) memcpy(view + 4, s, (size_t)len);
    } else {
        int32_t b = buf, o = (int32_t)off;
        memcpy(view + 4, s, 4);
        memcpy(view + 8, &b, 4);
        memcpy(view + 12, &o, 4);
    }
}

/* a string-view Column over `data`, whose strings are [offs[i], offs[i+1]) for the valid rows;
   the data is cut into buffers of at most 2^31-1 bytes at string starts (a view's offset is int32) */
static PyObject *string_view_column(const int64_t *offs, int64_t n, const unsigned char *valid, int64_t nulls,
                                    PyObject *data_obj, PyObject *valid_obj, int dict_codes, const int32_t *codes) {
    BufferObject *d = (BufferObject *)data_obj;
    const char *base = d->data ? d->data : "";
    char *views = calloc((size_t)(n ? n : 1), 16);  /* untouched (null) rows stay unbacked zero pages */
    if (!views) return PyErr_NoMemory();
    int64_t cap = 4, nb = 1;
    int64_t *starts = malloc((size_t)cap * sizeof(int64_t));
    if (!starts) { free(views); return PyErr_NoMemory(); }
    starts[0] = 0;
    int64_t total = dict_codes ? 0 : offs[n];
    for (int64_t i = 0; i < n; i++) {
        if (valid && !(valid[i >> 3] & (1u << (i & 7)))) continue;
        int64_t k = dict_codes ? codes[i] : i;
        int64_t lo = offs[k], len = offs[k + 1] - offs[k];
        if (len > VIEW_BUFFER_MAX) {
            free(views); free(starts);
            PyErr_SetString(PyExc_ValueError, "a string longer than 2 GiB");
            return NULL;
        }
        if (!dict_codes && len > VIEW_INLINE && lo + len - starts[nb - 1] > VIEW_BUFFER_MAX) {
            if (nb == cap) {
                int64_t *ns = realloc(starts, (size_t)(cap *= 2) * sizeof(int64_t));
                if (!ns) { free(views); free(starts); return PyErr_NoMemory(); }
                starts = ns;
            }
            starts[nb++] = lo;
        }
        put_view(views + 16 * i, base + lo, len, (int32_t)(nb - 1), lo - starts[nb - 1]);
    }
    if (dict_codes) total = (int64_t)d->size;  /* the views point into the whole dictionary */
    ColumnObject *c = column_new("vu", n, valid ? nulls : 0, 3 + nb, Py_BuildValue("(OO)", data_obj, valid_obj));
    if (!c) { free(views); free(starts); return NULL; }
    c->owned = views;
    c->variadic_sizes = malloc((size_t)nb * sizeof(int64_t));
    if (!c->variadic_sizes) { free(starts); Py_DECREF(c); return PyErr_NoMemory(); }
    c->buffers[0] = valid ? (const void *)valid : NULL;
    c->buffers[1] = views;
    for (int64_t b = 0; b < nb; b++) {
        int64_t end = b + 1 < nb ? starts[b + 1] : total;
        c->buffers[2 + b] = end > starts[b] ? (const void *)(base + starts[b]) : (const void *)zero_block;
        c->variadic_sizes[b] = end - starts[b];
    }
    c->buffers[2 + nb] = c->variadic_sizes;
    free(starts);
    return (PyObject *)c;
}

/* string_column(offsets, data, validity, length, null_count): a string-view Column */
static PyObject *py_string_column(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *offsets, *data, *valid; long long n, nulls;
    if (!PyArg_ParseTuple(args, "OOOLL", &offsets, &data, &valid, &n, &nulls)) return NULL;
    BufferObject *o = as_buffer(offsets, "offsets", 0), *d = as_buffer(data, "data", 0);
    if (!o || !d) return NULL;
    BufferObject *v = as_buffer(valid, "validity", 1);
    if (!v && PyErr_Occurred()) return NULL;
    if (n < 0 || (size_t)o->size < (size_t)(n + 1) * 8 || (v && (size_t)v->size < (size_t)((n + 7) >> 3))) {
        PyErr_SetString(PyExc_ValueError, "buffers shorter than the column");
        return NULL;
    }
    const int64_t *offs = (const int64_t *)o->data;
    if (offs[n] > (int64_t)d->size) { PyErr_SetString(PyExc_ValueError, "offsets past the data"); return NULL; }
    return string_view_column(offs, n, v ? (const unsigned char *)v->data : NULL, nulls, data, valid, 0, NULL);
}

/* the arguments of the dictionary exporters: (codes, validity, dict_offsets, dict_data, length,
   null_count, dict_size), parsed and checked (sizes, and every valid row's code within the dictionary) */
typedef struct {
    PyObject *codes, *valid, *offsets, *data;
    BufferObject *cb, *v, *o, *d;
    long long n, nulls, size;
} dict_args_t;

static int parse_dict_args(PyObject *args, dict_args_t *a) {
    if (!PyArg_ParseTuple(args, "OOOOLLL", &a->codes, &a->valid, &a->offsets, &a->data, &a->n, &a->nulls, &a->size))
        return -1;
    a->cb = as_buffer(a->codes, "codes", 0);
    a->o = as_buffer(a->offsets, "offsets", 0);
    a->d = as_buffer(a->data, "data", 0);
    if (!a->cb || !a->o || !a->d) return -1;
    a->v = as_buffer(a->valid, "validity", 1);
    if (!a->v && PyErr_Occurred()) return -1;
    if (a->n < 0 || a->size < 0 || (size_t)a->cb->size < (size_t)a->n * 4
        || (size_t)a->o->size < (size_t)(a->size + 1) * 8 || (a->v && (size_t)a->v->size < (size_t)((a->n + 7) >> 3))) {
        PyErr_SetString(PyExc_ValueError, "buffers shorter than the column");
        return -1;
    }
    const int32_t *cp = (const int32_t *)a->cb->data;
    const unsigned char *vb = a->v ? (const unsigned char *)a->v->data : NULL;
    for (int64_t i = 0; i < a->n; i++)
        if ((!vb || (vb[i >> 3] & (1u << (i & 7)))) && (cp[i] < 0 || cp[i] >= a->size)) {
            PyErr_SetString(PyExc_ValueError, "a dictionary code out of range");
            return -1;
        }
    return 0;
}

/* dict_string_column(codes, validity, dict_offsets, dict_data, length, null_count, dict_size):
   the dictionary's strings per row, as a string-view Column sharing the dictionary's data */
static PyObject *py_dict_string_column(PyObject *self, PyObject *args) {
    (void)self;
    dict_args_t a;
    if (parse_dict_args(args, &a)) return NULL;
    if ((int64_t)a.d->size > VIEW_BUFFER_MAX) {
        PyErr_SetString(PyExc_ValueError, "dictionary data over 2 GiB");
        return NULL;
    }
    return string_view_column((const int64_t *)a.o->data, a.n, a.v ? (const unsigned char *)a.v->data : NULL,
                              a.nulls, a.data, a.valid, 1, (const int32_t *)a.cb->data);
}

/* dictionary_column(codes, validity, dict_offsets, dict_data, length, null_count, dict_size):
   int32 codes over a large-string dictionary (Polars: Categorical) */
static PyObject *py_dictionary_column(PyObject *self, PyObject *args) {
    (void)self;
    dict_args_t a;
    if (parse_dict_args(args, &a)) return NULL;
    PyObject *offsets = a.offsets, *data = a.data, *codes = a.codes, *valid = a.valid;
    BufferObject *o = a.o, *d = a.d, *cb = a.cb, *v = a.v;
    long long n = a.n, nulls = a.nulls, size = a.size;
    ColumnObject *dict = column_new("U", size, 0, 3, Py_BuildValue("(OO)", offsets, data));
    if (!dict) return NULL;
    dict->buffers[0] = NULL;
    dict->buffers[1] = buffer_ptr(o);
    dict->buffers[2] = buffer_ptr(d);
    ColumnObject *c = column_new("i", n, v ? nulls : 0, 2, Py_BuildValue("(OO)", codes, valid));
    if (!c) { Py_DECREF(dict); return NULL; }
    c->buffers[0] = v ? buffer_ptr(v) : NULL;
    c->buffers[1] = buffer_ptr(cb);
    c->dictionary = dict;
    return (PyObject *)c;
}

/* exposed for tests: exact µs text -> (ns, frac_digits, rounded) or None */
static PyObject *py_us_to_ns(PyObject *self, PyObject *arg) {
    (void)self;
    const char *s; Py_ssize_t n;
    if (!PyArg_Parse(arg, "s#", &s, &n)) return NULL;
    int64_t v; int frac = 0, rounded = 0;
    int r = parse_us_to_ns(s, (size_t)n, &v, &frac, &rounded);
    if (r) Py_RETURN_NONE;
    return Py_BuildValue("(LiO)", (long long)v, frac, rounded ? Py_True : Py_False);
}

/* set_path("scalar" | "simd" | "check" | "auto"): which walk later feeds use */
static PyObject *py_set_path(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name;
    if (!PyArg_Parse(arg, "s", &name)) return NULL;
    int learn = 1;
    if (!strcmp(name, "scalar")) g_path = PATH_SCALAR;
    else if (!strcmp(name, "simd")) g_path = PATH_SIMD;
    else if (!strcmp(name, "check")) g_path = PATH_CHECK;
    else if (!strcmp(name, "reference")) { g_path = PATH_SCALAR; learn = 0; }
    else if (!strcmp(name, "auto")) g_path = PATH_SCALAR;  /* the default: see init_index */
    else {
        PyErr_Format(PyExc_ValueError, "unknown scanner path %R (scalar, simd, check, reference or auto)", arg);
        return NULL;
    }
    g_learn = learn;
    init_event_keys();
    g_mismatch = 0;
    Py_RETURN_NONE;
}

/* set_classifier("avx2" | "sse2" | "portable"): the stage-1 classifier of the SIMD path (tests:
   each one this build and CPU have); ValueError for one they lack */
static PyObject *py_set_classifier(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name;
    if (!PyArg_Parse(arg, "s", &name)) return NULL;
    if (!strcmp(name, "portable")) { g_classify = classify_portable; g_isa = "portable"; Py_RETURN_NONE; }
#ifdef IX_HAVE_SSE2
    if (!strcmp(name, "sse2")) { g_classify = classify_sse2; g_isa = "sse2"; Py_RETURN_NONE; }
#endif
#ifdef IX_HAVE_AVX2
    if (!strcmp(name, "avx2") && __builtin_cpu_supports("avx2")) { g_classify = classify_avx2; g_isa = "avx2"; Py_RETURN_NONE; }
#endif
    PyErr_Format(PyExc_ValueError, "classifier %R is not available in this build or on this CPU", arg);
    return NULL;
}

static PyObject *py_get_path(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    static const char *names[] = {"scalar", "simd", "check"};
    return Py_BuildValue("(ss)", g_learn ? names[g_path] : "reference", g_isa);
}

static PyObject *py_path_mismatches(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyLong_FromLongLong((long long)g_mismatch);
}

static PyMethodDef module_methods[] = {
    {"set_path", py_set_path, METH_O,
     "set_path(name): the walk later feeds use: 'scalar' (the reference), 'simd' (structural index), "
     "'check' (both, counting differences), 'reference' (scalar, without the shortcuts learned from the text "
     "read so far) or 'auto' (the default: scalar); resets path_mismatches()"},
    {"set_classifier", py_set_classifier, METH_O,
     "set_classifier(name): the SIMD path's 64-byte classifier: 'avx2', 'sse2' or 'portable' (where available)"},
    {"get_path", py_get_path, METH_NOARGS, "get_path() -> (path, classifier: 'avx2' | 'sse2' | 'portable')"},
    {"path_mismatches", py_path_mismatches, METH_NOARGS,
     "path_mismatches() -> number of answers where the 'check' path's two walks differed"},
    {"us_to_ns", py_us_to_ns, METH_O, "us_to_ns(text) -> (ns, fraction_digits, rounded) or None"},
    {"fixed_column", py_fixed_column, METH_VARARGS,
     "fixed_column(kind, data, validity, length, null_count) -> Column (kind: i64 u64 f64 i32 u16 u8)"},
    {"string_column", py_string_column, METH_VARARGS,
     "string_column(offsets, data, validity, length, null_count) -> string-view Column"},
    {"dict_string_column", py_dict_string_column, METH_VARARGS,
     "dict_string_column(codes, validity, offsets, data, length, null_count, size) -> string-view Column"},
    {"dictionary_column", py_dictionary_column, METH_VARARGS,
     "dictionary_column(codes, validity, offsets, data, length, null_count, size) -> dictionary Column"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_kineto", "Streaming Kineto JSON scanner writing Arrow buffers.", -1, module_methods,
};

/* glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), after
   which freed 8-32 MiB column buffers and numpy arrays stay in the heap instead of going back
   to the OS: on a 512 MB trace that held ~100 MB that Polars' own allocator could not reuse.
   A fixed 1 MiB threshold (which also stops the adjustment) returns every large block on free.
   A threshold the user set (MALLOC_MMAP_THRESHOLD_) is left alone. Exported as MMAP_THRESHOLD:
   proftab._heap sets it again after nesting. */
#define MMAP_THRESHOLD (1 << 20)

static void set_malloc_policy(void) {
#ifdef __GLIBC__
    if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
#endif
}

PyMODINIT_FUNC PyInit__kineto(void) {
    init_tables();
    init_event_keys();
    init_index();
    set_malloc_policy();
    if (!BufferType && !(BufferType = PyType_FromSpec(&Buffer_spec))) return NULL;
    if (!ParserType && !(ParserType = PyType_FromSpec(&Parser_spec))) return NULL;
    if (!ColumnType && !(ColumnType = PyType_FromSpec(&Column_spec))) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(ParserType);  /* the module's reference; the global keeps its own */
    if (PyModule_AddObject(m, "Parser", ParserType) < 0) { Py_DECREF(ParserType); Py_DECREF(m); return NULL; }
    Py_INCREF(BufferType);
    if (PyModule_AddObject(m, "Buffer", BufferType) < 0) { Py_DECREF(BufferType); Py_DECREF(m); return NULL; }
    PyModule_AddIntConstant(m, "MMAP_THRESHOLD", MMAP_THRESHOLD);
    PyModule_AddIntConstant(m, "I64", K_I64);
    PyModule_AddIntConstant(m, "U64", K_U64);
    PyModule_AddIntConstant(m, "F64", K_F64);
    PyModule_AddIntConstant(m, "STR", K_STR);
    PyModule_AddIntConstant(m, "JSON", K_JSON);
    PyModule_AddIntConstant(m, "BOOL", K_BOOL);
    PyModule_AddIntConstant(m, "FLAG_NAME_REPAIRED", FL_NAME_REPAIRED);
    PyModule_AddIntConstant(m, "FLAG_TS_ROUNDED", FL_TS_ROUNDED);
    PyModule_AddIntConstant(m, "FLAG_ARGS_REPAIRED", FL_ARGS_REPAIRED);
    PyModule_AddIntConstant(m, "FLAG_JSON_REPAIRED", FL_JSON_REPAIRED);
    PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH);
    PyModule_AddIntConstant(m, "MAX_TYPED", MAX_TYPED);
    PyModule_AddObject(m, "DEFAULT_MAX_TOKEN", PyLong_FromLongLong(DEFAULT_MAX_TOKEN));
    return m;
}
