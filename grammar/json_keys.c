/* json_keys.c — see json_keys_internal.h.
 *
 * One lexer (step()) runs in two settings through a small table of
 * callbacks: committing (the tracker's own frames and keys change) and
 * checking (a virtual view: the committed frames read-only, frames and
 * keys the checked bytes add kept in a few local slots, so a check never
 * copies or changes the tracker). Keys of an object are contiguous in
 * the committed key list: an inner object's keys come after its parent's
 * and are dropped when it closes, so object d owns [frame[d].first,
 * frame[d + 1].first), the top one up to the end.
 *
 * Rollback replays the kept text up to the earlier length: JSON outputs
 * are short, and rollback is rare (a rejected draft, a jump-forward
 * re-encoding).
 */
#include "grammar/json_keys_internal.h"

#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

enum { OUT, STR, ESC, UHEX };

/* Where tracking starts (json_keys_internal.h, tr_gkeys_new's `after`):
 * the literal and its failure function (KMP), constant after creation. */
typedef struct kgate {
    uint8_t *lit;
    uint32_t len;
    uint32_t *fail; /* [len]: longest proper border of lit[0..i] */
} kgate;

/* The lexer's scalars (copied by a check). */
typedef struct klex {
    const kgate *gate; /* NULL: every byte is JSON */
    bool waiting;      /* gate: looking for the literal (bytes are not JSON) */
    uint32_t matched;  /* gate: bytes of the literal matched so far */
    uint8_t mode;
    bool key;        /* the open string is an object key */
    bool expect_key; /* the top object's next string is a key */
    uint8_t hex_n;
    uint32_t hex, hi; /* \uXXXX digits; a pending high surrogate (0: none) */
    uint64_t hash;    /* FNV-1a of the open key's decoded bytes */
} klex;

typedef struct kframe {
    uint8_t kind;   /* 'o' or 'a' */
    uint32_t first; /* its first key in the key list */
} kframe;

typedef struct kkey {
    uint64_t hash;
    uint32_t off, len; /* in kb */
} kkey;

struct gkeys {
    const grammar_vocab *v;
    kgate gate;
    klex lx;
    kframe *fr;
    uint32_t depth, fr_cap;
    kkey *keys;
    uint32_t n_keys, keys_cap;
    uint8_t *kb; /* key bytes; the open key's from cur_off */
    uint32_t kb_len, kb_cap, cur_off;
    bool off; /* out of memory: refuses nothing until reset */
    /* the text and, per remembered push, its length before it */
    uint8_t *txt;
    size_t txt_len, txt_cap;
    size_t *hist;
    uint32_t hist_cap, hist_head, hist_len;
    const struct kquotes *q; /* the vocabulary's (v->qcache) */
    const uint8_t *up;       /* unique-string array paths (borrowed from the
                                grammar; json_unique.c's records) */
    size_t up_len;
};

/* A vocabulary's tokens with a '"': ids, most quotes first, their quote
 * counts, and the same set as a mask. */
typedef struct kquotes {
    gvocab_ext ext;
    int32_t *id;
    uint8_t *n;
    uint32_t count;
    uint64_t *bits;
} kquotes;

typedef struct kops {
    uint8_t (*arr_kind)(void *c); /* 'u': the array opening here keeps its
                                     string items distinct; else 'a' */
    void (*push)(void *c, uint8_t kind);
    void (*pop)(void *c);
    uint8_t (*top)(void *c);
    void (*key_open)(void *c);
    void (*key_byte)(void *c, uint8_t b);
    bool (*key_end)(void *c, uint64_t hash); /* false: a duplicate */
} kops;

/* ---- the lexer ---- */

static void emit(klex *x, const kops *o, void *c, uint8_t b) {
    if (!x->key) return;
    x->hash = (x->hash ^ b) * FNV_PRIME;
    o->key_byte(c, b);
}

static void emit_cp(klex *x, const kops *o, void *c, uint32_t cp) {
    uint8_t u[4];
    int n;
    if (cp < 0x80) u[0] = (uint8_t)cp, n = 1;
    else if (cp < 0x800) u[0] = (uint8_t)(0xc0 | cp >> 6), n = 2;
    else if (cp < 0x10000) u[0] = (uint8_t)(0xe0 | cp >> 12), n = 3;
    else u[0] = (uint8_t)(0xf0 | cp >> 18), n = 4;
    for (int i = 1; i < n; i++) u[i] = (uint8_t)(0x80 | ((cp >> (6 * (n - 1 - i))) & 0x3f));
    for (int i = 0; i < n; i++) emit(x, o, c, u[i]);
}

