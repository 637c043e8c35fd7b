/* tokenizer_spm.c — SentencePiece-style encoding of one raw fragment
 * (tokenizer.ggml.model = "llama": Llama 1/2, Gemma, Mistral v0.1, ...).
 *
 * Layering: runtime/tokenizer internal; called by tokenizer_encode.c for
 * each fragment the special-token partition leaves. Reads the tokenizer
 * only; the scratch is the caller's, so any number of threads may encode.
 *
 * The algorithm, as llama.cpp runs it (ids must match its output exactly):
 *
 *   1. Spaces become U+2581 "▁" (3 bytes); with add_space_prefix a "▁" is
 *      put in front of a fragment that starts the text or follows a
 *      special token.
 *   2. The escaped text is cut into symbols, one per UTF-8 character; the
 *      length comes from the lead byte's high nibble alone (0x0-0xB: 1,
 *      0xC-0xD: 2, 0xE: 3, 0xF: 4; the last one is cut at the end), so any
 *      bytes, valid UTF-8 or not, make symbols.
 *   3. Every adjacent pair whose concatenated text is a token (of any
 *      type) is a candidate, scored by that token's score. The best one
 *      (highest score; leftmost on ties) merges, and the merged symbol's
 *      new pairs with its neighbours become candidates; until none is left.
 *   4. Each symbol is its token; a symbol that is no token (only a single
 *      character can be one: merges always make tokens) becomes one byte
 *      token "<0xNN>" per byte (byte fallback).
 *
 * Candidates live in a binary heap; a candidate whose sides have changed
 * since it was pushed (a side merged away, or grew) is stale and skipped
 * when popped: both sides alive with their sizes summing to the size
 * pushed means neither changed (a left side only grows by absorbing the
 * right one, and a right side that grew has a larger size).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "runtime/tokenizer/tokenizer_internal.h"

typedef struct spm_sym {
    uint32_t start, n; /* bytes of the escaped text; n = 0: merged away */
    int32_t prev, next;
} spm_sym;

typedef struct spm_cand {
    float score;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when pushed */
} spm_cand;

static bool cand_before(const spm_cand *a, const spm_cand *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static tr_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return TR_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return TR_ERR_OVERFLOW;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return TR_ERR_NOMEM;
    *p = q;
    *cap = c;
    return TR_OK;
}

