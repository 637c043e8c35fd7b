/* vocab.c — a vocabulary's tokens as bytes, and their byte trie.
 *
 * Layering: grammar/mask (mask.h; the public side in grammar.h); built
 * once per vocabulary by whoever owns the tokenizer (the engine), then
 * shared read-only by every grammar and matcher (reference counted;
 * immutable after tr_grammar_vocab_new).
 *
 * The trie (layout drawn in mask.h) is built from the tokens
 * sorted bytewise: consecutive sorted tokens share their longest common
 * prefix, so each token adds only the nodes past that prefix, and nodes
 * come out in depth-first preorder for free. A node's `next` (end of its
 * subtree) is known when the node is popped off the current path. Sorting
 * 49,152 tokens and building takes a few milliseconds; the trie has about
 * as many nodes as the vocabulary has bytes past shared prefixes
 * (SmolLM2: see tr_grammar_vocab_check's test for the figure).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/mask/mask.h"

static atomic_uint_fast64_t g_next_uid = 1;

typedef struct tok_ref {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tok_ref;

static int cmp_tok(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void vocab_destroy(grammar_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->offs);
    free(v->flags);
    free(v->eog);
    free(v->trie.byte);
    free(v->trie.depth);
    free(v->trie.tok);
    free(v->trie.next);
    free(v->trie.check);
    free(v->trie.cbits);
    free(v->trie.ctok_lo);
    free(v->trie.ctok_hi);
    free(v->trie.cheight);
    free(v->trie.ptoks);
    free(v->trie.plen);
    free(v->trie.pfirst);
    free(v->trie_bits);
    free(v->ws_lead_ids);
    free(v->ws_lead_len);
    for (uint32_t c = 0; v->trie.cmask && c < v->trie.n_checks; c++) free(v->trie.cmask[c]);
    free(v->trie.cmask);
    free(v->dups);
    gvocab_ext *ext = atomic_load_explicit(&v->rcache, memory_order_acquire);
    if (ext) ext->free(ext);
    ext = atomic_load_explicit(&v->qcache, memory_order_acquire);
    if (ext) ext->free(ext);
    free(v);
}

/* Marks asc[i] = the subtree of node i holds only ASCII bytes (reverse
 * preorder: children are decided before their parent). */
static void ascii_subtrees(const gtrie *tr, uint8_t *asc) {
    asc[0] = 0;
    for (uint32_t i = tr->n_nodes; i-- > 1;) {
        bool ok = tr->byte[i] < 0x80;
        for (uint32_t c = i + 1; ok && c < tr->next[i]; c = tr->next[c])
            ok = asc[c];
        asc[i] = ok;
    }
}

static bool is_check(const gtrie *tr, const uint8_t *asc, uint32_t i) {
    return asc[i] && tr->next[i] - i >= GTRIE_CHECK_MIN;
}

static int cmp_size_desc(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] > y[0] ? -1 : x[0] < y[0];
}

/* Masks of the biggest check nodes (gtrie.cmask). */
static tr_status check_masks(grammar_vocab *v) {
    gtrie *tr = &v->trie;
    tr->cmask = calloc(tr->n_checks ? tr->n_checks : 1, sizeof *tr->cmask);
    uint32_t(*by)[2] = malloc((tr->n_checks ? tr->n_checks : 1) * sizeof *by);
    if (!tr->cmask || !by) {
        free(by);
        return TR_ERR_NOMEM;
    }
    for (uint32_t c = 0; c < tr->n_checks; c++)
        by[c][0] = tr->ctok_hi[c] - tr->ctok_lo[c], by[c][1] = c;
    qsort(by, tr->n_checks, sizeof *by, cmp_size_desc);
    size_t bytes = v->n_words * sizeof(uint64_t), used = 0;
    for (uint32_t i = 0; i < tr->n_checks; i++) {
        if (by[i][0] < v->n_words / 4 || used + bytes > GTRIE_CMASK_BYTES) break;
        uint64_t *m = calloc(v->n_words, sizeof *m);
        if (!m) {
            free(by);
            return TR_ERR_NOMEM;
        }
        uint32_t c = by[i][1];
        for (uint32_t k = tr->ctok_lo[c]; k < tr->ctok_hi[c]; k++)
            m[tr->ptoks[k] >> 6] |= 1ull << (tr->ptoks[k] & 63);
        tr->cmask[c] = m;
        used += bytes;
    }
    free(by);
    return TR_OK;
}

