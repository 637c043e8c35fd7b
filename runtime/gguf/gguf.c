/* gguf.c — the GGUF v2/v3 reader: mmap, validate everything, index.
 *
 * Layering: runtime; uses base and kernels/dtype only. See gguf.h
 * for the contract.
 *
 * File layout (all little-endian; "str" = uint64 length + bytes, no NUL):
 *
 *   +0   "GGUF"  uint32 version  uint64 tensor_count  uint64 kv_count
 *   +24  kv_count  x { str key; uint32 type; value }
 *             value = scalar | str | { uint32 elem_type; uint64 n; n values }
 *                     (elem_type may itself be ARRAY: arrays of arrays)
 *        tensor_count x { str name; uint32 n_dims; uint64 ne[n_dims];
 *                         uint32 dtype; uint64 offset (from data start) }
 *        padding up to a multiple of general.alignment (default 32)
 *        tensor data: tensor i at data_start + offset_i
 *
 * How untrusted input is handled. Every read goes through the `rd` cursor,
 * whose reads check `n <= size - pos` (never `pos + n <= size`, which can
 * wrap) and report the field and byte offset on failure. Counts are checked
 * against the bytes left before anything is allocated from them: a kv takes
 * at least 13 bytes, a tensor info 32, an array element its type's minimum
 * encoding (1..12 bytes), so every allocation is bounded by a small multiple
 * of the file size, whatever the header claims. Parsing work is bounded the
 * same way (every element consumed moves the cursor by at least a byte), and
 * recursion by GGUF_MAX_ARRAY_DEPTH. All products and sums of sizes go
 * through the overflow-checked helpers of util.h.
 *
 * After parsing, keys and tensor names are indexed by open-addressing hash
 * tables (which also detect duplicates in O(n)); string arrays get a table
 * of element offsets so that tr_gguf_get_arr_str is O(1) (the tokenizer reads
 * 49152 tokens by index). Nothing is mutated after open: thread-safe reads.
 */
#include "runtime/gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/dtype.h"
#include "base/hash.h"
#include "base/util.h"

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_HEADER_BYTES 24u
/* Smallest encodings: a kv is key length (8) + type (4) + a 1-byte value; a
 * tensor info is name length (8) + n_dims (4) + one ne (8) + type (4) +
 * offset (8). */
#define GGUF_MIN_KV_BYTES 13u
#define GGUF_MIN_TENSOR_BYTES 32u
#define GGUF_TYPE_COUNT 13u

/* ---- internal types ---- */

typedef struct gguf_kv {
    gguf_str key;
    uint64_t key_off;    /* offset of the key's length field (diagnostics) */
    gguf_type type;
    gguf_type elem_type; /* arrays only */
    uint64_t n;          /* arrays only: element count */
    uint64_t val_off;    /* scalar: the value; string: its length field;
                            array: the first element */
    uint64_t *str_off;   /* string arrays: n offsets of the elements' length
                            fields (owned); NULL otherwise */
} gguf_kv;

typedef struct gguf_tensor_rec {
    gguf_tensor t;
    uint64_t name_off;   /* offset of the name's length field */
    uint64_t offset_off; /* offset of the offset field */
    uint64_t rel_offset; /* offset as stored: relative to the data start */
} gguf_tensor_rec;

/* Open-addressing table of indices + 1 (0 = empty) into an array of records
 * whose gguf_str name sits at `name_at` bytes into each `stride`-byte record. */
typedef struct name_index {
    uint64_t *slots;
    uint64_t mask;
} name_index;

struct gguf_file {
    const uint8_t *base; /* the bytes: the mapping or the caller's buffer */
    uint64_t size;
    void *map;           /* non-NULL if we own an mmap of map_size bytes */
    size_t map_size;
    gguf_load load;      /* how tr_gguf_open_ex brought the bytes in (MMAP for
                            tr_gguf_open_memory: borrowed bytes, not copied) */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    gguf_kv *kvs;        /* n_kv */
    uint64_t n_kv;
    gguf_tensor_rec *tensors; /* n_tensors */
    uint64_t n_tensors;
    name_index kv_index;
    name_index tensor_index;
};

/* ---- little-endian decoding (byte-wise: no alignment or host-order
 * assumptions; compilers turn these into single loads) ---- */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) {
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Encoded size of a scalar of type t; 0 for string and array. */
static uint32_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* Smallest encoding of one value of type t (array: elem type + count). */
static uint32_t min_value_size(uint32_t t) {
    if (t == GGUF_TYPE_STRING) return 8;
    if (t == GGUF_TYPE_ARRAY) return 12;
    return scalar_size(t);
}

static bool type_is_int(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32:
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: return true;
    default: return false;
    }
}
static bool type_is_float(uint32_t t) {
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

const char *tr_gguf_type_name(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: return "uint8";
    case GGUF_TYPE_INT8: return "int8";
    case GGUF_TYPE_UINT16: return "uint16";
    case GGUF_TYPE_INT16: return "int16";
    case GGUF_TYPE_UINT32: return "uint32";
    case GGUF_TYPE_INT32: return "int32";
    case GGUF_TYPE_FLOAT32: return "float32";
    case GGUF_TYPE_BOOL: return "bool";
    case GGUF_TYPE_STRING: return "string";
    case GGUF_TYPE_ARRAY: return "array";
    case GGUF_TYPE_UINT64: return "uint64";
    case GGUF_TYPE_INT64: return "int64";
    case GGUF_TYPE_FLOAT64: return "float64";
    }
    return "unknown";
}

/* An integer value as sign + magnitude, so that conversions between any
 * widths and signedness are one comparison. */
typedef struct int_val {
    bool neg;   /* then s holds the value */
    int64_t s;
    uint64_t u; /* the value when !neg */
} int_val;

