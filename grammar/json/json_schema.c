/* json_schema.c — JSON Schema to grammar: the entry points of grammar.h
 * (tr_grammar_json_schema_to_ebnf, tr_grammar_compile_json_schema,
 * tr_grammar_compile_json), options, refusals and warnings.
 *
 * Layering: grammar/json (public API), over the JSON Schema pieces of
 * json_internal.h and the EBNF compiler (grammar/cfg, cfg.h). Any thread; nothing is
 * shared between calls.
 *
 * One compile: parse the schema with jansson, index it (json_ref.c),
 * ask for the root rule, build rules from the worklist until it is
 * empty (json_gen*.c), print the grammar (json_emit.c). Every byte is
 * charged to one compile context, whose time budget
 * (grammar_limits.max_compile_us) also bounds the whole translation.
 * compile_json_schema hands the text to the EBNF compiler even when it is
 * one regular rule: its lazy DFA makes only the states a document
 * visits, while the regex compiler's eager subset construction and
 * minimization cost ~1.5 ms of CPU for a 300-byte schema (13 bounded
 * whitespace runs), more than the whole EBNF compile (~0.2 ms).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "grammar/cfg/cfg.h"
#include "grammar/json/json_internal.h"

#define JS_MAX_SCHEMA_BYTES (64u << 20)

void tr_grammar_json_options_default(grammar_json_options *o) {
    memset(o, 0, sizeof *o);
    o->whitespace = GRAMMAR_JSON_WS_FLEXIBLE;
    o->numbers = GRAMMAR_JSON_NUM_CANONICAL;
    o->property_order = GRAMMAR_JSON_ORDER_SCHEMA;
    o->max_ws_run = 24;
    o->indent = 2;
    o->max_depth = 24;
}

/* ---- refusals, warnings, errors ---- */

tr_status tr_js_fail(js_ctx *x, tr_status code, const json_t *node, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tr_gcc_fail(x->cc, code, 0, "%s: %s", node ? tr_js_ptr(x, node) : "#", msg);
}

typedef struct warned {
    const json_t *node;
    const char *kw;
} warned;

void tr_js_warn(js_ctx *x, const json_t *node, const char *fmt, ...) {
    if (!x->opt.warn) return;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    x->opt.warn(x->opt.warn_ctx, node ? tr_js_ptr(x, node) : "#", msg);
    x->n_warn++;
}

tr_status tr_js_unsupported(js_ctx *x, const json_t *node, const char *keyword, const char *why) {
    if (!x->opt.lenient)
        return tr_js_fail(x, TR_ERR_UNSUPPORTED, node,
                          "keyword \"%s\" cannot be enforced: %s (lenient mode ignores it)",
                          keyword, why);
    /* one warning per (schema, keyword), however often the schema is met */
    warned *w = (warned *)x->warned;
    for (uint32_t i = 0; i < x->n_warned; i++)
        if (w[i].node == node && !strcmp(w[i].kw, keyword)) return TR_OK;
    if (x->n_warned == x->cap_warned) {
        uint32_t nc = x->cap_warned ? x->cap_warned * 2 : 16;
        warned *nw = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *nw);
        if (!nw) return x->cc->err;
        if (x->n_warned) memcpy(nw, w, x->n_warned * sizeof *nw);
        x->warned = nw;
        x->cap_warned = nc;
        w = nw;
    }
    w[x->n_warned++] = (warned){node, keyword};
    tr_js_warn(x, node, "keyword \"%s\" ignored: %s", keyword, why);
    return TR_OK;
}

tr_status tr_js_keep(js_ctx *x, json_t *v) {
    if (x->n_owned == x->cap_owned) {
        uint32_t nc = x->cap_owned ? x->cap_owned * 2 : 16;
        json_t **o = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *o);
        if (!o) {
            json_decref(v);
            return x->cc->err;
        }
        if (x->n_owned) memcpy(o, x->owned, x->n_owned * sizeof *o);
        x->owned = o;
        x->cap_owned = nc;
    }
    x->owned[x->n_owned++] = v;
    return TR_OK;
}