void tr_tokenizer_spm_scratch_free(tokenizer_spm_scratch *s) {
    free(s->text);
    free(s->sym);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static tr_status heap_push(tokenizer_spm_scratch *s, spm_cand e) {
    tr_status st = grow((void **)&s->heap, &s->heap_cap, s->heap_n + 1, sizeof e);
    if (st) return st;
    spm_cand *h = s->heap;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
    return TR_OK;
}

static spm_cand heap_pop(tokenizer_spm_scratch *s) {
    spm_cand *h = s->heap;
    spm_cand top = h[0], last = h[--s->heap_n];
    size_t n = s->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

/* Pushes the pair (l, r) if their text is a token. */
static tr_status try_pair(const tokenizer *t, tokenizer_spm_scratch *s, int32_t l,
                          int32_t r) {
    if (l < 0 || r < 0) return TR_OK;
    const spm_sym *a = &s->sym[l], *b = &s->sym[r];
    uint32_t size = a->n + b->n;
    if (size > t->max_text_len) return TR_OK;
    int32_t id = tr_tokenizer_text_find(t, s->text + a->start, size);
    if (id < 0) return TR_OK;
    return heap_push(s, (spm_cand){t->score[id], l, r, size});
}

/* Escapes src[0..n) into s->text (see step 1); returns its length. */
static tr_status escape(tokenizer_spm_scratch *s, const char *src, size_t n,
                        bool prefix, size_t *out_len) {
    size_t spaces = prefix;
    for (size_t i = 0; i < n; i++) spaces += src[i] == ' ';
    size_t len;
    if (tr_mul_overflow_size(spaces, 2, &len) || tr_add_overflow_size(len, n, &len) ||
        tr_add_overflow_size(len, prefix, &len) || len > UINT32_MAX)
        return TR_ERR_LIMIT;
    tr_status st = grow((void **)&s->text, &s->text_cap, len ? len : 1, 1);
    if (st) return st;
    char *d = s->text;
    if (prefix) {
        memcpy(d, "\xE2\x96\x81", 3);
        d += 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (src[i] == ' ') {
            memcpy(d, "\xE2\x96\x81", 3);
            d += 3;
        } else {
            *d++ = src[i];
        }
    }
    *out_len = (size_t)(d - s->text);
    return TR_OK;
}

/* Step 4 for one final symbol. */
static tr_status emit_symbol(const tokenizer *t, const tokenizer_spm_scratch *s,
                             const spm_sym *y, tokenizer_ids *out) {
    int32_t id = tr_tokenizer_text_find(t, s->text + y->start, y->n);
    if (id >= 0) return tr_tokenizer_ids_push(out, id);
    for (uint32_t k = 0; k < y->n; k++) {
        /* a vocabulary without that byte token: the unknown token if there
         * is one (llama.cpp would throw), else the byte is dropped */
        int32_t b = t->byte_tok[(uint8_t)s->text[y->start + k]];
        if (b < 0) b = t->unk;
        if (b < 0) continue;
        tr_status st = tr_tokenizer_ids_push(out, b);
        if (st) return st;
    }
    return TR_OK;
}

tr_status tr_tokenizer_spm_encode(const tokenizer *t, tokenizer_spm_scratch *s,
                               const char *src, size_t n, bool prefix,
                               tokenizer_ids *out) {
    if (n == 0) return TR_OK; /* no fragment, no prefix (llama.cpp: "" -> []) */
    size_t len;
    tr_status st = escape(s, src, n, prefix, &len);
    if (st) return st;
    if ((st = grow((void **)&s->sym, &s->sym_cap, len, sizeof *s->sym))) return st;
    static const uint8_t utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    int32_t ns = 0;
    for (size_t off = 0; off < len; ns++) {
        uint32_t k = utf8_len[(uint8_t)s->text[off] >> 4];
        if (k > len - off) k = (uint32_t)(len - off);
        s->sym[ns] = (spm_sym){(uint32_t)off, k, ns - 1, ns + 1};
        off += k;
    }
    s->sym[ns - 1].next = -1;
    s->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        if ((st = try_pair(t, s, i - 1, i))) return st;
    while (s->heap_n) {
        spm_cand c = heap_pop(s);
        spm_sym *l = &s->sym[c.left], *r = &s->sym[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = c.left;
        if ((st = try_pair(t, s, l->prev, c.left)) || (st = try_pair(t, s, c.left, l->next)))
            return st;
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        if ((st = emit_symbol(t, s, &s->sym[i], out))) return st;
    return TR_OK;
}

/* ---- building (tokenizer.c calls this for "llama" vocabularies) ---- */

/* Scores (float32 or int32 array, as llama.cpp accepts; absent: all 0),
 * the byte-fallback tokens and add_space_prefix (absent: true). */
tr_status tr_tokenizer_spm_load(tokenizer *t, const gguf_file *f, tr_diag *diag) {
    const char *key = "tokenizer.ggml.scores";
    int32_t n = t->n_vocab;
    t->score = calloc((size_t)n, sizeof *t->score);
    if (!t->score) return TR_ERR_NOMEM;
    gguf_type et;
    uint64_t cnt;
    tr_status s = tr_gguf_get_arr(f, key, &et, &cnt);
    if (s == TR_OK) {
        if (et != GGUF_TYPE_FLOAT32 && et != GGUF_TYPE_INT32)
            return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s is not a float32 or int32 array",
                               key);
        if (cnt < (uint64_t)n)
            return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s has %llu entries for %d tokens",
                               key, (unsigned long long)cnt, n);
        const char *raw = tr_gguf_get_arr_data(f, key);
        if (!raw) return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s unreadable", key);
        int32_t bad = 0;
        for (int32_t i = 0; i < n; i++) {
            float v;
            if (et == GGUF_TYPE_FLOAT32) {
                memcpy(&v, raw + (size_t)i * 4, 4);
            } else {
                int32_t iv;
                memcpy(&iv, raw + (size_t)i * 4, 4);
                v = (float)iv;
            }
            /* a NaN would break the candidates' order: lowest priority */
            if (isnan(v)) {
                v = -INFINITY;
                bad++;
            }
            t->score[i] = v;
        }
        if (bad) tr_log(TR_LOG_WARN, "tokenizer: %d NaN scores treated as -inf", bad);
    } else if (s != TR_ERR_NOT_FOUND) {
        return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s is not an array", key);
    }
    /* byte b -> "<0xBB>" (upper-case hex), else the one-byte token b, as
     * llama.cpp's byte_to_token looks them up */
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        char c = (char)b;
        t->byte_tok[b] = tr_tokenizer_text_find(t, name, sizeof name);
        if (t->byte_tok[b] < 0) t->byte_tok[b] = tr_tokenizer_text_find(t, &c, 1);
    }
    bool v;
    s = tr_gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &v);
    if (s == TR_OK)
        t->add_space_prefix = v;
    else if (s == TR_ERR_NOT_FOUND)
        t->add_space_prefix = true;
    else
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "tokenizer.ggml.add_space_prefix is not a bool");
    return TR_OK;
}
