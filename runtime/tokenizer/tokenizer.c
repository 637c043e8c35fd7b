/* tokenizer.c — building a tokenizer from GGUF metadata; accessors, decode,
 * incremental decode, _check and _dump.
 *
 * Layering: runtime; reads a gguf_file (runtime/gguf), compiles the
 * pre-tokenizer regexes with PCRE2. Encoding lives in tokenizer_encode.c,
 * the pre-tokenizer table in tokenizer_pre.c. See tokenizer.h for the
 * contract and tokenizer_internal.h for the layout.
 *
 * Everything read from the file is copied (the tokenizer outlives the
 * gguf_file) and checked: array types and lengths, token types, merges. The
 * builder allocates into a zeroed struct and frees it whole on any error,
 * so a failed build leaves nothing behind. After creation nothing is
 * mutated: any number of threads may use one tokenizer.
 *
 * Compatibility with llama.cpp (the reference for token ids) is deliberate
 * in the details that change ids or end generation: the EOG set and the
 * control-type fix-ups follow llama.cpp's text lists; special tokens are
 * ordered longest first; user-defined tokens are split out even without
 * special parsing (HF tokenizers does the same).
 */
#include "base/utf8.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "runtime/tokenizer/tokenizer_internal.h"

/* ---- small helpers ---- */

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* GPT-2's byte-level alphabet: printable Latin-1 bytes ('!'..'~',
 * U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68 bytes
 * (controls, space, DEL, U+0080..U+00A0, soft hyphen) get U+0100.. in byte
 * order, so that every byte is a visible, non-space character. */
static bool byte_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
}

uint32_t tr_tokenizer_byte_to_cp(uint8_t b) {
    if (byte_is_self(b)) return b;
    /* the 68 others, in order: 0x00..0x20 (33), 0x7F..0xA0 (34), 0xAD */
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
    return 256u + 67u;
}

/* ---- string-keyed tables ---- */

tr_status tr_tokenizer_strmap_init(tokenizer_strmap *m, uint64_t n_keys) {
    uint64_t cap = pow2_at_least(2 * n_keys);
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return TR_ERR_NOMEM;
    for (uint64_t i = 0; i < cap; i++) m->slot[i] = (tokenizer_slot){-1, 0};
    m->mask = cap - 1;
    return TR_OK;
}

static int32_t strmap_find(const tokenizer_strmap *m, const char *blob,
                           const size_t *off, const void *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        tokenizer_slot sl = m->slot[i];
        if (sl.id < 0) return -1;
        if (sl.tag != tag) continue;
        size_t a = off[sl.id], b = off[sl.id + 1];
        if (b - a == n && memcmp(blob + a, s, n) == 0) return sl.id;
    }
}

int32_t tr_tokenizer_strmap_insert(tokenizer_strmap *m, const char *blob,
                                const size_t *off, int32_t id) {
    const char *s = blob + off[id];
    size_t n = off[id + 1] - off[id];
    uint64_t h = hash_bytes(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        tokenizer_slot sl = m->slot[i];
        if (sl.id < 0) {
            m->slot[i] = (tokenizer_slot){id, tag};
            return -1;
        }
        if (sl.tag != tag) continue;
        size_t a = off[sl.id], b = off[sl.id + 1];
        if (b - a == n && memcmp(blob + a, s, n) == 0) return sl.id;
    }
}

int32_t tr_tokenizer_text_find(const tokenizer *t, const char *s, size_t n) {
    return strmap_find(&t->tmap, t->text_blob, t->text_off, s, n);
}

int32_t tr_tokenizer_whole_find(const tokenizer *t, const uint8_t *s, size_t n) {
    return strmap_find(&t->wmap, (const char *)t->bytes_blob, t->bytes_off, s, n);
}

/* ---- the merge table ---- */

bool tr_tokenizer_merge_find(const tokenizer *t, int32_t a, int32_t b,
                          uint32_t *rank, int32_t *result) {
    if (!t->mmap) return false; /* SPM: no merges */
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t i = hash_u64(key) & t->mmap_mask;
    for (;;) {
        const tokenizer_merge *m = &t->mmap[i];
        if (m->key == key) {
            *rank = m->rank;
            *result = m->result;
            return true;
        }
        if (m->key == TOKENIZER_MERGE_EMPTY) return false;
        i = (i + 1) & t->mmap_mask;
    }
}

/* Inserts unless the pair is already there (the first, lowest rank wins, as
 * in llama.cpp). */
static void mmap_insert(tokenizer *t, int32_t a, int32_t b, uint32_t rank,
                        int32_t result) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t i = hash_u64(key) & t->mmap_mask;
    for (;;) {
        tokenizer_merge *m = &t->mmap[i];
        if (m->key == key) return;
        if (m->key == TOKENIZER_MERGE_EMPTY) {
            m->key = key;
            m->rank = rank;
            m->result = result;
            t->n_merges++;
            return;
        }
        i = (i + 1) & t->mmap_mask;
    }
}

/* ---- building ---- */

static bool str_is(gguf_str s, const char *c) { return tr_gguf_str_eq(s, c); }

static void str_copy(char *dst, size_t cap, gguf_str s) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = 0;
}