void tr_js_release(js_ctx *x) {
    /* synthetic nodes may hold each other in cycles (a recursive
     * schema's complement): empty them all, then drop the references */
    for (uint32_t i = 0; i < x->n_owned; i++)
        if (json_is_object(x->owned[i])) json_object_clear(x->owned[i]);
    for (uint32_t i = 0; i < x->n_owned; i++) json_decref(x->owned[i]);
    x->n_owned = 0;
}

/* ---- the compile ---- */

static tr_status check_options(const grammar_json_options *o, tr_diag *diag) {
    if (o->whitespace > GRAMMAR_JSON_WS_PRETTY)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "unknown whitespace mode %d",
                           (int)o->whitespace);
    if (o->numbers > GRAMMAR_JSON_NUM_FULL)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "unknown numbers mode %d",
                           (int)o->numbers);
    if (o->property_order > GRAMMAR_JSON_ORDER_ANY)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "unknown property_order %d",
                           (int)o->property_order);
    if (o->max_ws_run > 1000)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "max_ws_run %u is over 1000",
                           o->max_ws_run);
    if (o->indent > 16)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "indent %u is over 16", o->indent);
    if (o->max_depth > 63)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "max_depth %u is over 63", o->max_depth);
    return TR_OK;
}

/* The bound a compiled grammar's matchers put on whitespace runs (its
 * text then writes each run as an unbounded loop: see gcfg.ws_bound);
 * 0 where the text spells the bound itself (the text export, which must
 * stand alone) or there is none to count. */
static uint32_t counted_ws_bound(const grammar_json_options *o, bool automata) {
    return automata && o->whitespace == GRAMMAR_JSON_WS_FLEXIBLE ? o->max_ws_run : 0;
}

/* A budget ran out while building job j's rule: the message says where
 * in the schema (the first member the schema itself holds) and how many
 * rules were made, so the author can see which part grows. */
static void name_job(js_ctx *x, const js_job *j, uint32_t done) {
    tr_diag *d = x->cc->diag;
    if (!d) return;
    const char *where = "a node the compiler made";
    for (uint32_t i = 0; i < j->conj.n; i++)
        if (tr_js_info(x, j->conj.v[i].node)) {
            where = tr_js_ptr(x, j->conj.v[i].node);
            break;
        }
    size_t n = strlen(d->message);
    snprintf(d->message + n, sizeof d->message - n, " (while building the rule for %s, rule %u of %u)",
             where, done + 1, x->n_jobs);
}

/* The translation proper, into out (charged to cc); automata the text
 * names go to dfas. */
/* How one compile runs: the retries after a size budget change these. */
typedef struct js_mode {
    bool any_counted; /* js_ctx's */
    bool no_some;     /* js_ctx's */
    bool used_some;   /* out: a complement said "some member exists" */
} js_mode;

static tr_status translate(gcc *cc, json_t *doc, const grammar_json_options *opt,
                           js_mode *mode, js_dfas *dfas, js_buf *out) {
    /* only the compile straight to a grammar allows automata, and only
     * its grammars keep the key tracker (unique_keys) */
    js_ctx x = {.cc = cc,
                .opt = *opt,
                .doc = doc,
                .dfas = dfas,
                .keys_tracked = dfas->allowed,
                .any_counted = mode->any_counted,
                .no_some = mode->no_some};
    if (counted_ws_bound(opt, dfas->allowed))
        snprintf(x.ws_rx, sizeof x.ws_rx, "[ \\t\\n\\r]*");
    else if (opt->whitespace == GRAMMAR_JSON_WS_FLEXIBLE)
        snprintf(x.ws_rx, sizeof x.ws_rx, "[ \\t\\n\\r]{0,%u}", opt->max_ws_run);
    tr_status st = tr_js_index_build(&x);
    if (!st) st = tr_js_dialect_apply(&x);
    uint32_t root;
    if (!st) {
        js_item it = {doc, 0};
        js_conj c = {&it, 1};
        st = tr_js_rule_for(&x, &c, 0, "root", &root);
    }
    for (uint32_t done = 0; !st && done < x.n_jobs; done++) {
        js_job j = x.jobs[done];
        st = tr_js_build(&x, &j);
        if (!st) st = tr_gcc_poll_time(cc);
        if (st == TR_ERR_LIMIT) name_job(&x, &j, done);
    }
    gx_emit_opts eo = {.max_repeat = cc->lim.max_repeat};
    if (!st) st = tr_gx_emit(cc, &x.g, &eo, out);
    mode->used_some = x.used_some;
    tr_js_release(&x);
    if (st) return cc->err ? cc->err : st;
    return TR_OK;
}