static int_val decode_int(uint32_t t, const uint8_t *p) {
    int_val v = {false, 0, 0};
    int64_t s = 0;
    switch (t) {
    case GGUF_TYPE_UINT8: v.u = p[0]; return v;
    case GGUF_TYPE_UINT16: v.u = le16(p); return v;
    case GGUF_TYPE_UINT32: v.u = le32(p); return v;
    case GGUF_TYPE_UINT64: v.u = le64(p); return v;
    case GGUF_TYPE_BOOL: v.u = p[0] != 0; return v;
    case GGUF_TYPE_INT8: s = (int8_t)p[0]; break;
    case GGUF_TYPE_INT16: s = (int16_t)le16(p); break;
    case GGUF_TYPE_INT32: s = (int32_t)le32(p); break;
    case GGUF_TYPE_INT64: s = (int64_t)le64(p); break;
    default: break;
    }
    if (s < 0) {
        v.neg = true;
        v.s = s;
    } else {
        v.u = (uint64_t)s;
    }
    return v;
}

static double decode_float(uint32_t t, const uint8_t *p) {
    if (t == GGUF_TYPE_FLOAT32) {
        uint32_t bits = le32(p);
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    uint64_t bits = le64(p);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* ---- the bounds-checked cursor ---- */

typedef struct rd {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    tr_diag *diag;     /* may be NULL */
    char ctx[160];     /* "kv #5 'general.name'", "" in the header */
    uint64_t path[GGUF_MAX_ARRAY_DEPTH]; /* element index per array level */
    int depth;         /* number of valid entries in path */
} rd;

static uint64_t rd_left(const rd *r) { return r->size - r->pos; }

/* Fills the diagnostic: "<ctx><[i][j]> <message> (at byte <off>)". */
__attribute__((format(printf, 4, 5)))
static tr_status rd_fail(rd *r, tr_status code, uint64_t off, const char *fmt,
                         ...) {
    if (!r->diag) return code;
    char where[256];
    size_t n = (size_t)snprintf(where, sizeof where, "%s", r->ctx);
    for (int d = 0; d < r->depth && n < sizeof where; d++)
        n += (size_t)snprintf(where + n, sizeof where - n, "[%" PRIu64 "]",
                              r->path[d]);
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tr_diag_set(r->diag, code, off, "%s%s%s (at byte %" PRIu64 ")",
                       where, where[0] ? " " : "", msg, off);
}

static tr_status rd_need(rd *r, uint64_t n, const char *field) {
    if (n <= rd_left(r)) return TR_OK;
    return rd_fail(r, TR_ERR_FORMAT, r->pos,
                   "%s: truncated (needs %" PRIu64 " bytes, %" PRIu64
                   " left before end of file)",
                   field, n, rd_left(r));
}

static tr_status rd_u32(rd *r, const char *field, uint32_t *out) {
    tr_status s = rd_need(r, 4, field);
    if (s) return s;
    *out = le32(r->p + r->pos);
    r->pos += 4;
    return TR_OK;
}

static tr_status rd_u64(rd *r, const char *field, uint64_t *out) {
    tr_status s = rd_need(r, 8, field);
    if (s) return s;
    *out = le64(r->p + r->pos);
    r->pos += 8;
    return TR_OK;
}

static tr_status rd_str(rd *r, const char *field, gguf_str *out) {
    uint64_t len_off = r->pos;
    uint64_t len;
    tr_status s = rd_u64(r, field, &len);
    if (s) return s;
    if (len > rd_left(r))
        return rd_fail(r, TR_ERR_FORMAT, len_off,
                       "%s: string length %" PRIu64
                       " past end of file (%" PRIu64 " bytes left)",
                       field, len, rd_left(r));
    out->ptr = (const char *)r->p + r->pos;
    out->len = len;
    r->pos += len;
    return TR_OK;
}

/* Writes a printable, shortened rendering of s (for messages). */
static void str_sanitize(gguf_str s, char *buf, size_t size, size_t max_show) {
    size_t n = 0;
    uint64_t i;
    for (i = 0; i < s.len && i < max_show && n + 5 < size; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            buf[n++] = (char)c;
        else
            n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
    }
    if (i < s.len && n + 4 < size) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n < size ? n : size - 1] = '\0';
}

/* ---- value parsing ---- */

static tr_status parse_array(rd *r, int depth, gguf_kv *kv);

/* Validates (and skips) one value of type t at the cursor. depth = number of
 * arrays enclosing it. */
static tr_status parse_value(rd *r, uint32_t t, int depth, gguf_kv *kv) {
    uint64_t off = r->pos;
    if (t == GGUF_TYPE_STRING) {
        gguf_str s;
        return rd_str(r, "value", &s);
    }
    if (t == GGUF_TYPE_ARRAY) return parse_array(r, depth, kv);
    uint32_t sz = scalar_size(t);
    tr_status st = rd_need(r, sz, "value");
    if (st) return st;
    if (t == GGUF_TYPE_BOOL && r->p[off] > 1)
        return rd_fail(r, TR_ERR_FORMAT, off,
                       "value: bool byte %u is neither 0 nor 1", r->p[off]);
    r->pos += sz;
    return TR_OK;
}

/* An array at the cursor; kv != NULL for a kv's top-level array (its
 * element type, count and, for strings, element offsets are recorded). */
static tr_status parse_array(rd *r, int depth, gguf_kv *kv) {
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return rd_fail(r, TR_ERR_LIMIT, r->pos,
                       "array: nested deeper than %d levels",
                       GGUF_MAX_ARRAY_DEPTH);
    uint64_t type_off = r->pos;
    uint32_t et;
    uint64_t n;
    tr_status s = rd_u32(r, "array element type", &et);
    if (s) return s;
    if (et >= GGUF_TYPE_COUNT)
        return rd_fail(r, TR_ERR_FORMAT, type_off,
                       "array element type %" PRIu32 " unknown", et);
    uint64_t n_off = r->pos;
    s = rd_u64(r, "array length", &n);
    if (s) return s;
    uint64_t min = min_value_size(et);
    if (n > rd_left(r) / min)
        return rd_fail(r, TR_ERR_FORMAT, n_off,
                       "array length %" PRIu64 " past end of file (%s elements "
                       "take >= %" PRIu64 " bytes each, %" PRIu64 " left)",
                       n, tr_gguf_type_name((gguf_type)et), min, rd_left(r));
    if (kv) {
        kv->elem_type = (gguf_type)et;
        kv->n = n;
        kv->val_off = r->pos;
    }
    uint32_t sz = scalar_size(et);
    if (sz && et != GGUF_TYPE_BOOL) { /* packed numbers: checked above */
        r->pos += n * sz;
        return TR_OK;
    }
    if (kv && et == GGUF_TYPE_STRING && n > 0) {
        /* n <= left / 8 bounds this allocation by the file size. */
        kv->str_off = malloc(n * sizeof *kv->str_off);
        if (!kv->str_off)
            return rd_fail(r, TR_ERR_NOMEM, n_off,
                           "array of %" PRIu64 " strings: out of memory", n);
    }
    r->depth = depth + 1;
    for (uint64_t i = 0; i < n; i++) {
        r->path[depth] = i;
        if (kv && kv->str_off) kv->str_off[i] = r->pos;
        s = parse_value(r, et, depth + 1, NULL);
        if (s) return s; /* r->depth left as is: the message uses the path */
    }
    r->depth = depth;
    return TR_OK;
}

/* ---- name index ---- */

static const gguf_str *rec_name(const void *recs, size_t stride,
                                size_t name_at, uint64_t i) {
    return (const gguf_str *)((const char *)recs + i * stride + name_at);
}

/* Builds the index over n records; returns TR_ERR_NOMEM, or TR_ERR_FORMAT
 * with *dup = the first record whose name repeats record *first. */
static tr_status index_build(name_index *ix, const void *recs, size_t stride,
                             size_t name_at, uint64_t n, uint64_t *first,
                             uint64_t *dup) {
    uint64_t cap = 8;
    while (cap < 2 * n) cap *= 2; /* n <= size / 13: no overflow */
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots) return TR_ERR_NOMEM;
    ix->mask = cap - 1;
    for (uint64_t i = 0; i < n; i++) {
        const gguf_str *s = rec_name(recs, stride, name_at, i);
        uint64_t h = tr_fnv1a(TR_FNV1A_BASIS, s->ptr, s->len) & ix->mask;
        while (ix->slots[h]) {
            const gguf_str *o =
                rec_name(recs, stride, name_at, ix->slots[h] - 1);
            if (o->len == s->len && memcmp(o->ptr, s->ptr, s->len) == 0) {
                *first = ix->slots[h] - 1;
                *dup = i;
                return TR_ERR_FORMAT;
            }
            h = (h + 1) & ix->mask;
        }
        ix->slots[h] = i + 1;
    }
    return TR_OK;
}

