/* tokenizer_encode.c — text -> token ids: special tokens, pre-tokenizer
 * (PCRE2), byte-level BPE.
 *
 * Layering: runtime/tokenizer; see tokenizer.h for the contract. Every
 * call owns its scratch (PCRE2 match data, BPE arrays): the tokenizer is
 * only read, so any number of threads may encode at once.
 *
 * The pipeline, as llama.cpp runs it (ids must match its output exactly):
 *
 *   text ──► special-token partition ──► [raw | <tok> | raw | ...]
 *   raw  ──► regex 1 splits it into pieces, regex 2 splits each piece, ...
 *   piece ─► BPE over its bytes ──► ids
 *
 * (SentencePiece-style vocabularies have no regexes: each raw fragment goes
 * whole to tokenizer_spm.c.)
 *
 * Special tokens: the eligible ones (control/unknown with parse_special,
 * user-defined always) are taken one at a time, longest text first, and each
 * splits every raw fragment at all its occurrences; later (shorter) tokens
 * only see what is left. To avoid one full-text search per special token
 * (Gemma has thousands), one pass first finds which special texts occur at
 * all: at each byte that starts some special text, the text of every
 * special length is looked up in the vocabulary table.
 *
 * BPE: each byte of a piece starts as the token of its byte-level symbol;
 * the adjacent pair with the lowest merge rank (leftmost on ties) merges,
 * until no pair has a merge. Short pieces (almost all: words) use a
 * quadratic scan over a compact array, which beats a heap at that size;
 * long pieces (runs of spaces, digits, minified code) use a binary heap over
 * a linked list of symbols, with stale heap entries skipped when popped.
 * Both give identical results (tested against each other).
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/tokenizer/tokenizer_internal.h"

/* Pieces up to this many bytes use the scan loop (see above). */
#define BPE_SCAN_MAX 32

#define NO_RANK UINT32_MAX

tr_status tr_tokenizer_ids_push(tokenizer_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        size_t bytes;
        if (nc < a->cap || tr_mul_overflow_size(nc, sizeof *a->v, &bytes))
            return TR_ERR_OVERFLOW;
        int32_t *v = realloc(a->v, bytes);
        if (!v) return TR_ERR_NOMEM;
        a->v = v;
        a->cap = nc;
    }
    a->v[a->n++] = id;
    return TR_OK;
}

/* ---- BPE ---- */

typedef struct bpe_entry {
    uint32_t rank;
    int32_t left, right;
    int32_t result;
    uint32_t size; /* bytes of left + right when pushed */
} bpe_entry;

typedef struct bpe_scratch {
    int32_t *id;     /* scan: compact symbol ids; heap: per original byte */
    uint32_t *rank;  /* scan: rank of pair (i, i+1) */
    int32_t *res;    /* scan: its result */
    int32_t *prev, *next;
    uint32_t *len;   /* heap: bytes covered by the symbol, 0 = merged away */
    size_t cap;
    bpe_entry *heap;
    size_t heap_n, heap_cap;
} bpe_scratch;