/* Reads the token texts into text_blob / text_off (one pass; the blob
 * grows geometrically). */
static tr_status load_texts(tokenizer *t, const gguf_file *f, uint64_t n,
                            tr_diag *diag) {
    const char *key = "tokenizer.ggml.tokens";
    size_t cap = (size_t)n * 8 + 64, pos = 0;
    t->text_blob = malloc(cap);
    t->text_off = malloc((n + 1) * sizeof *t->text_off);
    if (!t->text_blob || !t->text_off) return TR_ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if (tr_gguf_get_arr_str(f, key, i, &s))
            return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s[%" PRIu64 "] unreadable",
                               key, i);
        char empty[32];
        if (s.len == 0) {
            /* llama.cpp names empty tokens so that they stay distinct */
            int k = snprintf(empty, sizeof empty, "[EMPTY_%" PRIu64 "]", i);
            s.ptr = empty;
            s.len = (uint64_t)k;
        }
        if (s.len > cap - pos) {
            /* (the string lies inside the mapped file: sizes stay sane) */
            size_t need;
            if (s.len > SIZE_MAX / 4 || tr_add_overflow_size(pos, (size_t)s.len, &need) ||
                need > SIZE_MAX / 4)
                return tr_diag_set(diag, TR_ERR_OVERFLOW, 0, "%s: texts too long", key);
            size_t nc = TR_MAX(need, cap * 2);
            char *nb = realloc(t->text_blob, nc);
            if (!nb) return TR_ERR_NOMEM;
            t->text_blob = nb;
            cap = nc;
        }
        t->text_off[i] = pos;
        memcpy(t->text_blob + pos, s.ptr, (size_t)s.len);
        pos += (size_t)s.len;
        if (s.len > t->max_text_len) t->max_text_len = (size_t)s.len;
    }
    t->text_off[n] = pos;
    return TR_OK;
}

static tr_status load_types(tokenizer *t, const gguf_file *f, tr_diag *diag) {
    const char *key = "tokenizer.ggml.token_type";
    int32_t n = t->n_vocab;
    t->type = malloc((size_t)n);
    t->flags = calloc((size_t)n, 1);
    if (!t->type || !t->flags) return TR_ERR_NOMEM;
    gguf_type et;
    uint64_t cnt;
    tr_status s = tr_gguf_get_arr(f, key, &et, &cnt);
    if (s == TR_ERR_NOT_FOUND) {
        memset(t->type, TOKENIZER_TYPE_NORMAL, (size_t)n);
        return TR_OK;
    }
    if (s || et == GGUF_TYPE_STRING || et == GGUF_TYPE_ARRAY ||
        et == GGUF_TYPE_FLOAT32 || et == GGUF_TYPE_FLOAT64)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s is not an integer array", key);
    if (cnt < (uint64_t)n)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "%s has %" PRIu64 " entries for %d tokens", key, cnt, n);
    const void *raw = et == GGUF_TYPE_INT32 ? tr_gguf_get_arr_data(f, key) : NULL;
    for (int32_t i = 0; i < n; i++) {
        int64_t v;
        if (raw) { /* the usual case: packed int32, read without a key lookup */
            int32_t v32;
            memcpy(&v32, (const char *)raw + (size_t)i * 4, 4);
            v = v32;
        } else if (tr_gguf_get_arr_i64(f, key, (uint64_t)i, &v))
            return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s[%d] unreadable", key, i);
        /* unknown values are "undefined", as llama.cpp reads them */
        t->type[i] = (v >= 0 && v <= TOKENIZER_TYPE_BYTE) ? (uint8_t)v
                                                          : TOKENIZER_TYPE_UNDEFINED;
    }
    return TR_OK;
}

/* Token bytes: byte-level symbols mapped back to bytes for normal BPE
 * tokens; a character outside the byte-level alphabet (malformed
 * vocabularies) keeps its own UTF-8 bytes. Normal SPM tokens: "▁" becomes
 * a space. Byte-type tokens "<0xAB>" are that byte. Everything else is its
 * text (user-defined tokens too, "▁" kept, as llama.cpp renders them). */