static int64_t index_find(const name_index *ix, const void *recs,
                          size_t stride, size_t name_at, const char *key) {
    if (!ix->slots || !key) return -1;
    size_t len = strlen(key);
    uint64_t h = tr_fnv1a(TR_FNV1A_BASIS, key, len) & ix->mask;
    while (ix->slots[h]) {
        const gguf_str *o = rec_name(recs, stride, name_at, ix->slots[h] - 1);
        if (o->len == len && memcmp(o->ptr, key, len) == 0)
            return (int64_t)(ix->slots[h] - 1);
        h = (h + 1) & ix->mask;
    }
    return -1;
}

/* true if the probe sequence of name reaches record i (for _check). */
static bool index_has(const name_index *ix, const gguf_str *name, uint64_t i) {
    if (!ix->slots) return false;
    uint64_t h = tr_fnv1a(TR_FNV1A_BASIS, name->ptr, name->len) & ix->mask;
    for (uint64_t probes = 0; probes <= ix->mask && ix->slots[h]; probes++) {
        if (ix->slots[h] == i + 1) return true;
        h = (h + 1) & ix->mask;
    }
    return false;
}

#define KV_INDEX_ARGS(f) (f)->kvs, sizeof(gguf_kv), offsetof(gguf_kv, key)
#define TENSOR_INDEX_ARGS(f)                     \
    (f)->tensors, sizeof(gguf_tensor_rec),       \
        offsetof(gguf_tensor_rec, t) + offsetof(gguf_tensor, name)

/* ---- open ---- */

/* Grows *arr (of elem-byte records) to hold at least need records. */
static bool grow(void **arr, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return true;
    uint64_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    size_t bytes;
    if (tr_mul_overflow_size((size_t)c, elem, &bytes)) return false;
    void *p = realloc(*arr, bytes);
    if (!p) return false;
    memset((char *)p + *cap * elem, 0, (size_t)(c - *cap) * elem);
    *arr = p;
    *cap = c;
    return true;
}

void tr_gguf_close(gguf_file *f) {
    if (!f) return;
    for (uint64_t i = 0; i < f->n_kv; i++) free(f->kvs[i].str_off);
    free(f->kvs);
    free(f->tensors);
    free(f->kv_index.slots);
    free(f->tensor_index.slots);
    if (f->map) munmap(f->map, f->map_size);
    free(f);
}

void tr_gguf_forget(gguf_file *f, const void *p, size_t n) {
    if (!f || !f->map || !p) return;
    uintptr_t lo = (uintptr_t)p, hi = lo + n, base = (uintptr_t)f->base;
    if (hi < lo || lo < base || hi > base + f->size) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    lo = (lo + page - 1) / page * page; /* whole pages only: the neighbours' bytes stay */
    hi = hi / page * page;
    if (hi <= lo) return;
    if (f->load == GGUF_LOAD_READ) (void)mprotect((void *)lo, hi - lo, PROT_NONE);
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: failure costs memory only */
}