/* The length of the whitespace run that starts token id. */
static uint32_t ws_lead(const grammar_vocab *v, int32_t id) {
    const uint8_t *p = v->bytes + v->offs[id];
    size_t len = (size_t)(v->offs[id + 1] - v->offs[id]);
    uint32_t L = 0;
    while (L < len && tr_is_json_ws(p[L])) L++;
    return L;
}

/* The whitespace-led tokens of the trie's np, longest run first (a
 * counting sort: start[L] is where the tokens of run L begin). */
static tr_status ws_leads(grammar_vocab *v, uint32_t np) {
    const gtrie *tr = &v->trie;
    uint32_t n = 0, max = 0;
    for (uint32_t k = 0; k < np; k++) {
        uint32_t L = ws_lead(v, (int32_t)tr->ptoks[k]);
        n += L > 0;
        max = L > max ? L : max;
    }
    v->n_ws_lead = n;
    if (!n) return TR_OK;
    v->ws_lead_ids = malloc((size_t)n * sizeof *v->ws_lead_ids);
    v->ws_lead_len = malloc((size_t)n * sizeof *v->ws_lead_len);
    uint32_t *start = calloc((size_t)max + 2, sizeof *start);
    if (!v->ws_lead_ids || !v->ws_lead_len || !start) {
        free(start);
        return TR_ERR_NOMEM;
    }
    for (uint32_t k = 0; k < np; k++) start[ws_lead(v, (int32_t)tr->ptoks[k])]++;
    for (uint32_t L = max, at = 0; L >= 1; L--) {
        uint32_t c = start[L];
        start[L] = at;
        at += c;
    }
    for (uint32_t k = 0; k < np; k++) {
        int32_t id = (int32_t)tr->ptoks[k];
        uint32_t L = ws_lead(v, id);
        if (!L) continue;
        v->ws_lead_ids[start[L]] = id;
        v->ws_lead_len[start[L]++] = L;
    }
    free(start);
    return TR_OK;
}

/* Finds the check nodes and the preorder token list (gtrie). */
static tr_status build_checks(grammar_vocab *v) {
    gtrie *tr = &v->trie;
    uint32_t n = tr->n_nodes;
    const uint32_t none = (uint32_t)v->n_vocab;
    uint8_t *asc = malloc(n);
    uint32_t *pcount = malloc(((size_t)n + 1) * sizeof *pcount);
    tr->ptoks = malloc((size_t)n * sizeof *tr->ptoks);
    tr->plen = malloc((size_t)n * sizeof *tr->plen);
    if (!asc || !pcount || !tr->ptoks || !tr->plen) {
        free(asc), free(pcount);
        return TR_ERR_NOMEM; /* ptoks is freed with v */
    }
    ascii_subtrees(tr, asc);
    uint32_t nc = 0, np = 0;
    for (uint32_t i = 0; i < n; i++) {
        pcount[i] = np;
        if (tr->tok[i] != none) {
            tr->plen[np] = tr->depth[i];
            tr->ptoks[np++] = tr->tok[i];
        }
        nc += is_check(tr, asc, i);
    }
    pcount[n] = np;
    tr->check = malloc((nc ? nc : 1) * sizeof *tr->check);
    tr->cbits = calloc(nc ? nc : 1, sizeof *tr->cbits);
    tr->ctok_lo = malloc((nc ? nc : 1) * sizeof *tr->ctok_lo);
    tr->ctok_hi = malloc((nc ? nc : 1) * sizeof *tr->ctok_hi);
    tr->cheight = calloc(nc ? nc : 1, sizeof *tr->cheight);
    if (!tr->check || !tr->cbits || !tr->ctok_lo || !tr->ctok_hi ||
        !tr->cheight) {
        free(asc), free(pcount);
        return TR_ERR_NOMEM;
    }
    uint32_t c = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!is_check(tr, asc, i)) continue;
        tr->check[c] = i;
        tr->ctok_lo[c] = pcount[i];
        tr->ctok_hi[c] = pcount[tr->next[i]];
        for (uint32_t j = i; j < tr->next[i]; j++) {
            tr->cbits[c][tr->byte[j] >> 6] |= 1ull << (tr->byte[j] & 63);
            uint32_t h = (uint32_t)tr->depth[j] - tr->depth[i] + 1;
            if (h > tr->cheight[c]) tr->cheight[c] = (uint16_t)h;
        }
        c++;
    }
    tr->n_checks = nc;
    free(asc);
    tr->pfirst = pcount; /* kept: slices of ptoks per node */
    uint32_t per_byte[256] = {0};
    for (uint32_t j = 1; j < n; j = tr->next[j]) {
        tr->root[tr->byte[j]] = j;
        per_byte[tr->byte[j]] = pcount[tr->next[j]] - pcount[j];
    }
    for (uint32_t b = 0, ck = 0; b < 256; b++) {
        tr->root_cum[b + 1] = tr->root_cum[b] + per_byte[b];
        if (!tr->root[b]) continue;
        tr->root_bits[b >> 6] |= 1ull << (b & 63);
        while (ck < nc && tr->check[ck] < tr->root[b]) ck++;
        tr->root_ck[b] = ck;
    }
    if (check_masks(v) != TR_OK) return TR_ERR_NOMEM;
    /* every token the trie holds, as a mask */
    v->trie_bits = calloc(v->n_words + 1, sizeof *v->trie_bits);
    if (!v->trie_bits) return TR_ERR_NOMEM;
    for (uint32_t k = 0; k < np; k++)
        v->trie_bits[tr->ptoks[k] >> 6] |= 1ull << (tr->ptoks[k] & 63);
    return ws_leads(v, np);
}