static tr_status build_bytes(tokenizer *t) {
    int32_t n = t->n_vocab;
    int16_t cp_to_byte[324];
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) cp_to_byte[tr_tokenizer_byte_to_cp((uint8_t)b)] = (int16_t)b;

    /* decoded bytes never outnumber the text's bytes */
    t->bytes_blob = malloc(t->text_off[n] ? t->text_off[n] : 1);
    t->bytes_off = malloc(((size_t)n + 1) * sizeof *t->bytes_off);
    if (!t->bytes_blob || !t->bytes_off) return TR_ERR_NOMEM;
    size_t pos = 0, maxlen = 0;
    for (int32_t id = 0; id < n; id++) {
        const uint8_t *s = (const uint8_t *)t->text_blob + t->text_off[id];
        size_t len = t->text_off[id + 1] - t->text_off[id];
        t->bytes_off[id] = pos;
        if (t->type[id] == TOKENIZER_TYPE_NORMAL && t->kind == TOKENIZER_KIND_SPM) {
            /* "▁" (3 bytes) stands for a space: never longer than the text */
            for (size_t i = 0; i < len;) {
                if (len - i >= 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                    t->bytes_blob[pos++] = ' ';
                    i += 3;
                } else {
                    t->bytes_blob[pos++] = s[i++];
                }
            }
        } else if (t->type[id] == TOKENIZER_TYPE_NORMAL) {
            size_t i = 0;
            while (i < len) {
                uint32_t cp;
                size_t k = (size_t)tr_utf8_decode(s + i, len - i, &cp);
                if (k == 0) {
                    t->bytes_blob[pos++] = s[i++];
                } else if (cp < 324 && cp_to_byte[cp] >= 0) {
                    t->bytes_blob[pos++] = (uint8_t)cp_to_byte[cp];
                    i += k;
                } else {
                    memcpy(t->bytes_blob + pos, s + i, k);
                    pos += k;
                    i += k;
                }
            }
        } else if (t->type[id] == TOKENIZER_TYPE_BYTE && len == 6 &&
                   memcmp(s, "<0x", 3) == 0 && s[5] == '>' && tr_hex_digit(s[3]) >= 0 &&
                   tr_hex_digit(s[4]) >= 0) {
            t->bytes_blob[pos++] = (uint8_t)(tr_hex_digit(s[3]) * 16 + tr_hex_digit(s[4]));
        } else {
            memcpy(t->bytes_blob + pos, s, len);
            pos += len;
        }
        size_t l = pos - t->bytes_off[id];
        if (l > maxlen) maxlen = l;
    }
    t->bytes_off[n] = pos;
    t->max_token_len = maxlen;
    return TR_OK;
}

static tr_status build_tmap(tokenizer *t, tr_diag *diag) {
    if (tr_tokenizer_strmap_init(&t->tmap, (uint64_t)t->n_vocab)) return TR_ERR_NOMEM;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int32_t o = tr_tokenizer_strmap_insert(&t->tmap, t->text_blob, t->text_off, id);
        if (o >= 0) {
            size_t a = t->text_off[id];
            int len = (int)TR_MIN(t->text_off[id + 1] - a, 64);
            return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                               "duplicate token in vocabulary: '%.*s' has ids %d and %d",
                               len, t->text_blob + a, o, id);
        }
    }
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t k = (size_t)tr_utf8_encode(tr_tokenizer_byte_to_cp((uint8_t)b), u);
        t->byte_tok[b] = tr_tokenizer_text_find(t, (const char *)u, k);
    }
    return TR_OK;
}

static tr_status load_merges(tokenizer *t, const gguf_file *f, tr_diag *diag) {
    const char *key = "tokenizer.ggml.merges";
    gguf_type et;
    uint64_t n;
    tr_status s = tr_gguf_get_arr(f, key, &et, &n);
    if (s == TR_ERR_NOT_FOUND)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0, "%s missing", key);
    if (s || et != GGUF_TYPE_STRING)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s is not a string array", key);
    if (n > UINT32_MAX - 1)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s: too many merges", key);
    uint64_t cap = pow2_at_least(2 * n);
    t->mmap = malloc(cap * sizeof *t->mmap);
    if (!t->mmap) return TR_ERR_NOMEM;
    for (uint64_t i = 0; i < cap; i++) t->mmap[i].key = TOKENIZER_MERGE_EMPTY;
    t->mmap_mask = cap - 1;

    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str m;
        if (tr_gguf_get_arr_str(f, key, i, &m)) {
            free(buf);
            return tr_diag_set(diag, TR_ERR_FORMAT, 0, "%s[%" PRIu64 "] unreadable", key, i);
        }
        /* "left right": split at the first space after the first byte */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', (size_t)m.len - 1) : NULL;
        if (!sp) {
            free(buf);
            return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                               "%s[%" PRIu64 "] has no space: '%.*s'", key, i,
                               (int)TR_MIN(m.len, 64), m.ptr);
        }
        size_t la = (size_t)(sp - m.ptr), lb = (size_t)m.len - la - 1;
        int32_t a = tr_tokenizer_text_find(t, m.ptr, la);
        int32_t b = tr_tokenizer_text_find(t, sp + 1, lb);
        if (la + lb > buf_cap) {
            size_t nc = (la + lb) * 2;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                return TR_ERR_NOMEM;
            }
            buf = nb;
            buf_cap = nc;
        }
        memcpy(buf, m.ptr, la);
        memcpy(buf + la, sp + 1, lb);
        int32_t r = tr_tokenizer_text_find(t, buf, la + lb);
        if (a < 0 || b < 0 || r < 0) {
            t->n_merges_skipped++;
            continue;
        }
        mmap_insert(t, a, b, (uint32_t)i, r);
    }
    free(buf);
    if (t->n_merges_skipped)
        tr_log(TR_LOG_DEBUG, "tokenizer: %u merges name tokens outside the vocabulary",
               t->n_merges_skipped);
    return TR_OK;
}

/* Optional id key: def when absent (or outside the vocabulary), -1 when
 * outside the vocabulary. */