/* The grammar text, the automata it names (%dfaN) and the bound its
 * matchers put on whitespace runs (counted_ws_bound); lim: the limits, its
 * time budget what the translation left of the run's. */
typedef tr_status (*js_sink)(void *ctx, const grammar_limits *lim, const char *text, size_t n,
                             const gdfa *const *ext, uint32_t n_ext, uint32_t ws_bound,
                             const js_buf *upaths);

void tr_js_dfas_free(js_dfas *d) {
    for (uint32_t i = 0; i < d->n; i++) tr_dfa_free(d->v[i]);
    d->n = 0;
}

/* jansson's parse of text whose integers beyond 64 bits are first
 * carried as exact-number strings (grammar.h). Decimals stay doubles:
 * a schema's 0.1000000000000000055511151231257827 is a double printed in
 * full, and its author, Python's jsonschema and the peers all read it as
 * 0.1 (read exactly, it refused valid instances of 8 MaskBench schemas).
 * A syntax error's position is that of the rewritten text. */
static json_t *load_exact(const char *text, size_t len, json_error_t *je) {
    char *x = NULL;
    size_t xn = 0;
    if (!tr_grammar_json_exact_numbers(text, len, true, &x, &xn)) {
        memset(je, 0, sizeof *je);
        return NULL; /* an empty message: out of memory */
    }
    json_t *doc = json_loadb(x ? x : text, x ? xn : len, JSON_DECODE_ANY | JSON_ALLOW_NUL, je);
    free(x);
    return doc;
}

/* automata: whether the text may name automata (a compile) or must
 * stand alone (the text export). */
static tr_status run(const char *schema, size_t len, const grammar_json_options *opt,
                     js_mode *mode, const grammar_limits *lim, tr_diag *diag, bool automata,
                     js_sink sink, void *ctx) {
    if (diag) memset(diag, 0, sizeof *diag);
    if (!schema && len)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL schema");
    grammar_json_options o;
    if (opt)
        o = *opt;
    else
        tr_grammar_json_options_default(&o);
    tr_status st = check_options(&o, diag);
    if (st) return st;
    if (len > JS_MAX_SCHEMA_BYTES)
        return tr_diag_set(diag, TR_ERR_LIMIT, 0, "schema of %zu bytes is over the %u limit",
                           len, JS_MAX_SCHEMA_BYTES);
    json_error_t je;
    json_t *doc = load_exact(schema ? schema : "", len, &je);
    /* jansson reports every syntax error with a message; out of memory
     * either says so or (its lexer's first buffer) leaves the text empty */
    if (!doc && (json_error_code(&je) == json_error_out_of_memory || !je.text[0]))
        return tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory reading the schema");
    if (!doc)
        return tr_diag_set_at(diag, TR_ERR_FORMAT, (uint64_t)(je.position > 0 ? je.position : 0),
                              je.line, je.column, "schema is not valid JSON: %s", je.text);
    tr_diag own = {0};
    gcc cc;
    tr_gcc_init(&cc, lim, &own);
    js_buf text;
    tr_js_buf_init(&text, &cc);
    js_buf upaths;
    tr_js_buf_init(&upaths, &cc);
    js_dfas dfas = {.allowed = automata, .upaths = automata ? &upaths : NULL};
    st = translate(&cc, doc, &o, mode, &dfas, &text);
    /* the grammar's compile gets what is left, not a budget of its own */
    if (!st) st = tr_gcc_check_time(&cc);
    if (!st) {
        grammar_limits rest = cc.lim; /* up to the deadline just checked */
        uint64_t now = tr_now_ns(); /* the clock may have passed it since */
        rest.max_compile_us = cc.deadline_ns > now ? (cc.deadline_ns - now) / 1000 : 0;
        if (rest.max_compile_us == 0) rest.max_compile_us = 1;
        st = sink(ctx, &rest, text.p ? text.p : "", text.n, (const gdfa *const *)dfas.v, dfas.n,
                  counted_ws_bound(&o, automata), &upaths);
    }
    if (st == TR_ERR_LIMIT && tr_diag_is_time_budget(diag))
        tr_diag_set(diag, TR_ERR_LIMIT, 0, "compile time budget exceeded (max_compile_us = %llu)",
                    (unsigned long long)cc.lim.max_compile_us); /* not what was left */
    tr_js_buf_free(&upaths);
    tr_js_dfas_free(&dfas);
    if (st && diag) {
        if (own.code) *diag = own;
        else if (!diag->code) tr_diag_set(diag, st, 0, "%s", tr_status_message(st));
    }
    tr_js_buf_free(&text);
    tr_gcc_deinit(&cc);
    json_decref(doc);
    return st;
}

