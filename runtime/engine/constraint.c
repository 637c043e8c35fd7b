/* constraint.c — constraint ops over a grammar_matcher, and jump-forward
 * re-encoding (see constraint_internal.h).
 *
 * Layering: runtime/engine; used by the engine thread (step.c, submit.c).
 * No global state.
 */
#include "runtime/engine/constraint_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- ops over a bare grammar_matcher ---- */

static int gm_fill(void *m, uint64_t *mask, size_t n_words) {
    return tr_grammar_matcher_fill_mask(m, mask, n_words);
}
static int gm_accept(void *m, int32_t tok) {
    return tr_grammar_matcher_accept_token(m, tok);
}
static bool gm_done(void *m) {
    return tr_grammar_matcher_is_terminated(m) ||
           (tr_grammar_matcher_is_accepting(m) && !tr_grammar_matcher_can_continue(m));
}
static void gm_free(void *m) { (void)m; /* borrowed */ }
static int gm_forced(void *m, uint8_t *buf, size_t cap, size_t *len) {
    return tr_grammar_matcher_forced_bytes(m, buf, cap, len);
}
static int gm_rollback(void *m, int32_t n) {
    if (n < 0) return TR_ERR_INVALID_ARG;
    return tr_grammar_matcher_rollback(m, (uint32_t)n);
}

const trellis_constraint_ops tr_constraint_matcher_ops = {
    .fill_mask = gm_fill,
    .accept = gm_accept,
    .is_done = gm_done,
    .clone = NULL,
    .free = gm_free,
    .forced_bytes = gm_forced,
    .rollback = gm_rollback,
};

/* ---- jump-forward ---- */

tr_status tr_constraint_jump_forward(const tokenizer *tok,
                                  const trellis_constraint_ops *ops,
                                  void *state, int32_t sampled, int32_t room,
                                  int32_t *out, int32_t *n_out) {
    out[0] = sampled;
    *n_out = 1;
    if (room < 1) return TR_ERR_INVALID_ARG;
    if (!ops->forced_bytes || !ops->rollback) return TR_OK;
    if (tr_tokenizer_is_special(tok, sampled)) return TR_OK;
    size_t tl = 0;
    const uint8_t *tb = tr_tokenizer_token_bytes(tok, sampled, &tl);
    if (!tb || tl == 0 || tl > 64) return TR_OK;
    uint8_t text[64 + CONSTRAINT_JF_MAX_BYTES];
    size_t fl = 0;
    if (ops->forced_bytes(state, text + tl, CONSTRAINT_JF_MAX_BYTES, &fl) != 0 ||
        fl == 0 || fl > CONSTRAINT_JF_MAX_BYTES)
        return TR_OK;
    memcpy(text, tb, tl);
    int32_t *ids = NULL;
    size_t n = 0;
    if (tr_tokenizer_encode(tok, (const char *)text, tl + fl, false, &ids, &n) !=
            TR_OK ||
        n == 0) {
        free(ids);
        return TR_OK;
    }
    if (ops->rollback(state, 1) != 0) { /* unchanged: keep the sampled one */
        free(ids);
        return TR_OK;
    }
    int32_t max = TR_MIN(room, CONSTRAINT_JF_MAX_TOKENS);
    int32_t got = 0;
    size_t covered = 0;
    while ((size_t)got < n && got < max && ops->accept(state, ids[got]) == 0) {
        size_t l = 0;
        tr_tokenizer_token_bytes(tok, ids[got], &l);
        covered += l;
        out[got] = ids[got];
        got++;
    }
    free(ids);
    if (got > 0 && covered < tl) {
        /* cut by room before the sampled token's bytes were covered again
         * (e.g. `" {"` re-split as `" "` `{"`): keeping it would lose text
         * the model chose; undo and keep the sampled token */
        int st = ops->rollback(state, got);
        if (st != 0) return (tr_status)st; /* a broken constraint */
        got = 0;
    }
    if (got == 0) {
        /* the state is where it was after the rollback: re-accept */
        out[0] = sampled;
        int st = ops->accept(state, sampled);
        if (st != 0) return (tr_status)st;
        got = 1;
    }
    *n_out = got;
    return TR_OK;
}
