/* gen.c — gen and select: the options become a backend request, the
 * request a future bound to the variable and appended to the prompt; the
 * task goes on at once (it waits only when it reads the variable or
 * needs the prompt whole again).
 *
 * select is constrained decoding over its options (a choice grammar,
 * greedy by default): one request whose output is exactly one option;
 * `select ... by logprob` scores the options instead (select_lp.c).
 * frontend/README.md, "select", compares the two.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "frontend/interp_internal.h"

#define TRY(x)                      \
    do {                            \
        tr_status s_ = (x);         \
        if (s_ != TR_OK) return s_; \
    } while (0)

#define MAX_CHOICES 1024

/* What the options evaluated to; owns the values it points into. */
typedef struct gen_args {
    tr_dsl_gen_req req;
    json_t *held[TR_DSL_GEN_OPT_COUNT_ + 1];
    int32_t n_held;
    const char *stop[TRELLIS_MAX_STOP];
    const char **choices;
    char *schema_text;
    bool has_max_tokens;
} gen_args;

static void gen_args_free(gen_args *a) {
    for (int32_t i = 0; i < a->n_held; i++) tr_dsl_unref(a->held[i]);
    free(a->choices);
    free(a->schema_text);
}

static tr_status bad(tr_dsl_task *t, const tr_dsl_genopt *o, const char *what,
                     const json_t *v) {
    return tr_dsl_fail(t, o->off, TR_ERR_INVALID_ARG, "%s must be %s, not %s",
                       tr_dsl_gen_option_names[o->opt], what, tr_dsl_type_name(v));
}

static tr_status number(tr_dsl_task *t, const tr_dsl_genopt *o, const json_t *v, double lo,
                        double hi, float *out) {
    if (!json_is_number(v)) return bad(t, o, "a number", v);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return tr_dsl_fail(t, o->off, TR_ERR_INVALID_ARG, "%s is %g, expected %g..%g",
                           tr_dsl_gen_option_names[o->opt], d, lo, hi);
    *out = (float)d;
    return TR_OK;
}

static tr_status integer(tr_dsl_task *t, const tr_dsl_genopt *o, const json_t *v, int64_t lo,
                         int64_t hi, int64_t *out) {
    if (!json_is_integer(v)) return bad(t, o, "an integer", v);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return tr_dsl_fail(t, o->off, TR_ERR_INVALID_ARG, "%s is %lld, expected %lld..%lld",
                           tr_dsl_gen_option_names[o->opt], (long long)x, (long long)lo,
                           (long long)hi);
    *out = x;
    return TR_OK;
}

static tr_status set_constraint(tr_dsl_task *t, const tr_dsl_genopt *o, gen_args *a,
                                tr_dsl_constraint_kind k) {
    if (a->req.constraint != TR_DSL_CONSTRAINT_NONE)
        return tr_dsl_fail(t, o->off, TR_ERR_INVALID_ARG,
                           "%s together with another constraint: give one of regex, "
                           "json_schema, json, choices",
                           tr_dsl_gen_option_names[o->opt]);
    a->req.constraint = k;
    return TR_OK;
}

/* choices: a non-empty list of non-empty strings */
static tr_status set_choices(tr_dsl_task *t, uint32_t off, const char *what, json_t *v,
                             gen_args *a) {
    if (!json_is_array(v) || json_array_size(v) == 0)
        return tr_dsl_fail(t, off, TR_ERR_INVALID_ARG,
                           "%s must be a non-empty list of strings, not %s", what,
                           json_is_array(v) ? "an empty list" : tr_dsl_type_name(v));
    size_t n = json_array_size(v);
    if (n > MAX_CHOICES)
        return tr_dsl_fail(t, off, TR_ERR_LIMIT, "%s has %zu options, at most %d", what, n,
                           MAX_CHOICES);
    a->choices = calloc(n, sizeof *a->choices);
    if (!a->choices) return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
    size_t longest = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(v, i);
        if (!json_is_string(c) || json_string_length(c) == 0)
            return tr_dsl_fail(t, off, TR_ERR_INVALID_ARG,
                               "option %zu of %s is %s; options are non-empty strings", i,
                               what, json_is_string(c) ? "empty" : tr_dsl_type_name(c));
        if (strlen(json_string_value(c)) != json_string_length(c))
            return tr_dsl_fail(t, off, TR_ERR_INVALID_ARG, "option %zu of %s holds a NUL",
                               i, what);
        a->choices[i] = json_string_value(c);
        longest = TR_MAX(longest, json_string_length(c));
        for (size_t k = 0; k < i; k++)
            if (strcmp(a->choices[k], a->choices[i]) == 0)
                return tr_dsl_fail(t, off, TR_ERR_INVALID_ARG,
                                   "options %zu and %zu of %s are the same, \"%.100s\"", k, i,
                                   what, a->choices[i]);
    }
    a->req.choices = a->choices;
    a->req.n_choices = (int32_t)n;
    /* a token is at least one byte: the longest option always fits */
    if (!a->has_max_tokens) a->req.max_tokens = (int32_t)TR_MIN(longest + 1, (size_t)4096);
    return TR_OK;
}