static tr_status parse_header(rd *r, gguf_file *f, uint64_t *n_tensors,
                              uint64_t *n_kv) {
    tr_status s = rd_need(r, 4, "magic");
    if (s) return s;
    if (memcmp(r->p, "GGUF", 4) != 0)
        return rd_fail(r, TR_ERR_FORMAT, 0,
                       "magic: expected \"GGUF\" (47 47 55 46), found "
                       "%02x %02x %02x %02x",
                       r->p[0], r->p[1], r->p[2], r->p[3]);
    r->pos = 4;
    uint32_t v;
    if ((s = rd_u32(r, "version", &v))) return s;
    if (v == 1)
        return rd_fail(r, TR_ERR_UNSUPPORTED, 4,
                       "version: GGUF v1 (32-bit counts) is not supported; "
                       "only v2 and v3 are (re-convert the model)");
    if (v == 0x02000000u || v == 0x03000000u)
        return rd_fail(r, TR_ERR_UNSUPPORTED, 4,
                       "version: big-endian GGUF files are not supported");
    if (v != 2 && v != 3)
        return rd_fail(r, TR_ERR_UNSUPPORTED, 4,
                       "version: %" PRIu32 " not supported (2 or 3 expected)",
                       v);
    f->version = v;
    if ((s = rd_u64(r, "tensor_count", n_tensors))) return s;
    if ((s = rd_u64(r, "kv_count", n_kv))) return s;
    /* Plausibility before any allocation: counts the file cannot hold. */
    uint64_t left = rd_left(r);
    if (*n_kv > left / GGUF_MIN_KV_BYTES)
        return rd_fail(r, TR_ERR_FORMAT, 16,
                       "kv_count: %" PRIu64 " implausible (each kv takes >= %u "
                       "bytes, %" PRIu64 " left in the file)",
                       *n_kv, GGUF_MIN_KV_BYTES, left);
    if (*n_tensors > left / GGUF_MIN_TENSOR_BYTES ||
        *n_tensors * GGUF_MIN_TENSOR_BYTES > left - *n_kv * GGUF_MIN_KV_BYTES)
        return rd_fail(r, TR_ERR_FORMAT, 8,
                       "tensor_count: %" PRIu64 " implausible (each tensor "
                       "info takes >= %u bytes, %" PRIu64
                       " left in the file with %" PRIu64 " kvs)",
                       *n_tensors, GGUF_MIN_TENSOR_BYTES, left, *n_kv);
    return TR_OK;
}

static void ctx_named(rd *r, const char *what, uint64_t i, gguf_str name) {
    char shown[96];
    str_sanitize(name, shown, sizeof shown, 64);
    snprintf(r->ctx, sizeof r->ctx, "%s #%" PRIu64 " '%s'", what, i, shown);
}

static tr_status parse_kvs(rd *r, gguf_file *f, uint64_t n_kv) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!grow((void **)&f->kvs, &cap, i + 1, sizeof *f->kvs))
            return rd_fail(r, TR_ERR_NOMEM, r->pos, "kvs: out of memory");
        gguf_kv *kv = &f->kvs[i];
        f->n_kv = i + 1; /* so that tr_gguf_close frees kv->str_off */
        snprintf(r->ctx, sizeof r->ctx, "kv #%" PRIu64, i);
        kv->key_off = r->pos;
        tr_status s = rd_str(r, "key", &kv->key);
        if (s) return s;
        ctx_named(r, "kv", i, kv->key);
        uint64_t type_off = r->pos;
        uint32_t t;
        if ((s = rd_u32(r, "value type", &t))) return s;
        if (t >= GGUF_TYPE_COUNT)
            return rd_fail(r, TR_ERR_FORMAT, type_off,
                           "value type %" PRIu32 " unknown", t);
        kv->type = (gguf_type)t;
        kv->val_off = r->pos;
        r->depth = 0;
        if ((s = parse_value(r, t, 0, kv))) return s;
    }
    r->ctx[0] = '\0';
    uint64_t first, dup;
    tr_status s = index_build(&f->kv_index, KV_INDEX_ARGS(f), f->n_kv, &first,
                              &dup);
    if (s == TR_ERR_NOMEM)
        return rd_fail(r, s, r->pos, "kv index: out of memory");
    if (s) {
        ctx_named(r, "kv", dup, f->kvs[dup].key);
        return rd_fail(r, s, f->kvs[dup].key_off,
                       "key: duplicate (first defined by kv #%" PRIu64 ")",
                       first);
    }
    return TR_OK;
}

static tr_status parse_alignment(rd *r, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = index_find(&f->kv_index, KV_INDEX_ARGS(f), "general.alignment");
    if (i < 0) return TR_OK;
    const gguf_kv *kv = &f->kvs[i];
    snprintf(r->ctx, sizeof r->ctx, "kv #%" PRId64 " 'general.alignment'", i);
    if (!type_is_int(kv->type))
        return rd_fail(r, TR_ERR_FORMAT, kv->val_off,
                       "has type %s, expected uint32",
                       tr_gguf_type_name(kv->type));
    int_val v = decode_int(kv->type, f->base + kv->val_off);
    if (v.neg)
        return rd_fail(r, TR_ERR_FORMAT, kv->val_off,
                       "%" PRId64 " is not a non-zero power of two", v.s);
    if (v.u == 0 || (v.u & (v.u - 1)) != 0 || v.u > UINT32_MAX)
        return rd_fail(r, TR_ERR_FORMAT, kv->val_off,
                       "%" PRIu64 " is not a non-zero power of two", v.u);
    f->alignment = (uint32_t)v.u;
    r->ctx[0] = '\0';
    return TR_OK;
}