static int32_t get_id_def(const gguf_file *f, const char *key, int32_t n_vocab,
                          int32_t def) {
    uint32_t v;
    if (tr_gguf_get_u32(f, key, &v)) return def < n_vocab ? def : -1;
    if (v >= (uint32_t)n_vocab) {
        tr_log(TR_LOG_WARN, "tokenizer: %s = %u is outside the vocabulary; ignored", key, v);
        return -1;
    }
    return (int32_t)v;
}

static int32_t get_id(const gguf_file *f, const char *key, int32_t n_vocab) {
    return get_id_def(f, key, n_vocab, -1);
}

/* End-of-generation tokens, after llama.cpp: EOS, EOT, EOM, the FIM
 * pad/repo/separator tokens, and every token whose text is a known
 * end-of-turn marker. Tokens recognised by text are forced to control type
 * (llama.cpp does the same: such tokens must never come out of plain text). */
static void build_eog(tokenizer *t, const gguf_file *f) {
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
        "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
        "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "[e~[", NULL};
    static const char *const fim_texts[] = {
        /* pre, suffix, middle (control only), then pad, repo, sep (EOG) */
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>",
        "<|code_prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<SUF>", "<|code_suffix|>", "<|fim_middle|>", "<fim-middle>",
        "<fim_middle>", "<MID>", "<|code_middle|>", NULL};
    static const char *const fim_eog_texts[] = {
        "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
        "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
        "<|file_sep|>", NULL};
    static const char *const eog_keys[] = {
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id", NULL};

    int32_t end_id = -1, s_id = -1;
    bool has_return = false, has_call = false, has_flush = false, has_tool = false;
    const char *const *lists[] = {eog_texts, fim_eog_texts, fim_texts};
    for (int l = 0; l < 3; l++) {
        for (const char *const *p = lists[l]; *p; p++) {
            int32_t id = tr_tokenizer_text_find(t, *p, strlen(*p));
            if (id < 0) continue;
            t->type[id] = TOKENIZER_TYPE_CONTROL;
            if (l < 2) t->flags[id] |= TOKENIZER_FLAG_EOG;
        }
    }
    for (const char *const *k = eog_keys; *k; k++) {
        int32_t id = get_id(f, *k, t->n_vocab);
        if (id >= 0) t->flags[id] |= TOKENIZER_FLAG_EOG;
    }
    /* llama.cpp's workarounds: with <|return|>/<|call|> (gpt-oss) or
     * <|calls|>/<|flush|> (solar-open), <|end|> ends a message, not the
     * generation; with <|tool_response> (gemma 4), </s> is not EOG. */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!(t->flags[id] & TOKENIZER_FLAG_EOG)) continue;
        const char *s = t->text_blob + t->text_off[id];
        size_t n = t->text_off[id + 1] - t->text_off[id];
#define IS_(lit) (n == sizeof(lit) - 1 && memcmp(s, lit, n) == 0)
        if (IS_("<|return|>")) has_return = true;
        if (IS_("<|call|>") || IS_("<|calls|>")) has_call = true;
        if (IS_("<|flush|>")) has_flush = true;
        if (IS_("<|end|>")) end_id = id;
        if (IS_("<|tool_response>")) has_tool = true;
        if (IS_("</s>")) s_id = id;
#undef IS_
    }
    if (end_id >= 0 && has_call && (has_return || has_flush)) {
        t->flags[end_id] &= (uint8_t)~TOKENIZER_FLAG_EOG;
        t->type[end_id] = TOKENIZER_TYPE_USER_DEFINED;
    }
    if (s_id >= 0 && has_tool) {
        t->flags[s_id] &= (uint8_t)~TOKENIZER_FLAG_EOG;
        t->type[s_id] = TOKENIZER_TYPE_NORMAL;
    }
}

static int cmp_special(const void *pa, const void *pb, void *ctx) {
    const tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    size_t la = t->text_off[a + 1] - t->text_off[a];
    size_t lb = t->text_off[b + 1] - t->text_off[b];
    if (la != lb) return la > lb ? -1 : 1;
    return (a > b) - (a < b);
}

static tr_status build_specials(tokenizer *t) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->type[id];
        if (ty == TOKENIZER_TYPE_CONTROL || ty == TOKENIZER_TYPE_USER_DEFINED ||
            ty == TOKENIZER_TYPE_UNKNOWN)
            n++;
    }
    t->specials = malloc(((size_t)n + 1) * sizeof *t->specials);
    t->special_lens = malloc(((size_t)n + 1) * sizeof *t->special_lens);
    if (!t->specials || !t->special_lens) return TR_ERR_NOMEM;
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->type[id];
        if (ty == TOKENIZER_TYPE_CONTROL || ty == TOKENIZER_TYPE_USER_DEFINED ||
            ty == TOKENIZER_TYPE_UNKNOWN)
            t->specials[n++] = id;
    }
    t->n_specials = n;
    qsort_r(t->specials, (size_t)n, sizeof *t->specials, cmp_special, t);
    t->n_special_lens = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = t->specials[i];
        uint32_t len = (uint32_t)(t->text_off[id + 1] - t->text_off[id]);
        if (t->n_special_lens == 0 || t->special_lens[t->n_special_lens - 1] != len)
            t->special_lens[t->n_special_lens++] = len;
        uint8_t c = (uint8_t)t->text_blob[t->text_off[id]];
        t->special_first[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    return TR_OK;
}