static tr_status apply_option(tr_dsl_task *t, const tr_dsl_genopt *o, json_t *v,
                              gen_args *a) {
    tr_dsl_gen_req *r = &a->req;
    int64_t x;
    switch (o->opt) {
    case TR_DSL_GEN_OPT_MAX_TOKENS:
        TRY(integer(t, o, v, 1, 1 << 20, &x));
        r->max_tokens = (int32_t)x;
        a->has_max_tokens = true;
        return TR_OK;
    case TR_DSL_GEN_OPT_TEMPERATURE: return number(t, o, v, 0, 100, &r->temperature);
    case TR_DSL_GEN_OPT_TOP_P: return number(t, o, v, 0, 1, &r->top_p);
    case TR_DSL_GEN_OPT_MIN_P: return number(t, o, v, 0, 1, &r->min_p);
    case TR_DSL_GEN_OPT_TOP_K:
        TRY(integer(t, o, v, 0, 1 << 30, &x));
        r->top_k = (int32_t)x;
        return TR_OK;
    case TR_DSL_GEN_OPT_SEED:
        TRY(integer(t, o, v, 0, INT64_MAX, &x));
        r->has_seed = true;
        r->seed = (uint64_t)x;
        return TR_OK;
    case TR_DSL_GEN_OPT_PRESENCE_PENALTY: return number(t, o, v, -2, 2, &r->presence_penalty);
    case TR_DSL_GEN_OPT_FREQUENCY_PENALTY:
        return number(t, o, v, -2, 2, &r->frequency_penalty);
    case TR_DSL_GEN_OPT_REPETITION_PENALTY:
        return number(t, o, v, 0.01, 10, &r->repetition_penalty);
    case TR_DSL_GEN_OPT_IGNORE_EOS:
        if (!json_is_boolean(v)) return bad(t, o, "true or false", v);
        r->ignore_eos = json_is_true(v);
        return TR_OK;
    case TR_DSL_GEN_OPT_STOP: {
        size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
        if (!json_is_string(v) && !json_is_array(v))
            return bad(t, o, "a string or a list of strings", v);
        if (n > TRELLIS_MAX_STOP)
            return tr_dsl_fail(t, o->off, TR_ERR_LIMIT, "%zu stop strings, at most %d", n,
                               TRELLIS_MAX_STOP);
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_is_string(v) ? v : json_array_get(v, i);
            if (!json_is_string(s)) return bad(t, o, "a string or a list of strings", s);
            size_t len = json_string_length(s);
            if (len == 0 || len > TRELLIS_MAX_STOP_LEN || strlen(json_string_value(s)) != len)
                return tr_dsl_fail(t, o->off, TR_ERR_INVALID_ARG,
                                   "stop string %zu has %zu bytes, expected 1..%d (no NUL)", i,
                                   len, TRELLIS_MAX_STOP_LEN);
            a->stop[i] = json_string_value(s);
        }
        r->stop = a->stop;
        r->n_stop = (int32_t)n;
        return TR_OK;
    }
    case TR_DSL_GEN_OPT_REGEX:
        if (!json_is_string(v) || json_string_length(v) == 0)
            return bad(t, o, "a non-empty string (a raw string r\"...\" keeps backslashes)", v);
        TRY(set_constraint(t, o, a, TR_DSL_CONSTRAINT_REGEX));
        r->constraint_text = json_string_value(v);
        return TR_OK;
    case TR_DSL_GEN_OPT_JSON_SCHEMA: {
        TRY(set_constraint(t, o, a, TR_DSL_CONSTRAINT_JSON_SCHEMA));
        json_t *schema = v;
        json_t *parsed = NULL;
        if (json_is_string(v)) {
            json_error_t je;
            parsed = json_loadb(json_string_value(v), json_string_length(v), 0, &je);
            if (!parsed)
                return tr_dsl_fail(t, o->off, TR_ERR_FORMAT,
                                   "json_schema is not JSON: %s (line %d, column %d of the "
                                   "schema)",
                                   je.text, je.line, je.column);
            schema = parsed;
        }
        if (!json_is_object(schema) && !json_is_boolean(schema)) {
            tr_status s = bad(t, o, "a JSON Schema (an object, or its JSON text)", schema);
            tr_dsl_unref(parsed);
            return s;
        }
        a->schema_text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        tr_dsl_unref(parsed);
        if (!a->schema_text) return tr_dsl_fail(t, o->off, TR_ERR_NOMEM, "out of memory");
        r->constraint_text = a->schema_text;
        return TR_OK;
    }
    case TR_DSL_GEN_OPT_JSON:
        if (!json_is_boolean(v)) return bad(t, o, "true or false", v);
        if (json_is_true(v)) TRY(set_constraint(t, o, a, TR_DSL_CONSTRAINT_JSON));
        return TR_OK;
    case TR_DSL_GEN_OPT_CHOICES:
        TRY(set_constraint(t, o, a, TR_DSL_CONSTRAINT_CHOICES));
        return set_choices(t, o->off, "choices", v, a);
    case TR_DSL_GEN_OPT_COUNT_: break;
    }
    return tr_dsl_fail(t, o->off, TR_ERR_INTERNAL, "unknown option");
}