static tr_status parse_tensor_info(rd *r, gguf_file *f, uint64_t i) {
    gguf_tensor_rec *rec = &f->tensors[i];
    gguf_tensor *t = &rec->t;
    snprintf(r->ctx, sizeof r->ctx, "tensor #%" PRIu64, i);
    rec->name_off = r->pos;
    tr_status s = rd_str(r, "name", &t->name);
    if (s) return s;
    ctx_named(r, "tensor", i, t->name);
    uint64_t dims_off = r->pos;
    if ((s = rd_u32(r, "n_dims", &t->n_dims))) return s;
    if (t->n_dims < 1 || t->n_dims > 4)
        return rd_fail(r, TR_ERR_FORMAT, dims_off,
                       "n_dims %" PRIu32 " outside 1..4", t->n_dims);
    uint64_t ne_off = r->pos;
    uint64_t nel = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        char field[16];
        snprintf(field, sizeof field, "ne[%" PRIu32 "]", d);
        uint64_t off = r->pos;
        if ((s = rd_u64(r, field, &t->ne[d]))) return s;
        if (t->ne[d] == 0)
            return rd_fail(r, TR_ERR_FORMAT, off, "%s is 0", field);
        overflow |= tr_mul_overflow_u64(nel, t->ne[d], &nel);
    }
    /* ggml and the model code index with int64: keep counts below 2^63. */
    if (overflow || nel > (uint64_t)INT64_MAX)
        return rd_fail(r, TR_ERR_FORMAT, ne_off,
                       "element count overflows (ne = %" PRIu64 " x %" PRIu64
                       " x %" PRIu64 " x %" PRIu64 ")",
                       t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    t->n_elements = nel;
    uint64_t type_off = r->pos;
    if ((s = rd_u32(r, "type", &t->type))) return s;
    if (!tr_dtype_known(t->type))
        return rd_fail(r, TR_ERR_UNSUPPORTED, type_off,
                       "type %" PRIu32 " unknown", t->type);
    uint32_t bs = tr_dtype_block_size(t->type);
    if (t->ne[0] % bs != 0)
        return rd_fail(r, TR_ERR_FORMAT, ne_off,
                       "ne[0] %" PRIu64 " not a multiple of the %s block "
                       "size %" PRIu32,
                       t->ne[0], tr_dtype_name(t->type), bs);
    uint64_t row, size;
    if (!tr_dtype_row_bytes(t->type, t->ne[0], &row) ||
        tr_mul_overflow_u64(row, nel / t->ne[0], &size))
        return rd_fail(r, TR_ERR_FORMAT, ne_off, "byte size overflows");
    t->size = size;
    rec->offset_off = r->pos;
    if ((s = rd_u64(r, "offset", &rec->rel_offset))) return s;
    if (rec->rel_offset % f->alignment != 0)
        return rd_fail(r, TR_ERR_FORMAT, rec->offset_off,
                       "offset %" PRIu64 " not a multiple of the alignment %"
                       PRIu32,
                       rec->rel_offset, f->alignment);
    return TR_OK;
}

static tr_status parse_tensors(rd *r, gguf_file *f, uint64_t n_tensors) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (!grow((void **)&f->tensors, &cap, i + 1, sizeof *f->tensors))
            return rd_fail(r, TR_ERR_NOMEM, r->pos, "tensors: out of memory");
        f->n_tensors = i + 1;
        tr_status s = parse_tensor_info(r, f, i);
        if (s) return s;
    }
    r->ctx[0] = '\0';
    uint64_t first, dup;
    tr_status s = index_build(&f->tensor_index, TENSOR_INDEX_ARGS(f),
                              f->n_tensors, &first, &dup);
    if (s == TR_ERR_NOMEM)
        return rd_fail(r, s, r->pos, "tensor index: out of memory");
    if (s) {
        ctx_named(r, "tensor", dup, f->tensors[dup].t.name);
        return rd_fail(r, s, f->tensors[dup].name_off,
                       "name: duplicate (first used by tensor #%" PRIu64 ")",
                       first);
    }
    /* Data start: the end of the infos rounded up to the alignment. */
    uint64_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    if (tr_add_overflow_u64(r->pos, pad, &f->data_offset))
        return rd_fail(r, TR_ERR_FORMAT, r->pos, "data start overflows");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor_rec *rec = &f->tensors[i];
        gguf_tensor *t = &rec->t;
        uint64_t abs, end;
        if (tr_add_overflow_u64(f->data_offset, rec->rel_offset, &abs) ||
            tr_add_overflow_u64(abs, t->size, &end) || end > f->size) {
            ctx_named(r, "tensor", i, t->name);
            return rd_fail(r, TR_ERR_FORMAT, rec->offset_off,
                           "offset %" PRIu64 " outside file (data starts at "
                           "byte %" PRIu64 ", %" PRIu64
                           " bytes needed, file is %" PRIu64 " bytes)",
                           rec->rel_offset, f->data_offset, t->size, f->size);
        }
        t->offset = abs;
        t->data = f->base + abs;
    }
    return TR_OK;
}

static tr_status parse(gguf_file *f, tr_diag *diag) {
    rd r;
    memset(&r, 0, sizeof r);
    r.p = f->base;
    r.size = f->size;
    r.diag = diag;
    uint64_t n_tensors = 0, n_kv = 0;
    tr_status s = parse_header(&r, f, &n_tensors, &n_kv);
    if (!s) s = parse_kvs(&r, f, n_kv);
    if (!s) s = parse_alignment(&r, f);
    if (!s) s = parse_tensors(&r, f, n_tensors);
    return s;
}

static tr_status open_bytes(const void *data, uint64_t size, void *map,
                            size_t map_size, gguf_file **out, tr_diag *diag) {
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (map) munmap(map, map_size);
        return tr_diag_set(diag, TR_ERR_NOMEM, 0, "gguf: out of memory");
    }
    f->base = data;
    f->size = size;
    f->map = map;
    f->map_size = map_size;
    f->load = GGUF_LOAD_MMAP;
    tr_status s = parse(f, diag);
    if (s) {
        tr_gguf_close(f);
        return s;
    }
    *out = f;
    return TR_OK;
}

tr_status tr_gguf_open_memory(const void *data, size_t size, gguf_file **out,
                           tr_diag *diag) {
    if (!out || (!data && size))
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "gguf_open_memory: NULL argument");
    static const uint8_t empty[1];
    return open_bytes(data ? data : empty, size, NULL, 0, out, diag);
}