static void flush_hi(klex *x, const kops *o, void *c) {
    if (x->hi) emit_cp(x, o, c, x->hi);
    x->hi = 0;
}

static uint32_t hexval(uint8_t b) {
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return 0; /* the grammar admits only hex digits here */
}

static void step_out(klex *x, const kops *o, void *c, uint8_t b) {
    switch (b) {
    case '{': o->push(c, 'o'); x->expect_key = true; break;
    case '[': {
        uint8_t kind = o->arr_kind(c);
        o->push(c, kind);
        x->expect_key = kind == 'u'; /* its items are kept like keys */
        break;
    }
    case '}': case ']': o->pop(c); x->expect_key = false; break;
    case ',': x->expect_key = o->top(c) == 'o' || o->top(c) == 'u'; break;
    case ':': x->expect_key = false; break;
    case '"':
        x->mode = STR;
        x->key = x->expect_key && (o->top(c) == 'o' || o->top(c) == 'u');
        x->expect_key = false;
        x->hi = 0;
        if (x->key) {
            x->hash = FNV_OFFSET;
            o->key_open(c);
        }
        break;
    default: break; /* numbers, literals, blanks */
    }
}

static void step_uhex(klex *x, const kops *o, void *c, uint8_t b) {
    x->hex = x->hex * 16 + hexval(b);
    if (++x->hex_n < 4) return;
    x->mode = STR;
    uint32_t cp = x->hex;
    if (cp >= 0xd800 && cp < 0xdc00) {
        flush_hi(x, o, c);
        x->hi = cp;
    } else if (cp >= 0xdc00 && cp < 0xe000 && x->hi) {
        cp = 0x10000 + ((x->hi - 0xd800) << 10) + (cp - 0xdc00);
        x->hi = 0;
        emit_cp(x, o, c, cp);
    } else {
        flush_hi(x, o, c);
        emit_cp(x, o, c, cp);
    }
}

/* One byte while looking for the gate's literal: on its last byte the
 * JSON value starts. */
static void step_gate(klex *x, uint8_t b) {
    const kgate *g = x->gate;
    uint32_t m = x->matched;
    while (m && g->lit[m] != b) m = g->fail[m - 1];
    if (g->lit[m] == b) m++;
    if (m == g->len) {
        x->waiting = false;
        m = 0;
    }
    x->matched = m;
}

/* One byte; false when it closes a duplicate key. */
static bool step(klex *x, const kops *o, void *c, uint8_t b) {
    if (x->waiting) {
        step_gate(x, b);
        return true;
    }
    switch (x->mode) {
    case OUT:
        step_out(x, o, c, b);
        /* a gated value ends where its outermost bracket closes */
        if (x->gate && (b == '}' || b == ']') && !o->top(c)) x->waiting = true;
        return true;
    case STR:
        if (b == '\\') {
            x->mode = ESC;
            return true;
        }
        flush_hi(x, o, c);
        if (b != '"') {
            emit(x, o, c, b);
            return true;
        }
        x->mode = OUT;
        return !x->key || o->key_end(c, x->hash);
    case ESC: {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        if (b == 'u') {
            x->mode = UHEX, x->hex = 0, x->hex_n = 0;
            return true;
        }
        const char *p = b ? strchr(from, b) : NULL;
        flush_hi(x, o, c);
        emit(x, o, c, p ? (uint8_t)to[p - from] : b);
        x->mode = STR;
        return true;
    }
    default:
        step_uhex(x, o, c, b);
        return true;
    }
}

/* ---- unique-string arrays (json_unique.c): the path of the array
 * opening now against the grammar's records ---- */

/* Frame i of the open ones: an item (array), or an object's current key
 * (its last; NULL when it has none). */
typedef struct kel {
    bool item;
    const uint8_t *key;
    uint32_t len;
} kel;

typedef kel (*frame_el_fn)(void *c, uint32_t i);

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether the open frames (depth of them, read by el) are one of the
 * recorded paths. */
