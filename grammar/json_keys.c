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

#include "base/utf8.h"
#include "grammar/cfg/cfg.h"

#include <stdio.h>
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
    uint32_t pos;     /* offset in the text of the byte being read */
} klex;

#define NO_ITEM UINT32_MAX

typedef struct kframe {
    uint8_t kind;   /* 'o', 'a', or a unique array: 'u' (string items,
                       kept as keys) or 'v' (any items, kept as their
                       canonical forms) */
    bool scalar;    /* 'v': the open item is a number or a literal */
    uint32_t first; /* its first key in the key list */
    uint32_t item;  /* 'v': where the open item began; NO_ITEM: none */
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
    bool has_v;              /* some path is a 'v' array */
    uint8_t *cb;             /* canonical forms being made */
    size_t cb_cap;
};

/* A vocabulary's tokens with a '"': ids, most quotes first, their quote
 * counts, and the same set as a mask. */
typedef struct kquotes {
    gvocab_ext ext;
    int32_t *id;
    uint8_t *n;
    uint32_t count;
    uint64_t *bits;
    /* tokens that can end an item of a 'v' array: a quote, a closing
     * bracket, a comma or a blank (the end of a number or literal) */
    uint64_t *ends;
    uint64_t *opens; /* tokens with a '[' (may open a 'v' array) */
    uint64_t *closers; /* tokens with '}', ']' or '[' (may end an item
                          from inside it, or open a 'v' array) */
    uint64_t *blank_only; /* tokens of blanks alone */
    uint64_t *text;       /* every token with bytes (not EOG or special) */
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
    /* 'v' arrays: the top frame's open item (NO_ITEM: none) */
    uint32_t (*item_get)(void *c, bool *scalar);
    void (*item_set)(void *c, uint32_t start, bool scalar);
    /* the item text [start, end) of the top 'v' frame is complete:
     * false when it equals an earlier item */
    bool (*item_end)(void *c, uint32_t start, uint32_t end);
} kops;

/* ---- the lexer ---- */

static void emit(klex *x, const kops *o, void *c, uint8_t b) {
    if (!x->key) return;
    x->hash = (x->hash ^ b) * FNV_PRIME;
    o->key_byte(c, b);
}

static void emit_cp(klex *x, const kops *o, void *c, uint32_t cp) {
    uint8_t u[4];
    int n = tr_utf8_encode(cp, u);
    for (int i = 0; i < n; i++) emit(x, o, c, u[i]);
}

static void flush_hi(klex *x, const kops *o, void *c) {
    if (x->hi) emit_cp(x, o, c, x->hi);
    x->hi = 0;
}

/* The byte a one-letter escape \\b stands for (the grammar admits only
 * JSON's; anything else stands for itself). */
static uint8_t unescape(uint8_t b) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *p = b ? strchr(from, b) : NULL;
    return p ? (uint8_t)to[p - from] : b;
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