/* The whole file in anonymous memory advised for transparent huge pages,
 * its start 2 MiB-aligned. A forward pass streams every weight once per
 * step; from 4 KiB pages of a file mapping that is a TLB miss every 4 KiB,
 * and the page walks cost decode several percent (docs/performance.md,
 * "Weights in huge pages"). NULL with errno set on failure; *raw / *raw_size are what
 * munmap takes. */
#define GGUF_HUGE (2u << 20)
static void *read_resident(int fd, size_t size, void **raw, size_t *raw_size,
                           size_t *bad_offset) {
    *bad_offset = 0;
    if (size > SIZE_MAX - GGUF_HUGE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t n = size + GGUF_HUGE;
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uint8_t *base = (uint8_t *)(((uintptr_t)m + GGUF_HUGE - 1) & ~(uintptr_t)(GGUF_HUGE - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(base, size, MADV_HUGEPAGE); /* advice: failure only costs speed */
#endif
    size_t got = 0;
    while (got < size) {
        size_t want = size - got < ((size_t)1 << 30) ? size - got : (size_t)1 << 30;
        ssize_t r = pread(fd, base + got, want, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO; /* 0: the file shrank under us */
            munmap(m, n);
            *bad_offset = got;
            errno = e;
            return NULL;
        }
        got += (size_t)r;
    }
    if (mprotect(base, size, PROT_READ) != 0) { /* the contract: read-only */
        int e = errno;
        munmap(m, n);
        errno = e;
        return NULL;
    }
    *raw = m;
    *raw_size = n;
    return base;
}

bool tr_gguf_huge_pages_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = {0};
    bool ok = fgets(line, sizeof line, f) != NULL &&
              (strstr(line, "[always]") || strstr(line, "[madvise]"));
    fclose(f);
    return ok;
}

/* AUTO's rule: read the file in when huge pages can be had (else the copy
 * buys nothing) and it takes at most a quarter of the machine's RAM (a
 * bigger one is mapped so that it can be paged, as llama.cpp does by
 * default). */
static bool auto_reads(size_t size) {
    if (!tr_gguf_huge_pages_available()) return false;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return false;
    return (double)size <= 0.25 * (double)pages * (double)page;
}

const char *tr_gguf_load_name(gguf_load load) {
    switch (load) {
    case GGUF_LOAD_AUTO: return "auto";
    case GGUF_LOAD_MMAP: return "mmap";
    case GGUF_LOAD_READ: return "read";
    }
    return "?";
}

bool tr_gguf_load_parse(const char *s, gguf_load *out) {
    static const gguf_load all[] = {GGUF_LOAD_AUTO, GGUF_LOAD_MMAP, GGUF_LOAD_READ};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, tr_gguf_load_name(all[i])) == 0) {
            *out = all[i];
            return true;
        }
    return false;
}

tr_status tr_gguf_open(const char *path, gguf_file **out, tr_diag *diag) {
    return tr_gguf_open_ex(path, GGUF_LOAD_MMAP, out, diag);
}

tr_status tr_gguf_open_ex(const char *path, gguf_load load, gguf_file **out,
                       tr_diag *diag) {
    if (!path || !out)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "gguf_open: NULL argument");
    if (load != GGUF_LOAD_AUTO && load != GGUF_LOAD_MMAP && load != GGUF_LOAD_READ)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "gguf_open: unknown load mode %d", (int)load);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tr_diag_set(diag, TR_ERR_IO, 0, "%s: cannot open: %s", path,
                           strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tr_diag_set(diag, TR_ERR_IO, 0, "%s: cannot stat: %s", path,
                           strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tr_diag_set(diag, TR_ERR_IO, 0, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "%s: magic: empty file (at byte 0)", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return tr_diag_set(diag, TR_ERR_IO, 0, "%s: too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    if (load == GGUF_LOAD_READ || (load == GGUF_LOAD_AUTO && auto_reads(size))) {
        void *raw = NULL;
        size_t raw_size = 0, bad = 0;
        void *base = read_resident(fd, size, &raw, &raw_size, &bad);
        int e = errno;
        if (base) {
            close(fd);
            tr_status s = open_bytes(base, size, raw, raw_size, out, diag);
            if (s == TR_OK) (*out)->load = GGUF_LOAD_READ;
            return s;
        }
        if (load == GGUF_LOAD_READ) {
            close(fd);
            return tr_diag_set(diag, TR_ERR_IO, bad,
                               "%s: cannot read the file into memory (at byte "
                               "%zu of %zu): %s",
                               path, bad, size, strerror(e));
        }
        /* AUTO: the mapping below still works without the extra memory */
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return tr_diag_set(diag, TR_ERR_IO, 0, "%s: cannot mmap: %s", path,
                           strerror(e));
    tr_status s = open_bytes(map, size, map, size, out, diag);
    if (s == TR_OK) (*out)->load = GGUF_LOAD_MMAP;
    return s;
}

gguf_load tr_gguf_load_used(const gguf_file *f) { return f->load; }

/* ---- file-level queries ---- */

uint32_t tr_gguf_version(const gguf_file *f) { return f->version; }
uint64_t tr_gguf_file_size(const gguf_file *f) { return f->size; }
uint32_t tr_gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t tr_gguf_data_offset(const gguf_file *f) { return f->data_offset; }

/* ---- key/value queries ---- */

uint64_t tr_gguf_kv_count(const gguf_file *f) { return f->n_kv; }

int64_t tr_gguf_kv_find(const gguf_file *f, const char *key) {
    return index_find(&f->kv_index, KV_INDEX_ARGS(f), key);
}

gguf_str tr_gguf_kv_key(const gguf_file *f, uint64_t i) {
    gguf_str none = {NULL, 0};
    return i < f->n_kv ? f->kvs[i].key : none;
}

gguf_type tr_gguf_kv_type(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? f->kvs[i].type : (gguf_type)-1;
}

static const gguf_kv *kv_get(const gguf_file *f, const char *key) {
    int64_t i = tr_gguf_kv_find(f, key);
    return i < 0 ? NULL : &f->kvs[i];
}

/* The integer value of key: TR_ERR_NOT_FOUND / TR_ERR_FORMAT (not an int). */
static tr_status get_int(const gguf_file *f, const char *key, int_val *v) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv) return TR_ERR_NOT_FOUND;
    if (!type_is_int(kv->type)) return TR_ERR_FORMAT;
    *v = decode_int(kv->type, f->base + kv->val_off);
    return TR_OK;
}

tr_status tr_gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int_val v;
    tr_status s = get_int(f, key, &v);
    if (s) return s;
    if (v.neg || v.u > UINT32_MAX) return TR_ERR_FORMAT;
    *out = (uint32_t)v.u;
    return TR_OK;
}