static bool path_recorded(const uint8_t *up, size_t up_len, uint32_t depth, frame_el_fn el,
                          void *c) {
    size_t at = 0;
    while (at < up_len) {
        uint32_t n = up[at++];
        bool same = n == depth;
        for (uint32_t i = 0; i < n; i++) {
            uint8_t kind = up[at++];
            kel e = same ? el(c, i) : (kel){true, NULL, 0};
            if (kind == 'i') {
                same = same && e.item;
                continue;
            }
            /* 'k': this key; 'a': any key but the listed ones */
            uint32_t count = kind == 'a' ? rd_u32(up + at) : 1;
            if (kind == 'a') at += 4;
            bool listed = false;
            for (uint32_t j = 0; j < count; j++) {
                uint32_t len = rd_u32(up + at);
                listed = listed || (same && e.key && e.len == len &&
                                    (!len || !memcmp(e.key, up + at + 4, len)));
                at += 4 + len;
            }
            same = same && !e.item && e.key && listed == (kind == 'k');
        }
        if (same) return true;
    }
    return false;
}

/* ---- committing ---- */

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t size) {
    if (need <= *cap) return true;
    uint32_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

static void c_push(void *c, uint8_t kind) {
    gkeys *k = c;
    if (!grow((void **)&k->fr, &k->fr_cap, k->depth + 1, sizeof *k->fr)) {
        k->off = true;
        return;
    }
    k->fr[k->depth++] = (kframe){kind, k->n_keys};
}

static void c_pop(void *c) {
    gkeys *k = c;
    if (!k->depth) return;
    uint32_t first = k->fr[--k->depth].first;
    if (first < k->n_keys) k->kb_len = k->keys[first].off;
    k->n_keys = first;
}

static uint8_t c_top(void *c) {
    gkeys *k = c;
    return k->depth ? k->fr[k->depth - 1].kind : 0;
}

static void c_key_open(void *c) {
    gkeys *k = c;
    k->cur_off = k->kb_len;
}

static void c_key_byte(void *c, uint8_t b) {
    gkeys *k = c;
    if (!grow((void **)&k->kb, &k->kb_cap, k->kb_len + 1, 1)) {
        k->off = true;
        return;
    }
    k->kb[k->kb_len++] = b;
}

static bool c_key_end(void *c, uint64_t hash) {
    gkeys *k = c;
    if (!k->depth || !grow((void **)&k->keys, &k->keys_cap, k->n_keys + 1, sizeof *k->keys)) {
        k->off = !k->depth ? k->off : true;
        return true;
    }
    k->keys[k->n_keys++] = (kkey){hash, k->cur_off, k->kb_len - k->cur_off};
    return true;
}

/* Committed object frame i's last committed key (NULL key: none yet). */
static kel committed_key(const gkeys *k, uint32_t i) {
    uint32_t end = i + 1 < k->depth ? k->fr[i + 1].first : k->n_keys;
    if (end == k->fr[i].first) return (kel){false, NULL, 0};
    const kkey *last = &k->keys[end - 1];
    return (kel){false, k->kb + last->off, last->len};
}

static kel c_frame_el(void *c, uint32_t i) {
    gkeys *k = c;
    return k->fr[i].kind == 'o' ? committed_key(k, i) : (kel){true, NULL, 0};
}

static uint8_t c_arr_kind(void *c) {
    gkeys *k = c;
    return k->up_len && path_recorded(k->up, k->up_len, k->depth, c_frame_el, c) ? 'u' : 'a';
}

static const kops commit_ops = {c_arr_kind, c_push, c_pop, c_top,
                                c_key_open, c_key_byte, c_key_end};

/* ---- checking ---- */

#define V_MAX_FRAMES 64
#define V_MAX_KEYS 32
#define V_MAX_BYTES 512
#define V_LOCAL 0x80000000u /* frame tags at or above: local frames */

/* A key the checked bytes closed: its bytes in vcheck.kbuf. */
typedef struct vkey {
    uint32_t tag, off, len;
    uint64_t hash;
} vkey;

typedef struct vcheck {
    const gkeys *k;
    uint32_t cdepth;            /* committed frames still open */
    uint8_t lkind[V_MAX_FRAMES]; /* frames the bytes opened */
    uint32_t ldepth;
    bool prefix;                /* the open key began before these bytes */
    uint32_t kstart;            /* its local bytes from kbuf[kstart] */
    uint8_t kbuf[V_MAX_BYTES];
    uint32_t kb_len;
    vkey lk[V_MAX_KEYS];
    uint32_t n_lk;
    bool overflow; /* past the local slots: checks nothing more */
} vcheck;

static uint32_t v_tag(const vcheck *v) {
    if (v->ldepth) return V_LOCAL + v->ldepth - 1;
    return v->cdepth ? v->cdepth - 1 : UINT32_MAX;
}

/* Drops the local keys of the frame being closed (they are the last). */
static void v_drop_keys(vcheck *v, uint32_t tag) {
    while (v->n_lk && v->lk[v->n_lk - 1].tag == tag) v->n_lk--;
}

static void v_push(void *c, uint8_t kind) {
    vcheck *v = c;
    if (v->ldepth == V_MAX_FRAMES) {
        v->overflow = true;
        return;
    }
    v->lkind[v->ldepth++] = kind;
}

static void v_pop(void *c) {
    vcheck *v = c;
    uint32_t tag = v_tag(v);
    if (tag == UINT32_MAX) return;
    v_drop_keys(v, tag);
    if (v->ldepth)
        v->ldepth--;
    else
        v->cdepth--;
}

static uint8_t v_top(void *c) {
    vcheck *v = c;
    if (v->ldepth) return v->lkind[v->ldepth - 1];
    return v->cdepth ? v->k->fr[v->cdepth - 1].kind : 0;
}

static void v_key_open(void *c) {
    vcheck *v = c;
    v->prefix = false;
    v->kstart = v->kb_len;
}

static void v_key_byte(void *c, uint8_t b) {
    vcheck *v = c;
    if (v->kb_len == V_MAX_BYTES) {
        v->overflow = true;
        return;
    }
    v->kbuf[v->kb_len++] = b;
}

/* Whether stored bytes a[0..alen) equal p[0..plen) followed by s[0..slen). */
static bool eq2(const uint8_t *a, uint32_t alen, const uint8_t *p, uint32_t plen,
                const uint8_t *s, uint32_t slen) {
    return alen == plen + slen && (!plen || !memcmp(a, p, plen)) &&
           (!slen || !memcmp(a + plen, s, slen));
}

static bool v_key_end(void *c, uint64_t hash) {
    vcheck *v = c;
    const gkeys *k = v->k;
    uint32_t tag = v_tag(v);
    /* past the local slots (frames, keys, key bytes) these bytes are no
     * longer followed: a repeat within them may be missed, never a key
     * refused wrongly */
    if (v->overflow || tag == UINT32_MAX) return true;
    const uint8_t *p = v->prefix ? k->kb + k->cur_off : NULL;
    uint32_t plen = v->prefix ? k->kb_len - k->cur_off : 0;
    const uint8_t *s = v->kbuf + v->kstart;
    uint32_t slen = v->kb_len - v->kstart;
    v->prefix = false;
    if (tag < V_LOCAL) { /* a committed object: its stored keys */
        uint32_t end = tag + 1 < k->depth ? k->fr[tag + 1].first : k->n_keys;
        for (uint32_t i = k->fr[tag].first; i < end; i++)
            if (k->keys[i].hash == hash &&
                eq2(k->kb + k->keys[i].off, k->keys[i].len, p, plen, s, slen))
                return false;
    }
    for (uint32_t i = 0; i < v->n_lk; i++)
        if (v->lk[i].tag == tag && v->lk[i].hash == hash &&
            eq2(v->kbuf + v->lk[i].off, v->lk[i].len, p, plen, s, slen))
            return false;
    if (v->n_lk == V_MAX_KEYS || v->kb_len + plen + slen > V_MAX_BYTES) {
        v->overflow = true;
        return true;
    }
    vkey *n = &v->lk[v->n_lk++];
    *n = (vkey){tag, v->kstart, slen, hash};
    if (plen) { /* the key began before these bytes: keep it whole */
        n->off = v->kb_len;
        n->len = plen + slen;
        memcpy(v->kbuf + v->kb_len, p, plen);
        memmove(v->kbuf + v->kb_len + plen, s, slen);
        v->kb_len += plen + slen;
    }
    return true;
}

/* Frame i of the committed frames still open, then the local ones; an
 * object's current key is the last the checked bytes gave it, else its
 * last committed one. */
static kel v_frame_el(void *c, uint32_t i) {
    vcheck *v = c;
    const gkeys *k = v->k;
    uint32_t tag = i < v->cdepth ? i : V_LOCAL + (i - v->cdepth);
    uint8_t kind = i < v->cdepth ? k->fr[i].kind : v->lkind[i - v->cdepth];
    if (kind != 'o') return (kel){true, NULL, 0};
    for (uint32_t j = v->n_lk; j-- > 0;)
        if (v->lk[j].tag == tag) return (kel){false, v->kbuf + v->lk[j].off, v->lk[j].len};
    return tag >= V_LOCAL ? (kel){false, NULL, 0} : committed_key(k, i);
}

static uint8_t v_arr_kind(void *c) {
    vcheck *v = c;
    const gkeys *k = v->k;
    if (!k->up_len || v->overflow) return 'a';
    return path_recorded(k->up, k->up_len, v->cdepth + v->ldepth, v_frame_el, c) ? 'u' : 'a';
}

static const kops check_ops = {v_arr_kind, v_push, v_pop, v_top,
                               v_key_open, v_key_byte, v_key_end};

static void v_init(vcheck *v, const gkeys *k) {
    v->k = k;
    v->cdepth = k->depth;
    v->ldepth = 0;
    v->prefix = k->lx.mode != OUT && k->lx.key;
    v->kstart = 0;
    v->kb_len = 0;
    v->n_lk = 0;
    v->overflow = false;
}

/* How many of b[0..n) can be appended before a duplicate closes (n: all). */
static size_t check_run(const gkeys *k, const uint8_t *b, size_t n) {
    if (k->off) return n;
    vcheck v;
    v_init(&v, k);
    klex x = k->lx;
    for (size_t i = 0; i < n; i++)
        if (!step(&x, &check_ops, &v, b[i])) return i;
    return n;
}

bool tr_gkeys_would_dup(const gkeys *k, const uint8_t *b, size_t n) {
    return check_run(k, b, n) < n;
}

bool tr_gkeys_token_would_dup(const gkeys *k, int32_t id) {
    if (!(k->q->bits[id >> 6] >> (id & 63) & 1)) return false;
    const grammar_vocab *v = k->v;
    return tr_gkeys_would_dup(k, v->bytes + v->offs[id], (size_t)(v->offs[id + 1] - v->offs[id]));
}

size_t tr_gkeys_clean_prefix(const gkeys *k, const uint8_t *b, size_t n) {
    return check_run(k, b, n);
}

void tr_gkeys_filter_mask(const gkeys *k, uint64_t *mask) {
    if (k->off) return;
    /* quotes a token needs to close a repeated key: one inside a key,
     * three inside another string (close it, open and close a key), two
     * elsewhere; two more while no key is stored (the repeat must then
     * be of a key these bytes wrote) */
    uint32_t need = k->lx.mode == OUT ? 2 : k->lx.key ? 1 : 3;
    if (!k->n_keys) need += 2;
    const kquotes *q = k->q;
    /* few: 163 of SmolLM2's 49,152 tokens have a quote, 20 two or more */
    for (uint32_t i = 0; i < q->count && q->n[i] >= need; i++) {
        int32_t id = q->id[i];
        if ((mask[id >> 6] >> (id & 63) & 1) && tr_gkeys_token_would_dup(k, id))
            mask[id >> 6] &= ~(UINT64_C(1) << (id & 63));
    }
}

/* ---- text, rollback ---- */

static void clear(gkeys *k) {
    memset(&k->lx, 0, sizeof k->lx);
    k->lx.gate = k->gate.len ? &k->gate : NULL;
    k->lx.waiting = k->lx.gate != NULL;
    k->depth = k->n_keys = k->kb_len = k->cur_off = 0;
    k->off = false;
}

void tr_gkeys_reset(gkeys *k) {
    clear(k);
    k->txt_len = 0;
    k->hist_head = k->hist_len = 0;
}

static void feed(gkeys *k, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n && !k->off; i++) step(&k->lx, &commit_ops, k, b[i]);
}