static bool is_blank(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

/* A byte read outside strings with a 'v' array on top: an item begins,
 * or a number / literal item ends before b (false: a repeat). */
static bool v_item_byte(klex *x, const kops *o, void *c, uint8_t b) {
    bool scalar;
    uint32_t start = o->item_get(c, &scalar);
    if (start == NO_ITEM) {
        if (b == ',' || b == ']' || is_blank(b)) return true;
        o->item_set(c, x->pos, b != '{' && b != '[' && b != '"');
        return true;
    }
    if (!scalar || !(b == ',' || b == ']' || is_blank(b))) return true;
    o->item_set(c, NO_ITEM, false);
    return o->item_end(c, start, x->pos);
}

/* After a string or bracket closed at b: when it was an item of the 'v'
 * array now on top, that item ends with b. */
static bool v_item_closed(klex *x, const kops *o, void *c) {
    if (o->top(c) != 'v') return true;
    bool scalar;
    uint32_t start = o->item_get(c, &scalar);
    if (start == NO_ITEM || scalar) return true;
    o->item_set(c, NO_ITEM, false);
    return o->item_end(c, start, x->pos + 1);
}

static bool step_byte(klex *x, const kops *o, void *c, uint8_t b);

/* One byte; false when it closes a duplicate key or item. */
static bool step(klex *x, const kops *o, void *c, uint8_t b) {
    bool ok = step_byte(x, o, c, b);
    x->pos++;
    return ok;
}

static bool step_byte(klex *x, const kops *o, void *c, uint8_t b) {
    if (x->waiting) {
        step_gate(x, b);
        return true;
    }
    switch (x->mode) {
    case OUT:
        if (o->top(c) == 'v' && !v_item_byte(x, o, c, b)) return false;
        step_out(x, o, c, b);
        if ((b == '}' || b == ']') && !v_item_closed(x, o, c)) return false;
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
        if (x->key) return o->key_end(c, x->hash);
        return v_item_closed(x, o, c);
    case ESC:
        if (b == 'u') {
            x->mode = UHEX, x->hex = 0, x->hex_n = 0;
            return true;
        }
        flush_hi(x, o, c);
        emit(x, o, c, unescape(b));
        x->mode = STR;
        return true;
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

/* The kind of the array opening under the open frames (depth of them,
 * read by el): 'u' or 'v' (TR_GKEYS_ANY_ITEMS) when they are one of the
 * recorded paths, else 'a'. */
static uint8_t path_recorded(const uint8_t *up, size_t up_len, uint32_t depth, frame_el_fn el,
                             void *c) {
    size_t at = 0;
    while (at < up_len) {
        uint8_t kind_byte = up[at++];
        uint32_t n = kind_byte & ~(TR_GKEYS_ANY_ITEMS | TR_GKEYS_ANY_DEPTH);
        bool any_depth = kind_byte & TR_GKEYS_ANY_DEPTH; /* the last n frames */
        bool same = any_depth ? n <= depth : n == depth;
        uint32_t skip = same ? depth - n : 0;
        for (uint32_t i = 0; i < n; i++) {
            uint8_t kind = up[at++];
            kel e = same ? el(c, skip + i) : (kel){true, NULL, 0};
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
        if (same) return kind_byte & TR_GKEYS_ANY_ITEMS ? 'v' : 'u';
    }
    return 'a';
}

/* ---- canonical forms of JSON values (items of 'v' arrays) ----
 *
 * Equal as JSON Schema defines equality iff their forms are equal:
 * strings decoded, numbers by value (1, 1.0, 10e-1 and -0 vs 0), object
 * members sorted by key. Each form is self-delimiting: a type letter,
 * then for strings and numbers a 4-byte length and the bytes, for arrays
 * and objects a 4-byte count and the parts. The text is the grammar's,
 * so well-formed; malformed text still gives some form, never a read
 * past its end. */

typedef struct cbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} cbuf;

static void cb_put(cbuf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void cb_u32_at(cbuf *b, size_t at, uint32_t v) {
    if (b->oom) return;
    for (int i = 0; i < 4; i++) b->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static void cb_u32(cbuf *b, uint32_t v) {
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    cb_put(b, le, 4);
}

typedef struct ctext {
    const uint8_t *s;
    size_t n, i;
} ctext;

static void c_blanks(ctext *t) {
    while (t->i < t->n && is_blank(t->s[t->i])) t->i++;
}

static void c_utf8(cbuf *b, uint32_t cp) {
    uint8_t u[4];
    int n = tr_utf8_encode(cp, u);
    cb_put(b, u, (size_t)(n > 0 ? n : 0));
}

static uint32_t c_hex4(ctext *t) {
    uint32_t v = 0;
    for (int k = 0; k < 4 && t->i < t->n; k++) v = v * 16 + hexval(t->s[t->i++]);
    return v;
}

/* A string at t->i (its opening quote): 's', length, decoded bytes. */
static void c_string(ctext *t, cbuf *b) {
    cb_put(b, "s", 1);
    size_t at = b->n;
    cb_u32(b, 0);
    t->i++;
    uint32_t hi = 0;
    while (t->i < t->n && t->s[t->i] != '"') {
        uint8_t ch = t->s[t->i++];
        if (ch != '\\' || t->i >= t->n) {
            if (hi) c_utf8(b, hi), hi = 0;
            cb_put(b, &ch, 1);
            continue;
        }
        ch = t->s[t->i++];
        if (ch == 'u') {
            uint32_t cp = c_hex4(t);
            if (cp >= 0xdc00 && cp < 0xe000 && hi)
                cp = 0x10000 + ((hi - 0xd800) << 10) + (cp - 0xdc00), hi = 0;
            if (hi) c_utf8(b, hi), hi = 0;
            if (cp >= 0xd800 && cp < 0xdc00)
                hi = cp;
            else
                c_utf8(b, cp);
            continue;
        }
        if (hi) c_utf8(b, hi), hi = 0;
        uint8_t d = unescape(ch);
        cb_put(b, &d, 1);
    }
    if (hi) c_utf8(b, hi);
    t->i++; /* the closing quote */
    cb_u32_at(b, at, (uint32_t)(b->n - at - 4));
}

/* A number: 'd', length, then "0" or [-]DIGITS e EXP with DIGITS free
 * of leading and trailing zeros (the value DIGITS x 10^EXP). */
static void c_number(ctext *t, cbuf *b) {
    bool neg = t->i < t->n && t->s[t->i] == '-';
    if (neg) t->i++;
    cbuf d = {0};
    int64_t frac_len = 0, e = 0;
    bool frac = false;
    for (; t->i < t->n; t->i++) {
        uint8_t ch = t->s[t->i];
        if (ch == '.') {
            frac = true;
            continue;
        }
        if (ch < '0' || ch > '9') break;
        frac_len += frac;
        if (d.n || ch != '0') cb_put(&d, &ch, 1); /* leading zeros dropped */
    }
    if (t->i < t->n && (t->s[t->i] == 'e' || t->s[t->i] == 'E')) {
        t->i++;
        bool eneg = t->i < t->n && t->s[t->i] == '-';
        if (t->i < t->n && (t->s[t->i] == '-' || t->s[t->i] == '+')) t->i++;
        for (; t->i < t->n && t->s[t->i] >= '0' && t->s[t->i] <= '9'; t->i++)
            if (e < 1000000000000LL) e = e * 10 + (t->s[t->i] - '0');
        if (eneg) e = -e;
    }
    int64_t exp = e - frac_len;
    while (d.n && d.p[d.n - 1] == '0') d.n--, exp++;
    char tail[32];
    int tl = snprintf(tail, sizeof tail, "e%lld", (long long)exp);
    cb_put(b, "d", 1);
    if (!d.n) {
        cb_u32(b, 1);
        cb_put(b, "0", 1);
    } else {
        cb_u32(b, (uint32_t)(neg + d.n + (size_t)tl));
        if (neg) cb_put(b, "-", 1);
        cb_put(b, d.p, d.n);
        cb_put(b, tail, (size_t)tl);
    }
    b->oom |= d.oom;
    free(d.p);
}

static void c_value(ctext *t, cbuf *b, uint32_t depth);

/* An object: 'o', member count, members sorted by key form. */
static void c_object(ctext *t, cbuf *b, uint32_t depth) {
    t->i++;
    size_t n = 0, cap = 0;
    cbuf *m = NULL; /* one form per member: key form then value form */
    size_t *klen = NULL;
    for (;;) {
        c_blanks(t);
        if (t->i >= t->n || t->s[t->i] == '}' || t->s[t->i] != '"') break;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            cbuf *nm = realloc(m, nc * sizeof *m);
            size_t *nk = nm ? realloc(klen, nc * sizeof *nk) : NULL;
            if (nm) m = nm;
            if (!nm || !nk) {
                b->oom = true;
                break;
            }
            klen = nk;
            cap = nc;
        }
        m[n] = (cbuf){0};
        c_string(t, &m[n]);
        klen[n] = m[n].n;
        c_blanks(t);
        if (t->i < t->n && t->s[t->i] == ':') t->i++;
        c_value(t, &m[n], depth + 1);
        b->oom |= m[n].oom;
        n++;
        c_blanks(t);
        if (t->i < t->n && t->s[t->i] == ',') t->i++;
    }
    if (t->i < t->n && t->s[t->i] == '}') t->i++;
    /* insertion sort by key form (objects in items are small) */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            size_t l = klen[j - 1] < klen[j] ? klen[j - 1] : klen[j];
            int c = memcmp(m[j - 1].p, m[j].p, l);
            if (c < 0 || (c == 0 && klen[j - 1] <= klen[j])) break;
            cbuf tm = m[j - 1];
            size_t tk = klen[j - 1];
            m[j - 1] = m[j], klen[j - 1] = klen[j];
            m[j] = tm, klen[j] = tk;
        }
    cb_put(b, "o", 1);
    cb_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        cb_put(b, m[i].p, m[i].n);
        free(m[i].p);
    }
    free(m);
    free(klen);
}

static void c_value(ctext *t, cbuf *b, uint32_t depth) {
    c_blanks(t);
    if (t->i >= t->n || depth > 256) {
        b->oom = true; /* no form: compared as nothing else is */
        return;
    }
    uint8_t ch = t->s[t->i];
    if (ch == '"') return c_string(t, b);
    if (ch == '{') return c_object(t, b, depth);
    if (ch == '[') {
        t->i++;
        cb_put(b, "a", 1);
        size_t at = b->n;
        cb_u32(b, 0);
        uint32_t count = 0;
        for (;;) {
            c_blanks(t);
            if (t->i >= t->n || t->s[t->i] == ']') break;
            size_t before = t->i;
            c_value(t, b, depth + 1);
            count++;
            c_blanks(t);
            if (t->i < t->n && t->s[t->i] == ',') t->i++;
            if (t->i == before) break; /* malformed: no progress */
        }
        if (t->i < t->n) t->i++;
        cb_u32_at(b, at, count);
        return;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) return c_number(t, b);
    /* true, false, null: their first letter */
    cb_put(b, &ch, 1);
    while (t->i < t->n && t->s[t->i] >= 'a' && t->s[t->i] <= 'z') t->i++;
}

/* The canonical form of the JSON text s[0..n) into b (reset first);
 * false when none could be made (out of memory, too deep). */
static bool canonical(const uint8_t *s, size_t n, cbuf *b) {
    b->n = 0;
    b->oom = false;
    ctext t = {s, n, 0};
    c_value(&t, b, 0);
    return !b->oom;
}

static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
    return h;
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
    k->fr[k->depth++] = (kframe){kind, false, k->n_keys, NO_ITEM};
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
    return k->up_len ? path_recorded(k->up, k->up_len, k->depth, c_frame_el, c) : 'a';
}

static uint32_t c_item_get(void *c, bool *scalar) {
    gkeys *k = c;
    *scalar = k->fr[k->depth - 1].scalar;
    return k->fr[k->depth - 1].item;
}

static void c_item_set(void *c, uint32_t start, bool scalar) {
    gkeys *k = c;
    k->fr[k->depth - 1].item = start;
    k->fr[k->depth - 1].scalar = scalar;
}

/* The canonical form of text [start, end) (committed, or partly the
 * checked bytes b from offset base) into k's scratch; false when none. */
static bool item_form(gkeys *k, uint32_t start, uint32_t end, const uint8_t *b, uint32_t base,
                      cbuf *out) {
    const uint8_t *text;
    uint8_t *joined = NULL;
    size_t n = end - start;
    if (!b || end <= base)
        text = k->txt + start;
    else if (start >= base)
        text = b + (start - base);
    else {
        if (!(joined = malloc(n))) return false;
        memcpy(joined, k->txt + start, base - start);
        memcpy(joined + (base - start), b, end - base);
        text = joined;
    }
    *out = (cbuf){k->cb, 0, k->cb_cap, false};
    bool ok = canonical(text, n, out);
    k->cb = out->p;
    k->cb_cap = out->cap;
    free(joined);
    return ok;
}

/* An item of the top 'v' frame, committed: kept as a key of that frame. */
static bool c_item_end(void *c, uint32_t start, uint32_t end) {
    gkeys *k = c;
    cbuf f;
    if (!item_form(k, start, end, NULL, (uint32_t)k->txt_len, &f) || f.n > UINT32_MAX / 2 ||
        !grow((void **)&k->kb, &k->kb_cap, k->kb_len + (uint32_t)f.n, 1) ||
        !grow((void **)&k->keys, &k->keys_cap, k->n_keys + 1, sizeof *k->keys)) {
        k->off = true;
        return true;
    }
    memcpy(k->kb + k->kb_len, f.p, f.n);
    k->keys[k->n_keys++] = (kkey){fnv(f.p, f.n), k->kb_len, (uint32_t)f.n};
    k->kb_len += (uint32_t)f.n;
    return true;
}

static const kops commit_ops = {c_arr_kind, c_push, c_pop,      c_top,      c_key_open,
                                c_key_byte, c_key_end, c_item_get, c_item_set, c_item_end};

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
    const uint8_t *b;           /* the checked bytes */
    uint32_t base;              /* the text offset of b[0] */
    uint32_t cdepth;            /* committed frames still open */
    uint8_t lkind[V_MAX_FRAMES]; /* frames the bytes opened */
    uint32_t litem[V_MAX_FRAMES]; /* their open items ('v') */
    bool lscalar[V_MAX_FRAMES];
    uint32_t ldepth;
    /* the open item of committed frame ov_at as these bytes left it
     * (UINT32_MAX: none changed) */
    uint32_t ov_at, ov_item;
    bool ov_scalar;
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
    v->litem[v->ldepth] = NO_ITEM;
    v->lscalar[v->ldepth] = false;
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
    return path_recorded(k->up, k->up_len, v->cdepth + v->ldepth, v_frame_el, c);
}