/* Sets lim's time budget to what is left of budget_us since t0; false
 * when nothing is. */
static bool time_left(grammar_limits *lim, uint64_t budget_us, uint64_t t0) {
    uint64_t spent = (tr_now_ns() - t0) / 1000;
    if (spent >= budget_us) return false;
    lim->max_compile_us = budget_us - spent;
    return true;
}

/* run(), and when it ran out of a size budget after a complement said
 * "some member exists", once more without (*no_some then stays set for
 * the caller's later runs); a failure of that retry reports the budget.
 * diag non-NULL. */
static tr_status run_or_without_some(const char *schema, size_t len,
                                      const grammar_json_options *opt, js_mode *mode,
                                      grammar_limits *lim, uint64_t budget_us, uint64_t t0,
                                      bool *no_some, tr_diag *diag, bool automata, js_sink sink,
                                      void *ctx) {
    mode->no_some = *no_some;
    tr_status st = run(schema, len, opt, mode, lim, diag, automata, sink, ctx);
    if (st != TR_ERR_LIMIT || !mode->used_some || tr_diag_is_time_budget(diag) ||
        !time_left(lim, budget_us, t0))
        return st;
    tr_diag limit = *diag;
    mode->no_some = *no_some = true;
    st = run(schema, len, opt, mode, lim, diag, automata, sink, ctx);
    if (st && !tr_diag_is_time_budget(diag)) *diag = limit, st = TR_ERR_LIMIT; /* the budget is the reason */
    return st;
}

typedef struct text_out {
    char **text;
    size_t *len;
} text_out;

static tr_status to_text(void *ctx, const grammar_limits *lim, const char *t, size_t n,
                         const gdfa *const *ext, uint32_t n_ext, uint32_t ws_bound,
                         const js_buf *upaths) {
    (void)lim, (void)ext;
    if (n_ext || ws_bound || upaths->n) return TR_ERR_INTERNAL; /* run() was told: none */
    text_out *o = ctx;
    char *s = malloc(n + 1);
    if (!s) return TR_ERR_NOMEM;
    memcpy(s, t, n);
    s[n] = 0;
    *o->text = s;
    if (o->len) *o->len = n;
    return TR_OK;
}

tr_status tr_grammar_json_schema_to_ebnf(const char *schema_json, size_t len,
                                         const grammar_json_options *opt,
                                         const grammar_limits *limits, char **text,
                                         size_t *text_len, tr_diag *diag) {
    if (!text) return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL argument");
    text_out o = {text, text_len};
    js_mode mode = {0};
    tr_diag own;
    if (!diag) diag = &own; /* the retry reads the reason */
    grammar_limits lim;
    if (limits) lim = *limits;
    else tr_grammar_limits_default(&lim);
    bool no_some = false;
    return run_or_without_some(schema_json, len, opt, &mode, &lim, lim.max_compile_us,
                               tr_now_ns(), &no_some, diag, false, to_text, &o);
}

typedef struct compile_out {
    grammar **out;
    tr_diag *diag;
} compile_out;

static tr_status to_grammar(void *ctx, const grammar_limits *lim, const char *t, size_t n,
                            const gdfa *const *ext, uint32_t n_ext, uint32_t ws_bound,
                            const js_buf *upaths) {
    compile_out *o = ctx;
    tr_status st = tr_grammar_compile_ebnf_ext(t, n, ext, n_ext, ws_bound, lim, o->out, o->diag);
    if (st || !upaths->n) return st;
    /* the matcher's tracker keeps these arrays' string items distinct */
    grammar *g = *o->out;
    if (!(g->unique_paths = malloc(upaths->n))) {
        tr_grammar_free(g);
        *o->out = NULL;
        return TR_ERR_NOMEM;
    }
    memcpy(g->unique_paths, upaths->p, upaths->n);
    g->unique_paths_len = upaths->n;
    return TR_OK;
}

