/* gguf.h — read-only loader of GGUF v2/v3 model files.
 *
 * Layering: runtime; depends on base and kernels/dtype only (no
 * third-party library). The model loader, the tokenizer builder and
 * `trellis info` read files through it.
 *
 * The file is mmapped (or read into huge-page memory: tr_gguf_open_ex); every
 * count, offset and size read from it is checked for overflow and bounds
 * before use, so any byte string yields either a valid gguf_file or an
 * error whose tr_diag names the field and its byte offset (never a crash,
 * never a read outside the mapping). Strings and
 * tensor data point into the mapping: they are borrowed and live until
 * tr_gguf_close. A gguf_file is immutable after open: any number of threads may
 * read it at once.
 *
 * Checks made at open: magic "GGUF", version 2 or 3, key/value and tensor
 * counts plausible for the file size, every string length and array length
 * inside the file, value types known, no duplicate keys or tensor names,
 * general.alignment (default 32) a non-zero power of two, tensor dims
 * 1..4 with positive sizes and an element count without overflow, tensor
 * type known to kernels/dtype.h, ne[0] a multiple of the type's block
 * size, tensor offsets aligned, and every tensor's bytes inside the file.
 * A tensor type that is known but not computable is NOT an error here
 * (`trellis info` describes such files); the model loader rejects it.
 *
 * Error codes of tr_gguf_open / tr_gguf_open_memory: TR_ERR_IO (cannot open, stat
 * or map the file), TR_ERR_FORMAT (malformed: truncated, out of bounds,
 * overflowing, unknown value type, duplicate, bad alignment, ...),
 * TR_ERR_UNSUPPORTED (version other than 2 or 3, big-endian file, tensor
 * type id unknown to kernels/dtype.h), TR_ERR_LIMIT (arrays nested deeper
 * than GGUF_MAX_ARRAY_DEPTH), TR_ERR_NOMEM. Every allocation is bounded by
 * a small multiple of the file size, whatever counts the file claims.
 */
#ifndef TR_GGUF_H
#define TR_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* Arrays of arrays nest at most this deep (a kv's own array is level 1). */
#define GGUF_MAX_ARRAY_DEPTH 8

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

/* "uint32", "string", ...; "unknown" otherwise. */
const char *tr_gguf_type_name(gguf_type t);

/* A string inside the file: NOT NUL-terminated, may contain any bytes. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t type;    /* a tr_dtype id, known to kernels/dtype.h */
    uint32_t n_dims;  /* 1..4 */
    uint64_t ne[4];   /* ne[0] innermost; unused dims are 1 */
    uint64_t n_elements;
    uint64_t offset;  /* absolute byte offset in the file */
    uint64_t size;    /* bytes */
    const void *data; /* points into the mapping (borrowed); for tr_gguf_open
                         aligned to the file's alignment up to the page size */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* How tr_gguf_open_ex brings the file's bytes in.
 *   MMAP  a read-only file mapping: nothing is read up front and the pages
 *         are shared with the page cache (and other processes).
 *   READ  the whole file read into anonymous memory advised for transparent
 *         huge pages (2 MiB-aligned): costs a copy of the file and the time
 *         to read it, and makes every pass over the weights cheaper (no TLB
 *         miss per 4 KiB; measured in docs/performance.md, "Weights in huge pages").
 *   AUTO  READ if transparent huge pages are enabled (see
 *         tr_gguf_huge_pages_available), the file takes at most a quarter of
 *         the machine's RAM and the memory can be had, else MMAP. */
typedef enum gguf_load { GGUF_LOAD_AUTO = 0, GGUF_LOAD_MMAP, GGUF_LOAD_READ } gguf_load;

/* Whether the kernel hands out transparent huge pages to memory that asks
 * for them (/sys/kernel/mm/transparent_hugepage/enabled is "always" or
 * "madvise"). */
bool tr_gguf_huge_pages_available(void);

/* "auto", "mmap", "read"; tr_gguf_load_parse: false for anything else. */
const char *tr_gguf_load_name(gguf_load load);
bool tr_gguf_load_parse(const char *s, gguf_load *out);

/* Opens and validates path, bringing the bytes in as `load` says. On
 * failure *out is untouched and diag (if not NULL) says what, where (byte
 * offset) and why. TR_ERR_IO for a missing or unreadable file (READ: also a
 * read error or no memory for the copy, with the byte offset reached),
 * TR_ERR_FORMAT for malformed content, TR_ERR_UNSUPPORTED for a version
 * other than 2 or 3, TR_ERR_INVALID_ARG for an unknown load mode. Whatever
 * the mode, the same bytes are validated the same way. */
tr_status tr_gguf_open_ex(const char *path, gguf_load load, gguf_file **out,
                       tr_diag *diag);
/* tr_gguf_open_ex with GGUF_LOAD_MMAP. */
tr_status tr_gguf_open(const char *path, gguf_file **out, tr_diag *diag);
/* MMAP or READ: what tr_gguf_open_ex did (AUTO resolved); MMAP for
 * tr_gguf_open_memory. */