static tr_status build_trie(grammar_vocab *v) {
    int32_t n = v->n_vocab;
    tok_ref *refs = malloc((size_t)n * sizeof *refs);
    if (!refs) return TR_ERR_NOMEM;
    uint32_t nt = 0;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t len = v->offs[i + 1] - v->offs[i];
        if (len == 0 || (v->flags[i] & (GVOCAB_SPECIAL | GVOCAB_EOG))) continue;
        refs[nt].p = v->bytes + v->offs[i];
        refs[nt].len = (uint32_t)len;
        refs[nt].id = i;
        nt++;
        total += len;
    }
    qsort(refs, nt, sizeof *refs, cmp_tok);
    if (total + 1 > UINT32_MAX) {
        free(refs);
        return TR_ERR_LIMIT;
    }
    size_t cap = (size_t)total + 1;
    gtrie *tr = &v->trie;
    tr->byte = malloc(cap);
    tr->depth = malloc(cap * sizeof *tr->depth);
    tr->tok = malloc(cap * sizeof *tr->tok);
    tr->next = malloc(cap * sizeof *tr->next);
    uint32_t *path = malloc(((size_t)65536 + 1) * sizeof *path);
    int32_t(*dups)[2] = malloc((size_t)(nt ? nt : 1) * sizeof *dups);
    if (!tr->byte || !tr->depth || !tr->tok || !tr->next || !path || !dups) {
        free(refs), free(path), free(dups);
        return TR_ERR_NOMEM; /* the trie arrays are freed with v */
    }
    const uint32_t none = (uint32_t)n;
    uint32_t nn = 1, nd = 0, depth = 0, max_len = 0;
    tr->byte[0] = 0;
    tr->depth[0] = 0;
    tr->tok[0] = none;
    path[0] = 0;
    const tok_ref *prev = NULL;
    for (uint32_t t = 0; t < nt; t++) {
        const tok_ref *r = &refs[t];
        uint32_t lcp = 0;
        if (prev) {
            uint32_t m = prev->len < r->len ? prev->len : r->len;
            while (lcp < m && prev->p[lcp] == r->p[lcp]) lcp++;
            if (lcp == r->len && lcp == prev->len) {
                /* same bytes as an earlier id: copied after each walk */
                dups[nd][0] = (int32_t)tr->tok[path[depth]];
                dups[nd][1] = r->id;
                nd++;
                continue;
            }
        }
        while (depth > lcp) tr->next[path[depth--]] = nn;
        for (uint32_t j = lcp; j < r->len; j++) {
            tr->byte[nn] = r->p[j];
            tr->depth[nn] = (uint16_t)(j + 1);
            tr->tok[nn] = none;
            path[++depth] = nn++;
        }
        tr->tok[path[depth]] = (uint32_t)r->id;
        if (r->len > max_len) max_len = r->len;
        prev = r;
    }
    while (depth > 0) tr->next[path[depth--]] = nn;
    tr->next[0] = nn;
    tr->n_nodes = nn;
    free(path);
    free(refs);
    /* give back the slack (total bytes overestimates the node count) */
    void *q;
    if ((q = realloc(tr->byte, nn))) tr->byte = q;
    if ((q = realloc(tr->depth, (size_t)nn * sizeof *tr->depth))) tr->depth = q;
    if ((q = realloc(tr->tok, (size_t)nn * sizeof *tr->tok))) tr->tok = q;
    if ((q = realloc(tr->next, (size_t)nn * sizeof *tr->next))) tr->next = q;
    v->dups = dups;
    v->n_dups = nd;
    v->max_len = max_len;
    return build_checks(v);
}