tr_status tr_gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    int_val v;
    tr_status s = get_int(f, key, &v);
    if (s) return s;
    if (v.neg) return TR_ERR_FORMAT;
    *out = v.u;
    return TR_OK;
}

tr_status tr_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    int_val v;
    tr_status s = get_int(f, key, &v);
    if (s) return s;
    if (v.neg) {
        *out = v.s;
        return TR_OK;
    }
    if (v.u > (uint64_t)INT64_MAX) return TR_ERR_FORMAT;
    *out = (int64_t)v.u;
    return TR_OK;
}

tr_status tr_gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv) return TR_ERR_NOT_FOUND;
    if (!type_is_float(kv->type)) return TR_ERR_FORMAT;
    double d = decode_float(kv->type, f->base + kv->val_off);
    /* A finite float64 beyond float range does not fit; inf and NaN do. */
    if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX)) return TR_ERR_FORMAT;
    *out = (float)d;
    return TR_OK;
}

tr_status tr_gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv) return TR_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_BOOL) return TR_ERR_FORMAT;
    *out = f->base[kv->val_off] != 0;
    return TR_OK;
}

static gguf_str str_at(const gguf_file *f, uint64_t len_off) {
    gguf_str s = {(const char *)f->base + len_off + 8,
                  le64(f->base + len_off)};
    return s;
}

tr_status tr_gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv) return TR_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_STRING) return TR_ERR_FORMAT;
    *out = str_at(f, kv->val_off);
    return TR_OK;
}

tr_status tr_gguf_get_arr(const gguf_file *f, const char *key,
                       gguf_type *elem_type, uint64_t *n) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv) return TR_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_ARRAY) return TR_ERR_FORMAT;
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    return TR_OK;
}

/* The array kv of key whose elements are scalars (numbers or bools). */
static tr_status get_scalar_arr(const gguf_file *f, const char *key,
                                uint64_t i, const gguf_kv **out) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv) return TR_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_ARRAY || !scalar_size(kv->elem_type))
        return TR_ERR_FORMAT;
    if (i >= kv->n) return TR_ERR_INVALID_ARG;
    *out = kv;
    return TR_OK;
}

tr_status tr_gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i,
                           gguf_str *out) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv) return TR_ERR_NOT_FOUND;
    if (kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING)
        return TR_ERR_FORMAT;
    if (i >= kv->n) return TR_ERR_INVALID_ARG;
    *out = str_at(f, kv->str_off[i]);
    return TR_OK;
}

tr_status tr_gguf_get_arr_f64(const gguf_file *f, const char *key, uint64_t i,
                           double *out) {
    const gguf_kv *kv;
    tr_status s = get_scalar_arr(f, key, i, &kv);
    if (s) return s;
    const uint8_t *p = f->base + kv->val_off + i * scalar_size(kv->elem_type);
    if (type_is_float(kv->elem_type)) {
        *out = decode_float(kv->elem_type, p);
    } else {
        int_val v = decode_int(kv->elem_type, p);
        *out = v.neg ? (double)v.s : (double)v.u;
    }
    return TR_OK;
}

tr_status tr_gguf_get_arr_i64(const gguf_file *f, const char *key, uint64_t i,
                           int64_t *out) {
    const gguf_kv *kv;
    tr_status s = get_scalar_arr(f, key, i, &kv);
    if (s) return s;
    if (type_is_float(kv->elem_type)) return TR_ERR_FORMAT;
    int_val v = decode_int(kv->elem_type,
                           f->base + kv->val_off + i * scalar_size(kv->elem_type));
    if (!v.neg && v.u > (uint64_t)INT64_MAX) return TR_ERR_FORMAT;
    *out = v.neg ? v.s : (int64_t)v.u;
    return TR_OK;
}

const void *tr_gguf_get_arr_data(const gguf_file *f, const char *key) {
    const gguf_kv *kv = kv_get(f, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || !scalar_size(kv->elem_type))
        return NULL;
    return f->base + kv->val_off;
}

/* ---- formatting ---- */

typedef struct appender {
    char *buf;
    size_t size; /* > 0 */
    size_t len;  /* < size; buf[len] == '\0' */
} appender;

static bool ap_full(const appender *a) { return a->len + 1 >= a->size; }