static tr_status compile_regexes(tokenizer *t, tr_diag *diag) {
    uint32_t max_pairs = 1;
    for (int i = 0; t->pre->regex[i]; i++) {
        if (i >= TOKENIZER_MAX_RE)
            return tr_diag_set(diag, TR_ERR_INTERNAL, 0, "too many pre-tokenizer regexes");
        int err;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile(
            (PCRE2_SPTR)t->pre->regex[i], PCRE2_ZERO_TERMINATED,
            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            return tr_diag_set(diag, TR_ERR_INTERNAL, off,
                               "pre-tokenizer regex %d does not compile: %s", i,
                               (const char *)msg);
        }
        t->re[i] = re;
        t->n_re = i + 1;
        /* JIT is an optimisation: without it (unsupported CPU) the
         * interpreter gives the same matches */
        t->re_jit[i] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
        if (!t->re_jit[i])
            tr_log(TR_LOG_DEBUG, "tokenizer: PCRE2 JIT unavailable for regex %d", i);
        uint32_t cap = 0;
        pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &cap);
        if (cap + 1 > max_pairs) max_pairs = cap + 1;
    }
    t->re_ovec_pairs = max_pairs;
    return TR_OK;
}

tr_status tr_tokenizer_from_gguf_pre(const gguf_file *f, const char *pre_override,
                                  tokenizer **out, tr_diag *diag) {
    if (!f || !out) return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL argument");
    gguf_str model;
    tr_status s = tr_gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (s == TR_ERR_NOT_FOUND)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0, "tokenizer.ggml.model missing");
    if (s) return tr_diag_set(diag, TR_ERR_FORMAT, 0, "tokenizer.ggml.model is not a string");
    tokenizer_kind kind;
    if (str_is(model, "gpt2")) {
        kind = TOKENIZER_KIND_BPE;
    } else if (str_is(model, "llama")) {
        kind = TOKENIZER_KIND_SPM;
    } else {
        char name[64];
        str_copy(name, sizeof name, model);
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "tokenizer model '%s' is not supported (supported: gpt2, llama)",
                           name);
    }

    char pre_name[64];
    if (pre_override) {
        snprintf(pre_name, sizeof pre_name, "%s", pre_override);
        if (strlen(pre_override) >= sizeof pre_name)
            return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                               "unknown pre-tokenizer type '%.60s...'", pre_override);
    } else {
        gguf_str pre;
        s = tr_gguf_get_str(f, "tokenizer.ggml.pre", &pre);
        if (s == TR_ERR_NOT_FOUND || (s == TR_OK && pre.len == 0)) {
            /* as llama.cpp: old conversions have no pre name (SPM has none) */
            if (kind == TOKENIZER_KIND_BPE)
                tr_log(TR_LOG_WARN, "tokenizer: tokenizer.ggml.pre missing, using 'default'");
            snprintf(pre_name, sizeof pre_name, "default");
        } else if (s) {
            return tr_diag_set(diag, TR_ERR_FORMAT, 0, "tokenizer.ggml.pre is not a string");
        } else {
            str_copy(pre_name, sizeof pre_name, pre);
            if (pre.len >= sizeof pre_name || memchr(pre.ptr, 0, (size_t)pre.len))
                return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                                   "unknown pre-tokenizer type '%s...'", pre_name);
        }
    }
    /* SPM vocabularies have no pre-tokenizer (the name is kept for info) */
    const tokenizer_pre_def *pre =
        kind == TOKENIZER_KIND_BPE ? tr_tokenizer_pre_lookup(pre_name) : NULL;
    if (!pre && kind == TOKENIZER_KIND_BPE)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "unknown pre-tokenizer type '%s'", pre_name);

    gguf_type et;
    uint64_t n;
    s = tr_gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n);
    if (s == TR_ERR_NOT_FOUND)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0, "tokenizer.ggml.tokens missing");
    if (s || et != GGUF_TYPE_STRING)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0, "tokenizer.ggml.tokens is not a string array");
    if (n == 0 || n > (uint64_t)INT32_MAX - 1)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "tokenizer.ggml.tokens has %" PRIu64 " entries", n);

    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return TR_ERR_NOMEM;
    t->kind = kind;
    t->n_vocab = (int32_t)n;
    t->pre = pre;
    memcpy(t->pre_name, pre_name, sizeof pre_name);

    const bool spm = kind == TOKENIZER_KIND_SPM;
    /* SPM's defaults when the file names none, as llama.cpp's */
    t->bos = get_id_def(f, "tokenizer.ggml.bos_token_id", t->n_vocab, spm ? 1 : -1);
    t->eos = get_id_def(f, "tokenizer.ggml.eos_token_id", t->n_vocab, spm ? 2 : -1);
    t->unk = get_id_def(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, spm ? 0 : -1);
    if ((s = load_texts(t, f, n, diag)) || (s = load_types(t, f, diag)) ||
        (s = build_tmap(t, diag)) ||
        (s = spm ? tr_tokenizer_spm_load(t, f, diag) : load_merges(t, f, diag)))
        goto fail;
    build_eog(t, f); /* may retype tokens: before token bytes and specials */
    if (t->eos >= 0) t->flags[t->eos] |= TOKENIZER_FLAG_EOG; /* SPM's default */
    if ((s = build_bytes(t)) ||
        (s = spm ? tr_tokenizer_strmap_init(&t->wmap, 0) : tr_tokenizer_build_whole(t)) ||
        (s = build_specials(t)) || (!spm && (s = compile_regexes(t, diag))))
        goto fail;

    bool ab;
    t->add_bos = tr_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &ab) == TR_OK
                     ? ab
                     : spm || pre->add_bos;
    if (t->add_bos && t->bos < 0) {
        s = tr_diag_set(diag, TR_ERR_FORMAT, 0,
                        "tokenizer.ggml.add_bos_token is true but there is no BOS token");
        goto fail;
    }
    int missing = 0;
    for (int b = 0; b < 256; b++) missing += t->byte_tok[b] < 0;
    /* SmolLM2 lacks 21 (C0 controls, 0xC0, 0xC1, 0xF1.., never in text) */
    if (missing)
        tr_log(TR_LOG_DEBUG, "tokenizer: %d bytes have no byte-level token; "
                             "encoding drops them, as llama.cpp does", missing);
    *out = t;
    return TR_OK;