tr_status tr_grammar_vocab_new(const grammar_vocab_desc *desc,
                            grammar_vocab **out, tr_diag *diag) {
    if (!desc || !out || desc->n_vocab <= 0 || !desc->token_bytes ||
        !desc->token_lens || (desc->n_eog > 0 && !desc->eog_ids))
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "vocabulary: missing arrays or n_vocab <= 0");
    int32_t n = desc->n_vocab;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t len = desc->token_lens[i];
        if (len > 65535)
            return tr_diag_set(diag, TR_ERR_LIMIT, (uint64_t)i,
                               "vocabulary: token %d is %u bytes (max 65535)",
                               i, len);
        if (len > 0 && !desc->token_bytes[i])
            return tr_diag_set(diag, TR_ERR_INVALID_ARG, (uint64_t)i,
                               "vocabulary: token %d has NULL bytes", i);
        total += len; /* <= 2^31 * 65535: no overflow in 64 bits */
    }
    if (total > SIZE_MAX / 2 || total >= UINT32_MAX)
        return tr_diag_set(diag, TR_ERR_LIMIT, 0,
                           "vocabulary: %llu token bytes in total is too many",
                           (unsigned long long)total);
    for (size_t i = 0; i < desc->n_eog; i++)
        if (desc->eog_ids[i] < 0 || desc->eog_ids[i] >= n)
            return tr_diag_set(diag, TR_ERR_INVALID_ARG, (uint64_t)i,
                               "vocabulary: EOG id %d out of range",
                               desc->eog_ids[i]);
    grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    atomic_init(&v->rcache, NULL);
    atomic_init(&v->qcache, NULL);
    v->n_vocab = n;
    v->n_words = ((size_t)n + 63) / 64;
    v->bytes = malloc(total ? (size_t)total : 1);
    v->offs = malloc(((size_t)n + 1) * sizeof *v->offs);
    v->flags = calloc((size_t)n, 1);
    v->eog = malloc((desc->n_eog ? desc->n_eog : 1) * sizeof *v->eog);
    if (!v->bytes || !v->offs || !v->flags || !v->eog) {
        vocab_destroy(v);
        return tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    }
    uint64_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        v->offs[i] = o;
        if (desc->token_lens[i])
            memcpy(v->bytes + o, desc->token_bytes[i], desc->token_lens[i]);
        o += desc->token_lens[i];
        if (desc->is_special && desc->is_special[i])
            v->flags[i] |= GVOCAB_SPECIAL;
    }
    v->offs[n] = o;
    /* EOG ids, deduplicated */
    for (size_t i = 0; i < desc->n_eog; i++) {
        int32_t id = desc->eog_ids[i];
        if (v->flags[id] & GVOCAB_EOG) continue;
        v->flags[id] |= GVOCAB_EOG;
        v->eog[v->n_eog++] = id;
    }
    tr_status st = build_trie(v);
    if (st) {
        vocab_destroy(v);
        return tr_diag_set(diag, st, 0, "vocabulary: cannot build the trie: %s",
                           tr_status_message(st));
    }
    atomic_init(&v->refs, 1);
    v->uid = atomic_fetch_add(&g_next_uid, 1);
    *out = v;
    return TR_OK;
}

grammar_vocab *tr_grammar_vocab_ref(grammar_vocab *v) {
    if (v) atomic_fetch_add_explicit(&v->refs, 1, memory_order_relaxed);
    return v;
}

void tr_grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    if (atomic_fetch_sub_explicit(&v->refs, 1, memory_order_acq_rel) == 1)
        vocab_destroy(v);
}