static void bpe_scratch_free(bpe_scratch *s) {
    free(s->id);
    free(s->rank);
    free(s->res);
    free(s->prev);
    free(s->next);
    free(s->len);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static tr_status bpe_reserve(bpe_scratch *s, size_t n) {
    if (n <= s->cap) return TR_OK;
    if (n > (size_t)INT32_MAX) return TR_ERR_LIMIT;
    size_t c = s->cap ? s->cap : 64;
    while (c < n) c *= 2;
    int32_t *id = realloc(s->id, c * sizeof *id);
    if (id) s->id = id;
    uint32_t *rank = realloc(s->rank, c * sizeof *rank);
    if (rank) s->rank = rank;
    int32_t *res = realloc(s->res, c * sizeof *res);
    if (res) s->res = res;
    int32_t *prev = realloc(s->prev, c * sizeof *prev);
    if (prev) s->prev = prev;
    int32_t *next = realloc(s->next, c * sizeof *next);
    if (next) s->next = next;
    uint32_t *len = realloc(s->len, c * sizeof *len);
    if (len) s->len = len;
    if (!id || !rank || !res || !prev || !next || !len) return TR_ERR_NOMEM;
    s->cap = c;
    return TR_OK;
}

static inline uint32_t pair_rank(const tokenizer *t, int32_t a, int32_t b,
                                 int32_t *res) {
    uint32_t r;
    if (a < 0 || b < 0 || !tr_tokenizer_merge_find(t, a, b, &r, res)) return NO_RANK;
    return r;
}

static tr_status emit(tokenizer_ids *out, int32_t id) {
    /* a byte whose symbol the vocabulary lacks is dropped (llama.cpp does
     * the same); well-formed byte-level vocabularies have all 256 */
    return id >= 0 ? tr_tokenizer_ids_push(out, id) : TR_OK;
}

static tr_status bpe_scan(const tokenizer *t, bpe_scratch *sc, const uint8_t *s,
                          size_t n, tokenizer_ids *out) {
    int32_t *id = sc->id, *res = sc->res;
    uint32_t *rank = sc->rank;
    size_t m = n;
    for (size_t i = 0; i < n; i++) id[i] = t->byte_tok[s[i]];
    for (size_t i = 0; i + 1 < m; i++) rank[i] = pair_rank(t, id[i], id[i + 1], &res[i]);
    while (m > 1) {
        size_t best = 0;
        uint32_t br = rank[0];
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < br) {
                br = rank[i];
                best = i;
            }
        if (br == NO_RANK) break;
        id[best] = res[best];
        /* drop symbol best+1 and pair (best+1, best+2) */
        memmove(id + best + 1, id + best + 2, (m - best - 2) * sizeof *id);
        if (m - best > 2) {
            memmove(rank + best + 1, rank + best + 2, (m - best - 3) * sizeof *rank);
            memmove(res + best + 1, res + best + 2, (m - best - 3) * sizeof *res);
        }
        m--;
        if (best + 1 < m) rank[best] = pair_rank(t, id[best], id[best + 1], &res[best]);
        if (best > 0) rank[best - 1] = pair_rank(t, id[best - 1], id[best], &res[best - 1]);
    }
    for (size_t i = 0; i < m; i++) {
        tr_status st = emit(out, id[i]);
        if (st) return st;
    }
    return TR_OK;
}