__attribute__((format(printf, 2, 3)))
static void ap_printf(appender *a, const char *fmt, ...) {
    if (ap_full(a)) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(a->buf + a->len, a->size - a->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    a->len = TR_MIN(a->len + (size_t)n, a->size - 1);
}

static void ap_quoted(appender *a, gguf_str s) {
    enum { MAX_SHOWN = 120 };
    ap_printf(a, "\"");
    uint64_t i;
    for (i = 0; i < s.len && i < MAX_SHOWN && !ap_full(a); i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') ap_printf(a, "\\%c", c);
        else if (c == '\n') ap_printf(a, "\\n");
        else if (c >= 0x20 && c != 0x7f) ap_printf(a, "%c", c);
        else ap_printf(a, "\\x%02x", c);
    }
    ap_printf(a, i < s.len ? "\"..." : "\"");
}

/* Renders the value of type t at *off (validated data) and advances *off
 * past it. Arrays show their first elements; the rest is skipped with the
 * same checked cursor that validated the file. */
static void format_value(appender *a, const gguf_file *f, uint32_t t,
                         uint64_t *off, int depth) {
    enum { MAX_ELEMS = 8 };
    const uint8_t *p = f->base + *off;
    if (t == GGUF_TYPE_STRING) {
        gguf_str s = str_at(f, *off);
        ap_quoted(a, s);
        *off += 8 + s.len;
        return;
    }
    if (t == GGUF_TYPE_ARRAY) {
        /* Inside an enclosing array the caller needs *off past this whole
         * array, most of which is not shown: find the end first with the
         * same checked cursor that validated the file. */
        uint64_t end = f->size;
        if (depth > 0) {
            rd r;
            memset(&r, 0, sizeof r);
            r.p = f->base;
            r.size = f->size;
            r.pos = *off;
            if (parse_array(&r, depth, NULL) == TR_OK) end = r.pos;
        }
        uint32_t et = le32(p);
        uint64_t n = le64(p + 4);
        *off += 12;
        ap_printf(a, "[");
        uint64_t shown = TR_MIN(n, (uint64_t)MAX_ELEMS);
        for (uint64_t i = 0; i < shown && !ap_full(a); i++) {
            if (i) ap_printf(a, ", ");
            format_value(a, f, et, off, depth + 1);
        }
        ap_printf(a, "%s] (%" PRIu64 " x %s)", shown < n ? ", ..." : "", n,
                  tr_gguf_type_name((gguf_type)et));
        *off = end;
        return;
    }
    if (type_is_float(t)) {
        ap_printf(a, "%.9g", decode_float(t, p));
    } else if (t == GGUF_TYPE_BOOL) {
        ap_printf(a, "%s", p[0] ? "true" : "false");
    } else {
        int_val v = decode_int(t, p);
        if (v.neg) ap_printf(a, "%" PRId64, v.s);
        else ap_printf(a, "%" PRIu64, v.u);
    }
    *off += scalar_size(t);
}

const char *tr_gguf_kv_format(const gguf_file *f, uint64_t i, char *buf,
                           size_t buf_size) {
    if (!buf || buf_size == 0) return buf;
    buf[0] = '\0';
    if (i >= f->n_kv) return buf;
    appender a = {buf, buf_size, 0};
    const gguf_kv *kv = &f->kvs[i];
    /* For arrays val_off is the first element: back up to the header. */
    uint64_t off = kv->type == GGUF_TYPE_ARRAY ? kv->val_off - 12 : kv->val_off;
    format_value(&a, f, kv->type, &off, 0);
    return buf;
}

void tr_gguf_dump(const gguf_file *f, FILE *out) {
    fprintf(out, "GGUF v%" PRIu32 ", %" PRIu64 " bytes, %" PRIu64 " kvs, %"
            PRIu64 " tensors, alignment %" PRIu32 ", data at byte %" PRIu64 "\n",
            f->version, f->size, f->n_kv, f->n_tensors, f->alignment,
            f->data_offset);
    char buf[512];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kvs[i];
        fprintf(out, "  kv %" PRIu64 " %.*s : %s = %s\n", i,
                (int)TR_MIN(kv->key.len, 200u), kv->key.ptr,
                tr_gguf_type_name(kv->type), tr_gguf_kv_format(f, i, buf, sizeof buf));
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i].t;
        fprintf(out, "  tensor %" PRIu64 " %.*s %s [%" PRIu64 ", %" PRIu64
                ", %" PRIu64 ", %" PRIu64 "] at %" PRIu64 " (%" PRIu64
                " bytes)\n",
                i, (int)TR_MIN(t->name.len, 200u), t->name.ptr,
                tr_dtype_name(t->type), t->ne[0], t->ne[1], t->ne[2], t->ne[3],
                t->offset, t->size);
    }
}

tr_status tr_gguf_check(const gguf_file *f) {
    if (!f || !f->base) return TR_ERR_INVALID_ARG;
    if (f->version != 2 && f->version != 3) return TR_ERR_INTERNAL;
    if (!f->alignment || (f->alignment & (f->alignment - 1)))
        return TR_ERR_INTERNAL;
    if (f->data_offset % f->alignment) return TR_ERR_INTERNAL;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kvs[i];
        if ((uint32_t)kv->type >= GGUF_TYPE_COUNT) return TR_ERR_INTERNAL;
        if (kv->val_off > f->size || kv->key_off > f->size)
            return TR_ERR_INTERNAL;
        if (kv->type == GGUF_TYPE_ARRAY && kv->elem_type == GGUF_TYPE_STRING &&
            kv->n && !kv->str_off)
            return TR_ERR_INTERNAL;
        if (!index_has(&f->kv_index, &kv->key, i)) return TR_ERR_INTERNAL;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i].t;
        uint64_t row, size, nel = 1;
        for (int d = 0; d < 4; d++) nel *= t->ne[d];
        if (t->n_dims < 1 || t->n_dims > 4 || nel != t->n_elements)
            return TR_ERR_INTERNAL;
        if (!tr_dtype_row_bytes(t->type, t->ne[0], &row) ||
            tr_mul_overflow_u64(row, nel / t->ne[0], &size) || size != t->size)
            return TR_ERR_INTERNAL;
        if (t->offset < f->data_offset || (t->offset - f->data_offset) % f->alignment ||
            t->offset > f->size || t->size > f->size - t->offset ||
            (const uint8_t *)t->data != f->base + t->offset)
            return TR_ERR_INTERNAL;
        if (!index_has(&f->tensor_index, &t->name, i)) return TR_ERR_INTERNAL;
    }
    return TR_OK;
}

/* ---- tensors ---- */

uint64_t tr_gguf_tensor_count(const gguf_file *f) { return f->n_tensors; }

const gguf_tensor *tr_gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i].t : NULL;
}

const gguf_tensor *tr_gguf_tensor_find(const gguf_file *f, const char *name) {
    int64_t i = index_find(&f->tensor_index, TENSOR_INDEX_ARGS(f), name);
    return i < 0 ? NULL : &f->tensors[i].t;
}

bool tr_gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}