int32_t tr_grammar_vocab_n_vocab(const grammar_vocab *v) { return v->n_vocab; }

size_t tr_grammar_vocab_mask_words(const grammar_vocab *v) { return v->n_words; }

size_t tr_grammar_mask_count(const uint64_t *mask, size_t n_words) {
    size_t n = 0;
    for (size_t w = 0; w < n_words; w++) n += (size_t)__builtin_popcountll(mask[w]);
    return n;
}

int32_t tr_grammar_mask_nth(const uint64_t *mask, size_t n_words, size_t k) {
    for (size_t w = 0; w < n_words; w++) {
        size_t c = (size_t)__builtin_popcountll(mask[w]);
        if (k >= c) {
            k -= c;
            continue;
        }
        uint64_t x = mask[w];
        for (size_t j = 0; j < k; j++) x &= x - 1; /* drop the k lowest bits */
        return (int32_t)(w * 64 + (size_t)__builtin_ctzll(x));
    }
    return -1;
}

const uint8_t *tr_grammar_vocab_token_bytes(const grammar_vocab *v, int32_t id,
                                         size_t *len) {
    if (id < 0 || id >= v->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = (size_t)(v->offs[id + 1] - v->offs[id]);
    return v->bytes + v->offs[id];
}

bool tr_grammar_vocab_is_eog(const grammar_vocab *v, int32_t id) {
    return id >= 0 && id < v->n_vocab && (v->flags[id] & GVOCAB_EOG);
}

bool tr_grammar_vocab_is_special(const grammar_vocab *v, int32_t id) {
    return id >= 0 && id < v->n_vocab && (v->flags[id] & GVOCAB_SPECIAL);
}

tr_status tr_grammar_vocab_check(const grammar_vocab *v) {
    if (!v || v->n_vocab <= 0 || v->n_words != ((size_t)v->n_vocab + 63) / 64)
        return TR_ERR_INTERNAL;
    const gtrie *tr = &v->trie;
    const uint32_t none = (uint32_t)v->n_vocab;
    if (tr->n_nodes < 1 || tr->depth[0] != 0 || tr->tok[0] != none ||
        tr->next[0] != tr->n_nodes)
        return TR_ERR_INTERNAL;
    /* seen[id]: 1 in trie, 2 as a duplicate */
    uint8_t *seen = calloc((size_t)v->n_vocab, 1);
    uint32_t *path = calloc((size_t)v->max_len + 2, sizeof *path);
    uint8_t *pre = malloc((size_t)v->max_len + 1);
    if (!seen || !path || !pre) {
        free(seen), free(path), free(pre);
        return TR_ERR_NOMEM;
    }
    tr_status st = TR_OK;
    for (uint32_t i = 1; i < tr->n_nodes && st == TR_OK; i++) {
        uint32_t d = tr->depth[i];
        if (d < 1 || d > v->max_len) {
            st = TR_ERR_INTERNAL;
            break;
        }
        uint32_t parent = path[d - 1];
        /* the parent is open (i inside its subtree) and one level up */
        if (tr->depth[parent] != d - 1 || i >= tr->next[parent] ||
            tr->next[i] <= i || tr->next[i] > tr->next[parent])
            st = TR_ERR_INTERNAL;
        /* the previous sibling, if any, ended right here with a smaller
         * byte (children sorted, no byte twice) */
        uint32_t sib = path[d];
        if (sib > parent && (tr->next[sib] != i || tr->byte[sib] >= tr->byte[i]))
            st = TR_ERR_INTERNAL;
        path[d] = i;
        pre[d - 1] = tr->byte[i];
        uint32_t tok = tr->tok[i];
        if (tok != none) {
            size_t len;
            const uint8_t *b = tr_grammar_vocab_token_bytes(v, (int32_t)tok, &len);
            if (tok > none || seen[tok] || len != d || memcmp(b, pre, d) != 0 ||
                (v->flags[tok] & (GVOCAB_SPECIAL | GVOCAB_EOG)))
                st = TR_ERR_INTERNAL;
            else
                seen[tok] = 1;
        } else if (tr->next[i] == i + 1) {
            st = TR_ERR_INTERNAL; /* a leaf without a token */
        }
    }
    for (uint32_t i = 0; i < v->n_dups && st == TR_OK; i++) {
        int32_t r = v->dups[i][0], d = v->dups[i][1];
        size_t l1, l2;
        const uint8_t *b1 = tr_grammar_vocab_token_bytes(v, r, &l1);
        const uint8_t *b2 = tr_grammar_vocab_token_bytes(v, d, &l2);
        if (!b1 || !b2 || seen[r] != 1 || seen[d] || l1 != l2 ||
            memcmp(b1, b2, l1) != 0)
            st = TR_ERR_INTERNAL;
        else
            seen[d] = 2;
    }
    for (int32_t id = 0; id < v->n_vocab && st == TR_OK; id++) {
        size_t len;
        tr_grammar_vocab_token_bytes(v, id, &len);
        bool in = len > 0 && !(v->flags[id] & (GVOCAB_SPECIAL | GVOCAB_EOG));
        if (in != (seen[id] != 0)) st = TR_ERR_INTERNAL;
    }
    /* check nodes: exactly the qualifying nodes, in preorder, with the
     * byte sets and token slices of their subtrees */
    uint8_t *asc = st == TR_OK ? malloc(tr->n_nodes) : NULL;
    if (st == TR_OK && !asc) st = TR_ERR_NOMEM;
    if (asc) ascii_subtrees(tr, asc);
    uint32_t c = 0, np = 0;
    for (uint32_t i = 0; i < tr->n_nodes && st == TR_OK; i++) {
        if (tr->tok[i] != none &&
            (np >= tr->n_nodes || tr->plen[np] != tr->depth[i] ||
             tr->ptoks[np++] != tr->tok[i]))
            st = TR_ERR_INTERNAL;
        if (!is_check(tr, asc, i)) continue;
        if (c >= tr->n_checks || tr->check[c] != i) {
            st = TR_ERR_INTERNAL;
            break;
        }
        uint64_t bits[2] = {0, 0};
        uint32_t k = tr->ctok_lo[c], h = 0;
        for (uint32_t j = i; j < tr->next[i] && st == TR_OK; j++) {
            bits[tr->byte[j] >> 6 & 1] |= 1ull << (tr->byte[j] & 63);
            if ((uint32_t)tr->depth[j] - tr->depth[i] + 1 > h)
                h = (uint32_t)tr->depth[j] - tr->depth[i] + 1;
            if (tr->tok[j] != none &&
                (k >= tr->ctok_hi[c] || tr->ptoks[k++] != tr->tok[j]))
                st = TR_ERR_INTERNAL;
        }
        if (k != tr->ctok_hi[c] || bits[0] != tr->cbits[c][0] ||
            bits[1] != tr->cbits[c][1] || h != tr->cheight[c])
            st = TR_ERR_INTERNAL;
        c++;
    }
    if (st == TR_OK && c != tr->n_checks) st = TR_ERR_INTERNAL;
    /* the root's children by byte, each with its token count */
    uint32_t n_root = 0, n_listed = 0;
    for (uint32_t j = 1; j < tr->n_nodes && st == TR_OK; j = tr->next[j]) n_root++;
    for (uint32_t b = 0; b < 256 && st == TR_OK; b++) {
        uint32_t j = tr->root[b], toks = tr->root_cum[b + 1] - tr->root_cum[b];
        if (tr->root_cum[b + 1] < tr->root_cum[b]) st = TR_ERR_INTERNAL;
        if (!j) {
            if (toks || (tr->root_bits[b >> 6] >> (b & 63) & 1)) st = TR_ERR_INTERNAL;
            continue;
        }
        n_listed++;
        uint32_t ck = tr->root_ck[b];
        if (j >= tr->n_nodes || tr->depth[j] != 1 || tr->byte[j] != b ||
            toks != tr->pfirst[tr->next[j]] - tr->pfirst[j] ||
            !(tr->root_bits[b >> 6] >> (b & 63) & 1) || ck > tr->n_checks ||
            (ck < tr->n_checks && tr->check[ck] < j) || (ck > 0 && tr->check[ck - 1] >= j))
            st = TR_ERR_INTERNAL;
    }
    if (st == TR_OK && (n_listed != n_root || tr->root_cum[0] != 0 ||
                        tr->root_cum[256] != tr->pfirst[tr->n_nodes]))
        st = TR_ERR_INTERNAL;
    free(asc);
    free(seen), free(path), free(pre);
    return st;
}