fail:
    if (s == TR_ERR_NOMEM) tr_diag_set(diag, s, 0, "out of memory building the tokenizer");
    tr_tokenizer_free(t);
    return s;
}

tr_status tr_tokenizer_from_gguf(const gguf_file *f, tokenizer **out, tr_diag *diag) {
    return tr_tokenizer_from_gguf_pre(f, NULL, out, diag);
}

void tr_tokenizer_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t->text_blob);
    free(t->text_off);
    free(t->bytes_blob);
    free(t->bytes_off);
    free(t->type);
    free(t->flags);
    free(t->tmap.slot);
    free(t->wmap.slot);
    free(t->mmap);
    free(t->specials);
    free(t->special_lens);
    free(t->score);
    free(t);
}

/* ---- accessors ---- */

static bool id_ok(const tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab;
}

int32_t tr_tokenizer_n_vocab(const tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t tr_tokenizer_bos(const tokenizer *t) { return t ? t->bos : -1; }
int32_t tr_tokenizer_eos(const tokenizer *t) { return t ? t->eos : -1; }
bool tr_tokenizer_add_bos(const tokenizer *t) { return t && t->add_bos; }
size_t tr_tokenizer_max_token_len(const tokenizer *t) { return t ? t->max_token_len : 0; }

bool tr_tokenizer_is_eog(const tokenizer *t, int32_t id) {
    return id_ok(t, id) && (t->flags[id] & TOKENIZER_FLAG_EOG);
}

bool tr_tokenizer_is_special(const tokenizer *t, int32_t id) {
    return id_ok(t, id) && (t->type[id] == TOKENIZER_TYPE_CONTROL ||
                            t->type[id] == TOKENIZER_TYPE_USER_DEFINED);
}

tokenizer_token_type tr_tokenizer_type(const tokenizer *t, int32_t id) {
    return id_ok(t, id) ? (tokenizer_token_type)t->type[id] : TOKENIZER_TYPE_UNDEFINED;
}

int32_t tr_tokenizer_find(const tokenizer *t, const char *s) {
    if (!t || !s) return -1;
    return tr_tokenizer_text_find(t, s, strlen(s));
}

const char *tr_tokenizer_pre_name(const tokenizer *t) { return t ? t->pre_name : ""; }
const char *tr_tokenizer_kind_name(const tokenizer *t) {
    return !t ? "" : t->kind == TOKENIZER_KIND_SPM ? "llama: SentencePiece-style"
                                                   : "gpt2: byte-level BPE";
}
bool tr_tokenizer_add_space_prefix(const tokenizer *t) { return t && t->add_space_prefix; }
bool tr_tokenizer_is_spm(const tokenizer *t) { return t && t->kind == TOKENIZER_KIND_SPM; }

const uint8_t *tr_tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len) {
    if (!id_ok(t, id)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->bytes_off[id + 1] - t->bytes_off[id];
    return t->bytes_blob + t->bytes_off[id];
}

/* The bytes decode renders for id: control/unknown only when asked; unused
 * and undefined tokens never (llama.cpp renders neither). */
static const uint8_t *render_bytes(const tokenizer *t, int32_t id,
                                   bool render_special, size_t *len) {
    switch (t->type[id]) {
    case TOKENIZER_TYPE_CONTROL:
    case TOKENIZER_TYPE_UNKNOWN:
        if (!render_special) break;
        /* fall through */
    case TOKENIZER_TYPE_NORMAL:
    case TOKENIZER_TYPE_USER_DEFINED:
    case TOKENIZER_TYPE_BYTE:
        *len = t->bytes_off[id + 1] - t->bytes_off[id];
        return t->bytes_blob + t->bytes_off[id];
    default:
        break;
    }
    *len = 0;
    return NULL;
}

/* ---- decode ---- */

tr_status tr_tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n_ids,
                           bool render_special, char **out, size_t *len) {
    if (!t || !out || (!ids && n_ids)) return TR_ERR_INVALID_ARG;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (!id_ok(t, ids[i])) return TR_ERR_INVALID_ARG;
        size_t l;
        render_bytes(t, ids[i], render_special, &l);
        if (tr_add_overflow_size(total, l, &total)) return TR_ERR_OVERFLOW;
    }
    if (total == SIZE_MAX) return TR_ERR_OVERFLOW;
    char *buf = malloc(total + 1);
    if (!buf) return TR_ERR_NOMEM;
    size_t pos = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t l;
        const uint8_t *b = render_bytes(t, ids[i], render_special, &l);
        /* the space the encoder put in front of the text (llama.cpp's
         * detokenize drops it from the first piece the same way) */
        if (i == 0 && l && b[0] == ' ' && t->add_space_prefix) {
            b++;
            l--;
        }
        if (l) memcpy(buf + pos, b, l);
        pos += l;
    }
    buf[pos] = 0;
    *out = buf;
    if (len) *len = pos;
    return TR_OK;
}