tr_status tr_grammar_compile_json_schema(const char *schema_json, size_t len,
                                         const grammar_json_options *opt,
                                         const grammar_limits *limits, grammar **out,
                                         tr_diag *diag) {
    if (!out) return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL argument");
    tr_diag own;
    if (!diag) diag = &own; /* the retries read the reason */
    /* the retries share one time budget: each gets what is left */
    grammar_limits lim;
    if (limits) lim = *limits;
    else tr_grammar_limits_default(&lim);
    uint64_t budget_us = lim.max_compile_us, t0 = tr_now_ns();
    compile_out o = {out, diag};
    /* property_order ANY keeps the set of members written in the state of
     * small objects (2^n states). Past a size budget (not the time budget:
     * that would double the wait) every object is compiled by counting
     * instead (polynomial; exact with the matcher's no-repeated-key
     * tracker), and past that in schema order: fewer texts, never more.
     * Each of these, when a complement said "some member exists", first
     * again without it (the oneOf planner's sound fallbacks; refusals of
     * `not` where it had none). */
    bool any = opt && opt->property_order == GRAMMAR_JSON_ORDER_ANY;
    bool no_some = false; /* once it ran out, never again */
    tr_status st = TR_ERR_LIMIT;
    for (int step = 0; step < (any ? 3 : 1) && st == TR_ERR_LIMIT; step++) {
        grammar_json_options so;
        if (opt) so = *opt;
        else tr_grammar_json_options_default(&so);
        if (step == 2) so.property_order = GRAMMAR_JSON_ORDER_SCHEMA;
        js_mode mode = {.any_counted = step == 1};
        if (step && (tr_diag_is_time_budget(diag) || !time_left(&lim, budget_us, t0))) break;
        st = run_or_without_some(schema_json, len, &so, &mode, &lim, budget_us, t0, &no_some, diag,
                                 true, to_grammar, &o);
    }
    if (st == TR_ERR_LIMIT && tr_diag_is_time_budget(diag) && lim.max_compile_us != budget_us)
        tr_diag_set(diag, TR_ERR_LIMIT, 0,
                    "compile time budget exceeded (max_compile_us = %llu) by the compile and its "
                    "retries after a size budget",
                    (unsigned long long)budget_us);
    if (st == TR_OK) (*out)->unique_keys = true;
    return st;
}

tr_status tr_grammar_compile_json(bool object_only, const grammar_json_options *opt,
                                  const grammar_limits *limits, grammar **out, tr_diag *diag) {
    const char *s = object_only ? "{\"type\":\"object\"}" : "true";
    return tr_grammar_compile_json_schema(s, strlen(s), opt, limits, out, diag);
}

tr_status tr_js_check_instance(const char *schema, size_t slen, const char *inst, size_t ilen,
                               bool *valid, tr_diag *diag) {
    if (diag) memset(diag, 0, sizeof *diag);
    json_error_t je;
    json_t *doc = load_exact(schema, slen, &je);
    if (!doc) return tr_diag_set(diag, TR_ERR_FORMAT, 0, "schema: %s", je.text);
    json_t *v = load_exact(inst, ilen, &je);
    if (!v) {
        json_decref(doc);
        return tr_diag_set(diag, TR_ERR_FORMAT, 0, "instance: %s", je.text);
    }
    gcc cc;
    tr_diag own = {0};
    tr_gcc_init(&cc, NULL, &own);
    js_ctx x = {.cc = &cc, .doc = doc};
    tr_grammar_json_options_default(&x.opt);
    tr_status st = tr_js_index_build(&x);
    if (!st) st = tr_js_dialect_apply(&x);
    if (!st) {
        js_item it = {doc, 0};
        js_conj c = {&it, 1};
        st = tr_js_validate(&x, &c, v, 0, valid);
    }
    if (st && diag) *diag = own;
    tr_js_release(&x);
    tr_gcc_deinit(&cc);
    json_decref(v);
    json_decref(doc);
    return st;
}
