/* context.c — the compile context of grammar/: one byte budget, one time
 * budget and a bump arena (base/arena.h) for everything a compilation
 * allocates, and the default limits those budgets come from.
 *
 * Layering: grammar/regex (regex.h), the bottom of grammar/: every
 * sub-compiler allocates through it. One gcc per compilation, used by one
 * thread; freed all at once by tr_gcc_deinit.
 *
 * Why an explicit budget: a pattern such as (a|b)*a(a|b){20} has a DFA of
 * 2^20 states and ((a{100}){100}){100} an NFA of 10^6 copies. Every
 * allocation of the parser, the NFA and the DFA is charged here (arena
 * blocks and heap tables to the one count cc->bytes), and the clock is
 * polled in every loop that can run long, so that any input ends with a
 * result or a TR_ERR_LIMIT naming the budget.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/regex/regex.h"

/* Arena blocks: 64 KiB each, a larger request a block of its own. */
#define GCC_BLOCK (64u * 1024u)

void tr_grammar_limits_default(grammar_limits *l) {
    l->max_pattern_bytes = 65536;
    l->max_nesting = 200;
    l->max_repeat = 1000;
    l->max_nfa_states = 500000;
    l->max_dfa_states = 50000;
    l->max_lazy_dfa_states = 200000;
    l->max_compile_bytes = 512ull << 20;
    l->max_compile_us = 2000000;
    l->mask_cache_bytes = 64ull << 20;
    l->max_grammar_bytes = 4u << 20;
    l->max_stacks = 4096;
}

void tr_gcc_init(gcc *cc, const grammar_limits *lim, tr_diag *diag) {
    memset(cc, 0, sizeof *cc);
    if (lim)
        cc->lim = *lim;
    else
        tr_grammar_limits_default(&cc->lim);
    cc->diag = diag;
    tr_arena_init(&cc->arena, GCC_BLOCK, GCC_BLOCK, cc->lim.max_compile_bytes);
    tr_arena_share_account(&cc->arena, &cc->bytes);
    uint64_t now = tr_now_ns();
    uint64_t span;
    if (tr_mul_overflow_u64(cc->lim.max_compile_us, 1000, &span) ||
        tr_add_overflow_u64(now, span, &cc->deadline_ns))
        cc->deadline_ns = UINT64_MAX;
}

void tr_gcc_deinit(gcc *cc) { tr_arena_deinit(&cc->arena); }

tr_status tr_gcc_fail(gcc *cc, tr_status code, uint64_t offset, const char *fmt,
                   ...) {
    if (cc->err != TR_OK) return cc->err; /* keep the first error */
    cc->err = code;
    if (cc->diag) {
        char msg[sizeof cc->diag->message];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        tr_diag_set(cc->diag, code, offset, "%s", msg);
    }
    return code;
}

static void over_budget(gcc *cc) {
    tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "compile memory budget exceeded (max_compile_bytes = %llu)",
                (unsigned long long)cc->lim.max_compile_bytes);
}

bool tr_gcc_charge(gcc *cc, size_t size) {
    uint64_t nb;
    if (tr_add_overflow_u64(cc->bytes, size, &nb) ||
        nb > cc->lim.max_compile_bytes) {
        over_budget(cc);
        return true;
    }
    cc->bytes = nb;
    return false;
}

void tr_gcc_refund(gcc *cc, size_t size) {
    cc->bytes = size > cc->bytes ? 0 : cc->bytes - size;
}

void *tr_gcc_alloc(gcc *cc, size_t size) {
    void *p = tr_arena_alloc(&cc->arena, size);
    if (p) return p;
    if (cc->arena.err == TR_ERR_LIMIT)
        over_budget(cc);
    else if (cc->arena.err == TR_ERR_OVERFLOW)
        tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "allocation size overflows");
    else
        tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    return NULL;
}

tr_status tr_gcc_grow(gcc *cc, void **p, uint32_t *cap, size_t es,
                   uint64_t need) {
    if (need <= *cap) return TR_OK;
    if (need > UINT32_MAX / 2)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "table size limit exceeded");
    uint64_t nc = *cap ? (uint64_t)*cap * 2 : 16;
    while (nc < need) nc *= 2;
    uint64_t nbytes, obytes = (uint64_t)*cap * es;
    if (tr_mul_overflow_u64(nc, es, &nbytes) || nbytes > SIZE_MAX)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "table size overflows");
    if (tr_gcc_charge(cc, (size_t)(nbytes - obytes))) return TR_ERR_LIMIT;
    void *q = realloc(*p, (size_t)nbytes);
    if (!q) {
        tr_gcc_refund(cc, (size_t)(nbytes - obytes));
        return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    }
    *p = q;
    *cap = (uint32_t)nc;
    return TR_OK;
}

tr_status tr_gcc_poll_time(gcc *cc) {
    if ((++cc->tick & 1023u) != 0) return TR_OK;
    return tr_gcc_check_time(cc);
}

#define TIME_BUDGET_MESSAGE "compile time budget exceeded"

tr_status tr_gcc_check_time(gcc *cc) {
    if (tr_now_ns() > cc->deadline_ns)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, TIME_BUDGET_MESSAGE " (max_compile_us = %llu)",
                        (unsigned long long)cc->lim.max_compile_us);
    return TR_OK;
}

bool tr_diag_is_time_budget(const tr_diag *d) {
    return d && strstr(d->message, TIME_BUDGET_MESSAGE) != NULL;
}