static uint32_t v_item_get(void *c, bool *scalar) {
    vcheck *v = c;
    if (v->ldepth) {
        *scalar = v->lscalar[v->ldepth - 1];
        return v->litem[v->ldepth - 1];
    }
    if (v->ov_at == v->cdepth - 1) {
        *scalar = v->ov_scalar;
        return v->ov_item;
    }
    *scalar = v->k->fr[v->cdepth - 1].scalar;
    return v->k->fr[v->cdepth - 1].item;
}

static void v_item_set(void *c, uint32_t start, bool scalar) {
    vcheck *v = c;
    if (v->ldepth) {
        v->lscalar[v->ldepth - 1] = scalar;
        v->litem[v->ldepth - 1] = start;
        return;
    }
    v->ov_at = v->cdepth - 1;
    v->ov_item = start;
    v->ov_scalar = scalar;
}

/* An item of the top 'v' frame, checked: against that frame's committed
 * items and those these bytes completed, then kept locally. */
static bool v_item_end(void *c, uint32_t start, uint32_t end) {
    vcheck *v = c;
    const gkeys *k = v->k;
    uint32_t tag = v_tag(v);
    if (v->overflow || tag == UINT32_MAX) return true;
    cbuf f;
    if (!item_form((gkeys *)k, start, end, v->b, v->base, &f)) {
        v->overflow = true; /* no form: nothing refused */
        return true;
    }
    uint64_t hash = fnv(f.p, f.n);
    if (tag < V_LOCAL) {
        uint32_t stop = tag + 1 < k->depth ? k->fr[tag + 1].first : k->n_keys;
        for (uint32_t i = k->fr[tag].first; i < stop; i++)
            if (k->keys[i].hash == hash && eq2(k->kb + k->keys[i].off, k->keys[i].len, f.p,
                                               (uint32_t)f.n, NULL, 0))
                return false;
    }
    for (uint32_t i = 0; i < v->n_lk; i++)
        if (v->lk[i].tag == tag && v->lk[i].hash == hash &&
            eq2(v->kbuf + v->lk[i].off, v->lk[i].len, f.p, (uint32_t)f.n, NULL, 0))
            return false;
    if (v->n_lk == V_MAX_KEYS || v->kb_len + f.n > V_MAX_BYTES) {
        v->overflow = true;
        return true;
    }
    memcpy(v->kbuf + v->kb_len, f.p, f.n);
    v->lk[v->n_lk++] = (vkey){tag, v->kb_len, (uint32_t)f.n, hash};
    v->kb_len += (uint32_t)f.n;
    return true;
}