static bool entry_less(const bpe_entry *a, const bpe_entry *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static tr_status heap_push(bpe_scratch *sc, bpe_entry e) {
    if (sc->heap_n == sc->heap_cap) {
        size_t nc = sc->heap_cap ? sc->heap_cap * 2 : 256;
        bpe_entry *h = realloc(sc->heap, nc * sizeof *h);
        if (!h) return TR_ERR_NOMEM;
        sc->heap = h;
        sc->heap_cap = nc;
    }
    bpe_entry *h = sc->heap;
    size_t i = sc->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!entry_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
    return TR_OK;
}

static bpe_entry heap_pop(bpe_scratch *sc) {
    bpe_entry *h = sc->heap;
    bpe_entry top = h[0];
    bpe_entry last = h[--sc->heap_n];
    size_t n = sc->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && entry_less(&h[c + 1], &h[c])) c++;
        if (!entry_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

static tr_status heap_pair(const tokenizer *t, bpe_scratch *sc, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return TR_OK;
    bpe_entry e;
    e.rank = pair_rank(t, sc->id[l], sc->id[r], &e.result);
    if (e.rank == NO_RANK) return TR_OK;
    e.left = l;
    e.right = r;
    e.size = sc->len[l] + sc->len[r];
    return heap_push(sc, e);
}

static tr_status bpe_heap(const tokenizer *t, bpe_scratch *sc, const uint8_t *s,
                          size_t n, tokenizer_ids *out) {
    int32_t nn = (int32_t)n;
    for (int32_t i = 0; i < nn; i++) {
        sc->id[i] = t->byte_tok[s[i]];
        sc->prev[i] = i - 1;
        sc->next[i] = i + 1 < nn ? i + 1 : -1;
        sc->len[i] = 1;
    }
    sc->heap_n = 0;
    tr_status st;
    for (int32_t i = 0; i + 1 < nn; i++)
        if ((st = heap_pair(t, sc, i, i + 1))) return st;
    while (sc->heap_n) {
        bpe_entry e = heap_pop(sc);
        int32_t l = e.left, r = e.right;
        /* stale: a side was merged away, or grew since the entry was made */
        if (sc->len[l] == 0 || sc->len[r] == 0 || sc->next[l] != r ||
            sc->len[l] + sc->len[r] != e.size)
            continue;
        sc->id[l] = e.result;
        sc->len[l] += sc->len[r];
        sc->len[r] = 0;
        sc->next[l] = sc->next[r];
        if (sc->next[r] >= 0) sc->prev[sc->next[r]] = l;
        if ((st = heap_pair(t, sc, sc->prev[l], l)) || (st = heap_pair(t, sc, l, sc->next[l])))
            return st;
    }
    for (int32_t i = 0; i >= 0; i = sc->next[i])
        if ((st = emit(out, sc->id[i]))) return st;
    return TR_OK;
}

static tr_status bpe_word(const tokenizer *t, bpe_scratch *sc, const uint8_t *s,
                          size_t n, int mode, tokenizer_ids *out) {
    if (n == 0) return TR_OK;
    if (n == 1) return emit(out, t->byte_tok[s[0]]);
    tr_status st = bpe_reserve(sc, n);
    if (st) return st;
    bool scan = mode == 1 || (mode == 0 && n <= BPE_SCAN_MAX);
    return scan ? bpe_scan(t, sc, s, n, out) : bpe_heap(t, sc, s, n, out);
}

tr_status tr_tokenizer_bpe_word(const tokenizer *t, const uint8_t *s, size_t n,
                             int mode, tokenizer_ids *out) {
    bpe_scratch sc = {0};
    tr_status st = bpe_word(t, &sc, s, n, mode, out);
    bpe_scratch_free(&sc);
    return st;
}

tr_status tr_tokenizer_build_whole(tokenizer *t) {
    size_t n_normal = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        n_normal += t->type[id] == TOKENIZER_TYPE_NORMAL;
    tr_status st = tr_tokenizer_strmap_init(&t->wmap, n_normal);
    if (st) return st;
    bpe_scratch sc = {0};
    tokenizer_ids ids = {0};
    for (int32_t id = 0; id < t->n_vocab && !st; id++) {
        size_t l = t->bytes_off[id + 1] - t->bytes_off[id];
        if (t->type[id] != TOKENIZER_TYPE_NORMAL || l < 2) continue;
        ids.n = 0;
        st = bpe_word(t, &sc, t->bytes_blob + t->bytes_off[id], l, 0, &ids);
        /* only tokens BPE reaches from their own bytes; if two normal tokens
         * had equal bytes (malformed vocabulary) the first one stays */
        if (!st && ids.n == 1 && ids.v[0] == id)
            tr_tokenizer_strmap_insert(&t->wmap, (const char *)t->bytes_blob, t->bytes_off, id);
    }
    bpe_scratch_free(&sc);
    free(ids.v);
    return st;
}

/* ---- pre-tokenizer ---- */

typedef struct enc_ctx {
    const tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* only after a JIT stack overflow */
    pcre2_jit_stack *jstack;
    bpe_scratch bpe;
    tokenizer_spm_scratch spm;
    uint8_t *enc;              /* byte-level spelling of a piece */
    size_t enc_cap;
    tokenizer_ids *out;
    tokenizer_piece_fn fn;     /* if set, pieces go here instead of BPE */
    void *ud;
} enc_ctx;

static void ctx_free(enc_ctx *c) {
    pcre2_match_data_free(c->md);
    pcre2_match_context_free(c->mctx);
    pcre2_jit_stack_free(c->jstack);
    bpe_scratch_free(&c->bpe);
    tr_tokenizer_spm_scratch_free(&c->spm);
    free(c->enc);
}

static tr_status ctx_init(enc_ctx *c, const tokenizer *t) {
    memset(c, 0, sizeof *c);
    c->t = t;
    if (t->kind == TOKENIZER_KIND_SPM) return TR_OK; /* no regexes */
    c->md = pcre2_match_data_create(t->re_ovec_pairs, NULL);
    return c->md ? TR_OK : TR_ERR_NOMEM;
}

/* The regex match starting the search at start; retries once with a large
 * JIT stack (allocated for this call only) if the default 32 KiB overflows. */
static tr_status re_match(enc_ctx *c, int level, const char *s, size_t n,
                          size_t start, size_t *ms, size_t *me, bool *found) {
    pcre2_code *re = c->t->re[level];
    /* pcre2_jit_match skips pcre2_match's argument checks and dispatch,
     * which cost 12% of encode instructions (callgrind, 1 MB of code and
     * prose): there is one call per piece */
    int (*matchfn)(const pcre2_code *, PCRE2_SPTR, PCRE2_SIZE, PCRE2_SIZE, uint32_t,
                   pcre2_match_data *, pcre2_match_context *) =
        c->t->re_jit[level] ? pcre2_jit_match : pcre2_match;
    int rc = matchfn(re, (PCRE2_SPTR)s, n, start, 0, c->md, c->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !c->jstack) {
        c->mctx = pcre2_match_context_create(NULL);
        c->jstack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, NULL);
        if (!c->mctx || !c->jstack) return TR_ERR_NOMEM;
        pcre2_jit_stack_assign(c->mctx, NULL, c->jstack);
        rc = matchfn(re, (PCRE2_SPTR)s, n, start, 0, c->md, c->mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
        *found = false;
        return TR_OK;
    }
    if (rc == PCRE2_ERROR_NOMEMORY) return TR_ERR_NOMEM;
    if (rc < 0) return TR_ERR_LIMIT; /* match/depth/heap limits: hostile input */
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0];
    *me = ov[1];
    /* none of the regexes can match the empty string; if one ever did,
     * the rest of the piece is left whole rather than looping */
    *found = *me > *ms && *ms >= start && *me <= n;
    return TR_OK;
}

static tr_status piece(enc_ctx *c, const char *s, size_t n) {
    const tokenizer *t = c->t;
    if (c->fn) return c->fn(c->ud, s, n);
    if (t->pre->ignore_merges && n > 1) {
        /* llama3-style: a piece that is a token as a whole is that token */
        size_t need = 2 * n; /* byte-level symbols are 1 or 2 UTF-8 bytes */
        if (need > c->enc_cap) {
            uint8_t *e = realloc(c->enc, need);
            if (!e) return TR_ERR_NOMEM;
            c->enc = e;
            c->enc_cap = need;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t cp = tr_tokenizer_byte_to_cp((uint8_t)s[i]);
            if (cp < 0x80) {
                c->enc[k++] = (uint8_t)cp;
            } else {
                c->enc[k++] = (uint8_t)(0xC0 | (cp >> 6));
                c->enc[k++] = (uint8_t)(0x80 | (cp & 0x3F));
            }
        }
        int32_t id = tr_tokenizer_text_find(t, (const char *)c->enc, k);
        if (id >= 0) return tr_tokenizer_ids_push(c->out, id);
    }
    if (n >= 2 && n <= t->max_token_len) {
        int32_t id = tr_tokenizer_whole_find(t, (const uint8_t *)s, n);
        if (id >= 0) return tr_tokenizer_ids_push(c->out, id);
    }
    return bpe_word(t, &c->bpe, (const uint8_t *)s, n, 0, c->out);
}

/* Splits s[0..n) with regex `level`: every match and every gap between
 * matches goes on to the next level (the piece is the next regex's whole
 * subject, so its lookaheads stop at the piece's end). */
static tr_status split(enc_ctx *c, int level, const char *s, size_t n) {
    if (n == 0) return TR_OK;
    if (level >= c->t->n_re) return piece(c, s, n);
    size_t start = 0;
    tr_status st;
    while (start < n) {
        size_t ms, me;
        bool found;
        if ((st = re_match(c, level, s, n, start, &ms, &me, &found))) return st;
        if (!found) break;
        if (ms > start && (st = split(c, level + 1, s + start, ms - start))) return st;
        if ((st = split(c, level + 1, s + ms, me - ms))) return st;
        start = me;
    }
    return start < n ? split(c, level + 1, s + start, n - start) : TR_OK;
}

tr_status tr_tokenizer_pretokenize(const tokenizer *t, const char *text, size_t len,
                                tokenizer_piece_fn fn, void *ud) {
    if (!t || !fn || (!text && len)) return TR_ERR_INVALID_ARG;
    enc_ctx c;
    tr_status st = ctx_init(&c, t);
    if (!st) {
        c.fn = fn;
        c.ud = ud;
        st = split(&c, 0, text, len);
    }
    ctx_free(&c);
    return st;
}

/* ---- special tokens ---- */

typedef struct frag {
    size_t off, len;
    int32_t id; /* >= 0: a special token; -1: raw text */
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static tr_status frags_push(frags *a, size_t off, size_t len, int32_t id) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        frag *v = realloc(a->v, nc * sizeof *v);
        if (!v) return TR_ERR_NOMEM;
        a->v = v;
        a->cap = nc;
    }
    a->v[a->n++] = (frag){off, len, id};
    return TR_OK;
}