/* ---- incremental decode ---- */

void tr_tokenizer_stream_init(tokenizer_stream *s, bool render_special) {
    memset(s, 0, sizeof *s);
    s->render_special = render_special;
}

/* Sanitizes the virtual concatenation a[0..na) + b[0..nb): complete valid
 * characters are copied, each maximal invalid subpart becomes U+FFFD, and an
 * incomplete character at the very end is returned in pend (not emitted).
 * With out == NULL only counts. Returns the bytes produced. */
static size_t utf8_stream(const uint8_t *a, size_t na, const uint8_t *b, size_t nb,
                          uint8_t *out, uint8_t *pend, uint32_t *npend) {
    /* a is at most 3 bytes: copy both into a window walked in one pass */
    size_t n = na + nb, o = 0, i = 0;
#define AT(k) ((k) < na ? a[(k)] : b[(k) - na])
    while (i < n) {
        uint8_t c = AT(i);
        if (c < 0x80) {
            if (out) out[o] = c;
            o++;
            i++;
            continue;
        }
        uint8_t win[4];
        size_t w = TR_MIN((size_t)4, n - i);
        for (size_t k = 0; k < w; k++) win[k] = AT(i + k);
        size_t need;
        size_t k = tr_utf8_partial(win, w, &need);
        if (k == need) { /* complete, valid */
            if (out) memcpy(out + o, win, k);
            o += k;
            i += k;
        } else if (k > 0 && i + k == n) { /* valid so far, input ends */
            memcpy(pend, win, k);
            *npend = (uint32_t)k;
            return o;
        } else { /* invalid: the maximal subpart (at least one byte) */
            if (out) memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += k ? k : 1;
        }
    }
#undef AT
    *npend = 0;
    return o;
}

tr_status tr_tokenizer_stream_push(tokenizer_stream *s, const tokenizer *t,
                                int32_t id, char *out, size_t out_cap,
                                size_t *out_len) {
    if (!s || !id_ok(t, id) || (!out && out_cap) || s->n_pending > 3)
        return TR_ERR_INVALID_ARG;
    size_t l;
    const uint8_t *b = render_bytes(t, id, s->render_special, &l);
    uint8_t pend[4];
    uint32_t np;
    size_t need = utf8_stream(s->pending, s->n_pending, b, l, NULL, pend, &np);
    if (need > out_cap) {
        if (out_len) *out_len = 0;
        return TR_ERR_FULL;
    }
    uint8_t old[4];
    memcpy(old, s->pending, s->n_pending);
    size_t o = utf8_stream(old, s->n_pending, b, l, (uint8_t *)out, pend, &np);
    memcpy(s->pending, pend, np);
    s->n_pending = np;
    if (out_len) *out_len = o;
    return TR_OK;
}

size_t tr_tokenizer_stream_flush(tokenizer_stream *s, char *out, size_t out_cap) {
    if (!s || s->n_pending == 0) return 0;
    if (!out || out_cap < 3) return 0;
    memcpy(out, "\xEF\xBF\xBD", 3);
    s->n_pending = 0;
    return 3;
}

/* ---- _check / _dump ---- */