bool tr_gkeys_push(gkeys *k, const uint8_t *b, size_t n) {
    if (k->txt_len + n > k->txt_cap) {
        size_t cap = k->txt_cap ? k->txt_cap : 256;
        while (cap < k->txt_len + n) cap *= 2;
        uint8_t *t = realloc(k->txt, cap);
        if (!t) {
            clear(k);
            k->off = true;
            return false;
        }
        k->txt = t;
        k->txt_cap = cap;
    }
    k->hist[k->hist_head] = k->txt_len;
    k->hist_head = (k->hist_head + 1) % k->hist_cap;
    if (k->hist_len < k->hist_cap) k->hist_len++;
    if (n) memcpy(k->txt + k->txt_len, b, n);
    k->txt_len += n;
    feed(k, b, n);
    return !k->off;
}

bool tr_gkeys_rollback(gkeys *k, uint32_t n) {
    if (n > k->hist_len) return false;
    if (n == 0 || k->off) return true; /* off (out of memory) until reset */
    uint32_t idx = (k->hist_head + k->hist_cap - n) % k->hist_cap;
    k->txt_len = k->hist[idx];
    k->hist_head = idx;
    k->hist_len -= n;
    clear(k);
    feed(k, k->txt, k->txt_len);
    return true;
}

/* ---- life ---- */