/* ---- completion, on the backend's thread ---- */

static void gen_delta(void *user, const char *text, size_t len) {
    tr_dsl_future *f = user;
    tr_dsl_session *s = f->run->sess;
    if (!s->opt.stream || !s->opt.stream->text) return;
    pthread_mutex_lock(&s->stream_mu);
    s->opt.stream->text(s->opt.stream->user, f->task_id, f->name, text, len);
    pthread_mutex_unlock(&s->stream_mu);
}

static void gen_error(tr_dsl_future *f, tr_status code, const char *fmt, const char *a,
                      const char *b) {
    tr_dsl_error e = {0};
    e.code = code;
    e.has_location = true;
    e.offset = f->off;
    tr_dsl_locate(f->run->sess->script, &e);
    if (snprintf(e.message, sizeof e.message, fmt, a, b) < 0) e.message[0] = 0;
    tr_dsl_future_complete(f, NULL, NULL, &e);
}

static void gen_done(void *user, tr_dsl_gen_out *out) {
    tr_dsl_future *f = user;
    tr_dsl_run *run = f->run;
    atomic_fetch_add(&run->prompt_tokens, out->prompt_tokens);
    atomic_fetch_add(&run->cached_tokens, out->cached_tokens);
    atomic_fetch_add(&run->completion_tokens, out->completion_tokens);
    /* before the future completes: once it has, the run may end and go */
    if (run->on_gen_done && !atomic_exchange(&run->first_gen_done, true))
        run->on_gen_done(run->on_gen_done_user);
    char what[160];
    snprintf(what, sizeof what, "%s %s", f->kind == TR_DSL_FUT_WARM ? "fork warm-up" : "gen",
             f->kind == TR_DSL_FUT_WARM ? "" : f->name);
    if (out->status != TR_OK) {
        gen_error(f, out->status, "%s failed: %s", what, out->error[0] ? out->error : "?");
    } else if (f->constrained && strcmp(out->finish, "length") == 0) {
        char n[32];
        snprintf(n, sizeof n, "%d", f->max_tokens);
        gen_error(f, TR_ERR_LIMIT,
                  "%s stopped at max_tokens=%s before its output was complete (raise "
                  "max_tokens)",
                  what, n);
    } else {
        json_t *text = json_stringn_nocheck(out->text, out->len);
        if (!text) {
            gen_error(f, TR_ERR_NOMEM, "%s: %s", what, "out of memory");
        } else if (f->parse_json) {
            json_error_t je;
            json_t *value = json_loadb(out->text, out->len, JSON_DECODE_ANY, &je);
            if (!value) {
                char msg[400];
                snprintf(msg, sizeof msg, "%s (column %d) in: %.200s", je.text, je.column,
                         out->text);
                tr_dsl_unref(text);
                gen_error(f, TR_ERR_FORMAT, "%s: the output is not valid JSON: %s", what, msg);
            } else {
                tr_dsl_future_complete(f, value, text, NULL);
            }
        } else {
            tr_dsl_future_complete(f, tr_dsl_ref(text), text, NULL);
        }
    }
    tr_dsl_gen_out_deinit(out);
    tr_dsl_future_release(f); /* the sink's reference */
}