static const kops check_ops = {v_arr_kind, v_push,    v_pop,      v_top,      v_key_open,
                               v_key_byte, v_key_end, v_item_get, v_item_set, v_item_end};

static void v_init(vcheck *v, const gkeys *k, const uint8_t *b) {
    v->k = k;
    v->b = b;
    v->base = (uint32_t)k->txt_len;
    v->ov_at = UINT32_MAX;
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
    v_init(&v, k, b);
    klex x = k->lx;
    for (size_t i = 0; i < n; i++)
        if (!step(&x, &check_ops, &v, b[i])) return i;
    return n;
}

bool tr_gkeys_would_dup(const gkeys *k, const uint8_t *b, size_t n) {
    return check_run(k, b, n) < n;
}

bool tr_gkeys_token_would_dup(const gkeys *k, int32_t id) {
    const uint64_t *may = k->has_v ? k->q->ends : k->q->bits;
    if (!(may[id >> 6] >> (id & 63) & 1)) return false;
    const grammar_vocab *v = k->v;
    return tr_gkeys_would_dup(k, v->bytes + v->offs[id], (size_t)(v->offs[id + 1] - v->offs[id]));
}

size_t tr_gkeys_clean_prefix(const gkeys *k, const uint8_t *b, size_t n) {
    return check_run(k, b, n);
}