static void kquotes_free(gvocab_ext *e) {
    kquotes *q = (kquotes *)e;
    free(q->id);
    free(q->n);
    free(q->bits);
    free(q);
}

static uint32_t quotes_in(const grammar_vocab *v, int32_t id) {
    if (v->flags[id] & (GVOCAB_EOG | GVOCAB_SPECIAL)) return 0;
    const uint8_t *b = v->bytes + v->offs[id], *end = v->bytes + v->offs[id + 1];
    uint32_t q = 0;
    for (const uint8_t *p = b; p < end && (p = memchr(p, '"', (size_t)(end - p))); p++) q++;
    return q > 255 ? 255 : q;
}

static kquotes *kquotes_new(const grammar_vocab *v) {
    kquotes *q = calloc(1, sizeof *q);
    uint32_t count[256] = {0}, at[256];
    if (!q) return NULL;
    q->ext.free = kquotes_free;
    for (int32_t id = 0; id < v->n_vocab; id++) count[quotes_in(v, id)]++;
    for (int c = 255, sum = 0; c >= 1; c--) at[c] = (uint32_t)sum, sum += (int)count[c];
    q->count = v->n_vocab - count[0];
    q->id = malloc((q->count ? q->count : 1) * sizeof *q->id);
    q->n = malloc(q->count ? q->count : 1);
    q->bits = calloc(v->n_words ? v->n_words : 1, sizeof *q->bits);
    if (!q->id || !q->n || !q->bits) {
        kquotes_free(&q->ext);
        return NULL;
    }
    for (int32_t id = 0; id < v->n_vocab; id++) { /* by count, most first */
        uint32_t c = quotes_in(v, id);
        if (!c) continue;
        q->id[at[c]] = id;
        q->n[at[c]++] = (uint8_t)c;
        q->bits[id >> 6] |= UINT64_C(1) << (id & 63);
    }
    return q;
}