/* Submits r for the task's current prompt; *out: the future. */
static tr_status submit(tr_dsl_task *t, uint32_t off, tr_dsl_gen_req *r,
                        tr_dsl_future_kind kind, const char *name, bool parse_json,
                        tr_dsl_future **out) {
    char *prompt;
    size_t len;
    TRY(tr_dsl_prompt_render(t, &t->prompt, off, &prompt, &len));
    if (len == 0) {
        free(prompt);
        return tr_dsl_fail(t, off, TR_ERR_INVALID_ARG,
                           "%s with an empty prompt: put some text (or a role block) before "
                           "it",
                           kind == TR_DSL_FUT_WARM ? "fork" : "gen");
    }
    r->prompt = prompt;
    r->prompt_len = len;
    tr_dsl_session *sess = t->run->sess;
    if (!r->has_seed) { /* different samples in different branches and runs */
        r->has_seed = true;
        r->seed = sess->seed_base + atomic_fetch_add(&sess->seed_counter, 1);
    }
    r->stream = sess->opt.stream != NULL && kind == TR_DSL_FUT_GEN;
    tr_dsl_future *f = tr_dsl_future_new(kind);
    if (!f) {
        free(prompt);
        return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
    }
    f->run = t->run;
    f->name = name;
    f->off = off;
    f->parse_json = parse_json;
    f->constrained = r->constraint != TR_DSL_CONSTRAINT_NONE;
    f->max_tokens = r->max_tokens;
    f->task_id = t->id;
    tr_dsl_gen_sink sink = {gen_delta, gen_done, tr_dsl_future_ref(f)};
    char err[600] = "";
    int64_t c0 = tr_dsl_thread_cpu_ns();
    tr_status s = sess->backend->ops->submit(sess->backend, r, &sink, err, sizeof err);
    t->backend_ns += tr_dsl_thread_cpu_ns() - c0;
    free(prompt);
    r->prompt = NULL;
    if (s != TR_OK) {
        tr_dsl_future_release(f); /* the sink's, never delivered */
        tr_dsl_future_release(f);
        return tr_dsl_fail(t, off, s, "%s %s: %s", kind == TR_DSL_FUT_WARM ? "fork" : "gen",
                           name ? name : "", err);
    }
    atomic_fetch_add(&t->run->gens, 1);
    if (tr_dsl_task_track(t, f)) {
        tr_dsl_future_release(f);
        return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
    }
    *out = f;
    return TR_OK;
}

tr_status tr_dsl_warm(tr_dsl_task *t, uint32_t off) {
    tr_dsl_gen_req r;
    tr_dsl_gen_req_default(&r);
    r.max_tokens = 1;
    r.temperature = 0;
    tr_dsl_future *f = NULL;
    TRY(submit(t, off, &r, TR_DSL_FUT_WARM, NULL, false, &f));
    tr_dsl_future_wait(f);
    tr_status s = f->error.code != TR_OK ? tr_dsl_fail_with(t, &f->error) : TR_OK;
    tr_dsl_future_release(f);
    return s;
}

tr_status tr_dsl_exec_gen(tr_dsl_task *t, const tr_dsl_stmt *st) {
    bool is_select = st->kind == TR_DSL_S_SELECT;
    const char *kw = is_select ? "select" : "gen";
    tr_dsl_prompt *p = &t->prompt;
    if (p->mode == TR_DSL_MODE_CHAT && !p->open_role)
        return tr_dsl_fail(t, st->off, TR_ERR_STATE,
                           "%s outside a role block in a chat prompt: put it inside "
                           "assistant { }",
                           kw);
    gen_args a = {0};
    tr_dsl_gen_req_default(&a.req);
    a.req.temperature = 0; /* greedy unless asked: a script's output is reproducible */
    tr_status s = TR_OK;
    for (int32_t i = 0; i < st->u.gen.n_opts && s == TR_OK; i++) {
        const tr_dsl_genopt *o = &st->u.gen.opts[i];
        json_t *v;
        s = tr_dsl_eval(t, o->value, &v);
        if (s) break;
        a.held[a.n_held++] = v;
        s = apply_option(t, o, v, &a);
    }
    if (s == TR_OK && is_select) {
        json_t *v;
        s = tr_dsl_eval(t, st->u.gen.from, &v);
        if (s == TR_OK) {
            a.held[a.n_held++] = v;
            a.req.constraint = TR_DSL_CONSTRAINT_CHOICES;
            s = set_choices(t, st->u.gen.from->off, "select's options", v, &a);
            if (s == TR_OK && st->u.gen.by_logprob) { /* scored, not generated */
                s = tr_dsl_select_by_logprob(t, st, v);
                gen_args_free(&a);
                return s;
            }
        }
    }
    tr_dsl_future *f = NULL;
    bool parse_json = a.req.constraint == TR_DSL_CONSTRAINT_JSON ||
                      a.req.constraint == TR_DSL_CONSTRAINT_JSON_SCHEMA;
    if (s == TR_OK) s = submit(t, st->off, &a.req, TR_DSL_FUT_GEN, st->u.gen.name, parse_json, &f);
    gen_args_free(&a);
    if (s) return s;
    if (p->mode == TR_DSL_MODE_EMPTY) p->mode = TR_DSL_MODE_TEXT;
    if (tr_dsl_prompt_push(p, TR_DSL_ITEM_FUT, NULL, f, NULL) ||
        tr_dsl_env_set(&t->frame->env, st->u.gen.name, NULL, f, true)) {
        tr_dsl_future_release(f);
        return tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
    }
    tr_dsl_future_release(f);
    return TR_OK;
}