tr_status tr_tokenizer_check(const tokenizer *t) {
    if (!t || t->n_vocab <= 0) return TR_ERR_INVALID_ARG;
#define CHECK_(c)                                                            \
    do {                                                                     \
        if (!(c)) {                                                          \
            tr_log(TR_LOG_ERROR, "tokenizer_check: %s (%s:%d)", #c, __FILE__, \
                   __LINE__);                                                \
            return TR_ERR_INTERNAL;                                          \
        }                                                                    \
    } while (0)
    for (int32_t id = 0; id < t->n_vocab; id++) {
        CHECK_(t->text_off[id] <= t->text_off[id + 1]);
        CHECK_(t->bytes_off[id] <= t->bytes_off[id + 1]);
        CHECK_(t->bytes_off[id + 1] - t->bytes_off[id] <= t->max_token_len);
        CHECK_(t->type[id] <= TOKENIZER_TYPE_BYTE);
        const char *s = t->text_blob + t->text_off[id];
        CHECK_(tr_tokenizer_text_find(t, s, t->text_off[id + 1] - t->text_off[id]) == id);
    }
    size_t used = 0;
    for (uint64_t i = 0; i <= t->tmap.mask; i++) used += t->tmap.slot[i].id >= 0;
    CHECK_(used == (size_t)t->n_vocab);
    /* every whole token BPE-encodes to itself, and only whole tokens are in
     * the table (spot-checked: every 7th id, to keep _check cheap) */
    for (uint64_t i = 0; i <= t->wmap.mask; i++) {
        int32_t id = t->wmap.slot[i].id;
        if (id < 0 || id % 7) continue;
        size_t l;
        const uint8_t *b = tr_tokenizer_token_bytes(t, id, &l);
        CHECK_(tr_tokenizer_whole_find(t, b, l) == id);
        tokenizer_ids ids = {0};
        CHECK_(tr_tokenizer_bpe_word(t, b, l, 2, &ids) == TR_OK);
        bool self = ids.n == 1 && ids.v[0] == id;
        free(ids.v);
        CHECK_(self);
    }
    size_t merges = 0;
    for (uint64_t i = 0; t->mmap && i <= t->mmap_mask; i++) {
        const tokenizer_merge *m = &t->mmap[i];
        if (m->key == TOKENIZER_MERGE_EMPTY) continue;
        merges++;
        int32_t a = (int32_t)(m->key >> 32), b = (int32_t)(uint32_t)m->key;
        CHECK_(id_ok(t, a) && id_ok(t, b) && id_ok(t, m->result));
        /* the merged token's text is the concatenation of the parts' */
        size_t la = t->text_off[a + 1] - t->text_off[a];
        size_t lb = t->text_off[b + 1] - t->text_off[b];
        size_t lr = t->text_off[m->result + 1] - t->text_off[m->result];
        CHECK_(la + lb == lr);
        CHECK_(memcmp(t->text_blob + t->text_off[a],
                      t->text_blob + t->text_off[m->result], la) == 0);
        CHECK_(memcmp(t->text_blob + t->text_off[b],
                      t->text_blob + t->text_off[m->result] + la, lb) == 0);
        uint32_t r;
        int32_t res;
        CHECK_(tr_tokenizer_merge_find(t, a, b, &r, &res) && r == m->rank);
    }
    CHECK_(merges == t->n_merges);
    for (int b = 0; b < 256; b++) {
        if (t->byte_tok[b] < 0) continue;
        size_t l;
        const uint8_t *p = tr_tokenizer_token_bytes(t, t->byte_tok[b], &l);
        CHECK_(l == 1 && p[0] == b);
    }
    for (int32_t i = 0; i < t->n_specials; i++) {
        int32_t id = t->specials[i];
        CHECK_(id_ok(t, id));
        uint8_t ty = t->type[id];
        CHECK_(ty == TOKENIZER_TYPE_CONTROL || ty == TOKENIZER_TYPE_USER_DEFINED ||
               ty == TOKENIZER_TYPE_UNKNOWN);
        if (i > 0) {
            int32_t p = t->specials[i - 1];
            CHECK_(t->text_off[p + 1] - t->text_off[p] >= t->text_off[id + 1] - t->text_off[id]);
        }
    }
    CHECK_(t->bos < t->n_vocab && t->eos < t->n_vocab);
    CHECK_(t->eos < 0 || (t->flags[t->eos] & TOKENIZER_FLAG_EOG));
    if (t->kind == TOKENIZER_KIND_BPE)
        CHECK_(t->n_re >= 1 && t->n_re <= TOKENIZER_MAX_RE && t->pre);
    else
        CHECK_(t->n_re == 0 && !t->pre && t->score && t->n_merges == 0);
#undef CHECK_
    return TR_OK;
}

void tr_tokenizer_dump(const tokenizer *t, FILE *fp) {
    if (!t || !fp) return;
    if (t->kind == TOKENIZER_KIND_SPM)
        fprintf(fp, "tokenizer: llama SentencePiece-style (scores, byte fallback), "
                    "add_space_prefix %s, %d tokens, longest token %zu bytes\n",
                t->add_space_prefix ? "true" : "false", t->n_vocab, t->max_token_len);
    else
        fprintf(fp, "tokenizer: gpt2 byte-level BPE, pre '%s' (%s%s), %d tokens, "
                    "%u merges (%u skipped), longest token %zu bytes\n",
                t->pre_name, t->pre->kind, t->pre->ignore_merges ? ", ignore_merges" : "",
                t->n_vocab, t->n_merges, t->n_merges_skipped, t->max_token_len);
    fprintf(fp, "  bos %d, eos %d, unk %d, add_bos %s\n", t->bos, t->eos, t->unk,
            t->add_bos ? "true" : "false");
    fprintf(fp, "  special tokens (%d, longest first):", t->n_specials);
    for (int32_t i = 0; i < t->n_specials; i++) {
        int32_t id = t->specials[i];
        fprintf(fp, " %d'%.*s'%s", id, (int)(t->text_off[id + 1] - t->text_off[id]),
                t->text_blob + t->text_off[id],
                (t->flags[id] & TOKENIZER_FLAG_EOG) ? "(eog)" : "");
    }
    fprintf(fp, "\n");
}