/* The vocabulary's quote tokens, made by the first tracker that needs
 * them (the loser of a race frees its copy). */
static const kquotes *kquotes_of(const grammar_vocab *v) {
    _Atomic(gvocab_ext *) *p = &((grammar_vocab *)v)->qcache;
    gvocab_ext *e = atomic_load_explicit(p, memory_order_acquire);
    if (e) return (const kquotes *)e;
    kquotes *fresh = kquotes_new(v);
    if (!fresh) return NULL;
    if (atomic_compare_exchange_strong_explicit(p, &e, &fresh->ext, memory_order_acq_rel,
                                                memory_order_acquire))
        return fresh;
    kquotes_free(&fresh->ext);
    return (const kquotes *)e;
}

/* The gate for after[0..n) (n > 0): the literal and its KMP failure
 * function. False on out-of-memory. */
static bool gate_init(kgate *g, const uint8_t *after, size_t n) {
    g->lit = malloc(n);
    g->fail = malloc(n * sizeof *g->fail);
    if (!g->lit || !g->fail) return false;
    memcpy(g->lit, after, n);
    g->len = (uint32_t)n;
    g->fail[0] = 0;
    for (uint32_t i = 1, m = 0; i < g->len; i++) {
        while (m && g->lit[i] != g->lit[m]) m = g->fail[m - 1];
        if (g->lit[i] == g->lit[m]) m++;
        g->fail[i] = m;
    }
    return true;
}

gkeys *tr_gkeys_new(const grammar_vocab *v, uint32_t hist_cap, const uint8_t *after,
                    size_t after_len, const uint8_t *unique_paths, size_t unique_paths_len) {
    gkeys *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->v = v;
    k->up = unique_paths;
    k->up_len = unique_paths_len;
    k->hist_cap = hist_cap ? hist_cap : 1;
    k->hist = malloc((size_t)k->hist_cap * sizeof *k->hist);
    k->q = kquotes_of(v);
    if (!k->hist || !k->q || (after_len && !gate_init(&k->gate, after, after_len))) {
        tr_gkeys_free(k);
        return NULL;
    }
    clear(k);
    return k;
}

void tr_gkeys_free(gkeys *k) {
    if (!k) return;
    free(k->fr);
    free(k->keys);
    free(k->kb);
    free(k->txt);
    free(k->hist);
    free(k->gate.lit);
    free(k->gate.fail);
    free(k);
}