static bool eligible(const tokenizer *t, int32_t id, bool parse_special) {
    uint8_t ty = t->type[id];
    if (ty == TOKENIZER_TYPE_USER_DEFINED) return true;
    return parse_special && (ty == TOKENIZER_TYPE_CONTROL || ty == TOKENIZER_TYPE_UNKNOWN);
}

/* Marks in `present` (a bitset over ids) the eligible special tokens whose
 * text occurs in text; returns how many distinct ones. */
static size_t find_present(const tokenizer *t, const char *text, size_t len,
                           bool parse_special, uint8_t *present) {
    size_t count = 0;
    for (size_t p = 0; p < len; p++) {
        uint8_t b = (uint8_t)text[p];
        if (!(t->special_first[b >> 3] & (1u << (b & 7)))) continue;
        for (int32_t k = 0; k < t->n_special_lens; k++) {
            size_t l = t->special_lens[k];
            if (l > len - p) continue;
            int32_t id = tr_tokenizer_text_find(t, text + p, l);
            if (id < 0 || !eligible(t, id, parse_special)) continue;
            if (!(present[id >> 3] & (1u << (id & 7)))) {
                present[id >> 3] |= (uint8_t)(1u << (id & 7));
                count++;
            }
        }
    }
    return count;
}

/* Splits the raw fragments of *cur at every occurrence of special id. */
static tr_status partition_one(const tokenizer *t, const char *text, int32_t id,
                               frags *cur, frags *nxt) {
    const char *tok = t->text_blob + t->text_off[id];
    size_t tl = t->text_off[id + 1] - t->text_off[id];
    tr_status st;
    nxt->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        frag f = cur->v[i];
        if (f.id >= 0) {
            if ((st = frags_push(nxt, f.off, f.len, f.id))) return st;
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        while (pos < end) {
            const char *m = memmem(text + pos, end - pos, tok, tl);
            if (!m) break;
            size_t mp = (size_t)(m - text);
            if (mp > pos && (st = frags_push(nxt, pos, mp - pos, -1))) return st;
            if ((st = frags_push(nxt, mp, tl, id))) return st;
            pos = mp + tl;
        }
        if (pos < end && (st = frags_push(nxt, pos, end - pos, -1))) return st;
    }
    frags tmp = *cur;
    *cur = *nxt;
    *nxt = tmp;
    return TR_OK;
}