/* Clears from mask the tokens of may that would close a repeat. */
static void filter_items(const gkeys *k, uint64_t *mask, const uint64_t *may) {
    const grammar_vocab *v = k->v;
    for (uint32_t w = 0; w < v->n_words; w++)
        for (uint64_t bits = mask[w] & may[w]; bits; bits &= bits - 1) {
            int32_t id = (int32_t)(w * 64 + (uint32_t)__builtin_ctzll(bits));
            if (tr_gkeys_would_dup(k, v->bytes + v->offs[id],
                                   (size_t)(v->offs[id + 1] - v->offs[id])))
                mask[w] &= ~(UINT64_C(1) << (id & 63));
        }
}

static bool v_open(const gkeys *k) {
    for (uint32_t i = 0; i < k->depth; i++)
        if (k->fr[i].kind == 'v') return true;
    return false;
}

void tr_gkeys_filter_mask(const gkeys *k, uint64_t *mask) {
    if (k->off) return;
    /* With 'v' arrays: inside one, every token that can end an item
     * (outside strings; inside one, only those with a quote can leave
     * it); outside, only a token that opens one can repeat an item in
     * it, and keys below */
    if (k->has_v && v_open(k)) {
        const kquotes *q = k->q;
        bool in_item = k->fr[k->depth - 1].kind != 'v'; /* inside an object or array item */
        if (k->lx.mode == OUT && !k->lx.waiting && in_item) filter_items(k, mask, q->closers);
        /* (a quote ends a string item, closes a key, or leaves a string) */
        filter_items(k, mask, k->lx.mode == OUT && !k->lx.waiting && !in_item ? q->ends : q->bits);
        return;
    }
    if (k->has_v) filter_items(k, mask, k->q->opens);
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

/* Items longer than this are not looked ahead into: each check makes the
 * item's canonical form, so the cost grows with the item, and long items
 * rarely repeat. */
#define LOOKAHEAD_MAX_ITEM 512u

const uint64_t *tr_gkeys_lookahead_tokens(const gkeys *k) {
    if (!k->has_v || k->off) return NULL;
    for (uint32_t i = k->depth - (k->depth > 0); i-- > 0;) /* the innermost item first */
        if (k->fr[i].kind == 'v' && k->fr[i].item != NO_ITEM && !k->fr[i].scalar) {
            if (k->txt_len - k->fr[i].item > LOOKAHEAD_MAX_ITEM) return NULL;
            return k->lx.mode == OUT ? k->q->text : k->q->bits; /* a string: left by a quote */
        }
    return NULL;
}

bool tr_gkeys_dup_after(const gkeys *k, const uint8_t *t, size_t tn, const uint8_t *u,
                        size_t un) {
    uint8_t buf[512];
    if (tn + un > sizeof buf) return false;
    memcpy(buf, t, tn);
    memcpy(buf + tn, u, un);
    return check_run(k, buf, tn + un) < tn + un;
}

bool tr_gkeys_close_repeats(const gkeys *k, const uint8_t *b, size_t n) {
    uint8_t buf[256];
    if (n + 1 > sizeof buf) return false;
    memcpy(buf, b, n);
    for (int i = 0; i < 2; i++) {
        buf[n] = i ? ']' : '}';
        if (check_run(k, buf, n + 1) == n) return true; /* the close refused */
    }
    return false;
}

const uint64_t *tr_gkeys_blank_tokens(const gkeys *k) { return k->q->blank_only; }

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
    free(q->ends);
    free(q->opens);
    free(q->closers);
    free(q->blank_only);
    free(q->text);
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
    q->ends = calloc(v->n_words ? v->n_words : 1, sizeof *q->ends);
    q->opens = calloc(v->n_words ? v->n_words : 1, sizeof *q->opens);
    q->closers = calloc(v->n_words ? v->n_words : 1, sizeof *q->closers);
    q->blank_only = calloc(v->n_words ? v->n_words : 1, sizeof *q->blank_only);
    q->text = calloc(v->n_words ? v->n_words : 1, sizeof *q->text);
    if (!q->id || !q->n || !q->bits || !q->ends || !q->opens || !q->closers || !q->blank_only ||
        !q->text) {
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
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if ((v->flags[id] & (GVOCAB_EOG | GVOCAB_SPECIAL)) || v->offs[id + 1] == v->offs[id])
            continue;
        uint64_t bit = UINT64_C(1) << (id & 63);
        bool blanks = true;
        q->text[id >> 6] |= bit;
        for (uint64_t i = v->offs[id]; i < v->offs[id + 1]; i++) {
            uint8_t b = v->bytes[i];
            blanks = blanks && is_blank(b);
            if (b == '"' || b == ',' || b == ']' || b == '}' || is_blank(b)) q->ends[id >> 6] |= bit;
            if (b == '[') q->opens[id >> 6] |= bit;
            if (b == '[' || b == ']' || b == '}') q->closers[id >> 6] |= bit;
        }
        if (blanks) q->blank_only[id >> 6] |= bit;
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

/* Whether some record of up is a 'v' array's (TR_GKEYS_ANY_ITEMS). */
static bool paths_have_items(const uint8_t *up, size_t up_len) {
    size_t at = 0;
    while (at < up_len) {
        uint8_t kind_byte = up[at++];
        if (kind_byte & TR_GKEYS_ANY_ITEMS) return true;
        uint32_t n = kind_byte & ~TR_GKEYS_ANY_DEPTH;
        for (uint32_t i = 0; i < n && at < up_len; i++) {
            uint8_t el = up[at++];
            if (el == 'i') continue;
            uint32_t count = el == 'a' ? rd_u32(up + at) : 1;
            if (el == 'a') at += 4;
            for (uint32_t j = 0; j < count; j++) at += 4 + rd_u32(up + at);
        }
    }
    return false;
}

gkeys *tr_gkeys_new(const grammar_vocab *v, uint32_t hist_cap, const uint8_t *after,
                    size_t after_len, const uint8_t *unique_paths, size_t unique_paths_len) {
    gkeys *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->v = v;
    k->up = unique_paths;
    k->up_len = unique_paths_len;
    k->has_v = paths_have_items(unique_paths, unique_paths_len);
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
    free(k->cb);
    free(k->hist);
    free(k->gate.lit);
    free(k->gate.fail);
    free(k);
}