gguf_load tr_gguf_load_used(const gguf_file *f);
/* Same over a caller's buffer (borrowed; must outlive the gguf_file). Used
 * by tests and the fuzz target. */
tr_status tr_gguf_open_memory(const void *data, size_t size, gguf_file **out,
                           tr_diag *diag);
/* f may be NULL. */
void tr_gguf_close(gguf_file *f);

/* Gives back to the system the whole pages inside [p, p + n), bytes of f
 * that the caller will not read again (a model that copied some tensors
 * into another layout). Mapped files: the pages leave this process's
 * memory (a later read would bring them back from the file). Files read
 * in: the pages are freed and made inaccessible, so a later read faults
 * at once instead of seeing zeros (a bug in the caller). Borrowed bytes
 * (tr_gguf_open_memory), or a range not inside f's bytes: nothing. */
void tr_gguf_forget(gguf_file *f, const void *p, size_t n);

/* Re-validates the invariants open established (tensors inside the file,
 * sizes consistent with types, indexes complete). TR_OK or
 * TR_ERR_INTERNAL. For tests. */
tr_status tr_gguf_check(const gguf_file *f);
/* Prints the header, every kv (tr_gguf_kv_format) and every tensor. */
void tr_gguf_dump(const gguf_file *f, FILE *out);

uint32_t tr_gguf_version(const gguf_file *f);
uint64_t tr_gguf_file_size(const gguf_file *f);
uint32_t tr_gguf_alignment(const gguf_file *f);
/* Byte offset where tensor data starts. */
uint64_t tr_gguf_data_offset(const gguf_file *f);

/* ---- key/value metadata ---- */
uint64_t tr_gguf_kv_count(const gguf_file *f);
/* Index of key (NUL-terminated) or -1. */
int64_t tr_gguf_kv_find(const gguf_file *f, const char *key);
/* For i >= tr_gguf_kv_count: {NULL, 0}, and (gguf_type)-1 ("unknown"). */
gguf_str tr_gguf_kv_key(const gguf_file *f, uint64_t i);
gguf_type tr_gguf_kv_type(const gguf_file *f, uint64_t i);

/* Typed getters by key. Return TR_ERR_NOT_FOUND if the key is absent and
 * TR_ERR_FORMAT if its type does not fit (integers convert between widths
 * and signedness when the value fits; floats accept float32 and float64).
 * *out is untouched on failure. */
tr_status tr_gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
tr_status tr_gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
tr_status tr_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
tr_status tr_gguf_get_f32(const gguf_file *f, const char *key, float *out);
tr_status tr_gguf_get_bool(const gguf_file *f, const char *key, bool *out);
tr_status tr_gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Arrays: element type and length. TR_ERR_FORMAT if key is not an array. */
tr_status tr_gguf_get_arr(const gguf_file *f, const char *key,
                       gguf_type *elem_type, uint64_t *n);
/* Element i of a string array (bounds-checked: TR_ERR_INVALID_ARG). */
tr_status tr_gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i,
                           gguf_str *out);
/* Element i of a numeric or bool array converted to double / int64
 * (TR_ERR_INVALID_ARG for i >= n; tr_gguf_get_arr_i64 gives TR_ERR_FORMAT for
 * float arrays and uint64 values above INT64_MAX). */
tr_status tr_gguf_get_arr_f64(const gguf_file *f, const char *key, uint64_t i,
                           double *out);
tr_status tr_gguf_get_arr_i64(const gguf_file *f, const char *key, uint64_t i,
                           int64_t *out);
/* Raw packed little-endian data of a numeric array (may be unaligned:
 * memcpy from it). NULL for string arrays, nested arrays or missing keys. */
const void *tr_gguf_get_arr_data(const gguf_file *f, const char *key);

/* Writes a one-line human-readable rendering of value i into buf (always
 * NUL-terminated, truncated to buf_size; "" for i out of range) and returns
 * buf. Numbers as decimals, bools as true/false, strings quoted with \" \\
 * \n \xNN escapes (first 120 bytes), arrays as their first 8 elements then
 * the count and element type: `["a", "b", ...] (49152 x string)`. */
const char *tr_gguf_kv_format(const gguf_file *f, uint64_t i, char *buf,
                           size_t buf_size);

/* ---- tensors ---- */
uint64_t tr_gguf_tensor_count(const gguf_file *f);
/* NULL for i >= tr_gguf_tensor_count. */
const gguf_tensor *tr_gguf_tensor_at(const gguf_file *f, uint64_t i);
/* By name (NUL-terminated); NULL if absent. */
const gguf_tensor *tr_gguf_tensor_find(const gguf_file *f, const char *name);

/* true if s equals the NUL-terminated c. */
bool tr_gguf_str_eq(gguf_str s, const char *c);

#endif