tr_status tr_tokenizer_encode(const tokenizer *t, const char *text, size_t len,
                           bool parse_special, int32_t **ids, size_t *n_ids) {
    if (!t || !ids || !n_ids || (!text && len)) return TR_ERR_INVALID_ARG;
    tokenizer_ids out = {0};
    frags cur = {0}, nxt = {0};
    uint8_t *present = NULL;
    enc_ctx c;
    tr_status st = ctx_init(&c, t);
    if (st) goto done;
    c.out = &out;
    /* most text encodes to fewer ids than len / 3 bytes; grows if not */
    out.cap = len / 3 + 16;
    out.v = malloc(out.cap * sizeof *out.v);
    if (!out.v) {
        st = TR_ERR_NOMEM;
        goto done;
    }
    if ((st = frags_push(&cur, 0, len, -1))) goto done;
    if (t->n_specials && len) {
        present = calloc((size_t)t->n_vocab / 8 + 1, 1);
        if (!present) {
            st = TR_ERR_NOMEM;
            goto done;
        }
        if (find_present(t, text, len, parse_special, present)) {
            for (int32_t i = 0; i < t->n_specials; i++) {
                int32_t id = t->specials[i];
                if (!(present[id >> 3] & (1u << (id & 7)))) continue;
                if ((st = partition_one(t, text, id, &cur, &nxt))) goto done;
            }
        }
    }
    /* SPM: a fragment at the start or after a special token gets the
     * space prefix (when the vocabulary asks for it) */
    bool after_special = true;
    for (size_t i = 0; i < cur.n; i++) {
        frag f = cur.v[i];
        if (f.id >= 0)
            st = tr_tokenizer_ids_push(&out, f.id);
        else if (t->kind == TOKENIZER_KIND_SPM)
            st = tr_tokenizer_spm_encode(t, &c.spm, text + f.off, f.len,
                                         t->add_space_prefix && after_special, &out);
        else
            st = split(&c, 0, text + f.off, f.len);
        if (st) goto done;
        after_special = f.id >= 0;
    }
done:
    ctx_free(&c);
    free(cur.v);
    free(nxt.v);
    free(present);
    if (st) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n_ids = out.n;
    return TR_OK;
}
