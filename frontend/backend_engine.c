/* backend_engine.c — the in-process backend: generations go to a
 * trellis_engine through include/trellis.h, nothing else.
 *
 * One pump thread takes the engine's events (trellis_wait) and completes
 * each generation through its sink; submissions come from the
 * interpreter's task threads, concurrently (trellis_submit tokenizes on
 * the caller's thread, so prompts are tokenized in parallel).
 *
 * Constraints: regex -> request.regex; choices, JSON Schema and any JSON
 * object -> a grammar handle (trellis_grammar_compile*, on the submitting
 * task's thread). Both go through the engine's grammar cache, so a
 * select or schema used by every run of a batch compiles once and its
 * token masks are shared. A constraint the engine cannot compile (a bad
 * schema, a keyword it cannot enforce) fails with the engine's message.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/backend_internal.h"
#include "frontend/value.h"

typedef struct engine_backend {
    tr_dsl_backend base;
    trellis_engine *e;
    pthread_t pump;
    atomic_bool stop;
    atomic_int inflight;
} engine_backend;

typedef struct pending {
    tr_dsl_gen_sink sink;
    bool stream;
    bool lost; /* a delta could not be kept: the text is incomplete */
    tr_dsl_buf text;
    bool want_plp;
    float *plp; /* the prompt's log-probs, from whichever event had them */
    int32_t n_plp;
} pending;

static void keep_plp(pending *p, const trellis_event *ev) {
    if (!ev->prompt_logprobs || p->plp) return;
    p->plp = malloc((size_t)ev->n_prompt_logprobs * sizeof *p->plp + 1);
    if (!p->plp) return; /* deliver reports it */
    for (int32_t i = 0; i < ev->n_prompt_logprobs; i++)
        p->plp[i] = ev->prompt_logprobs[i].logprob;
    p->n_plp = ev->n_prompt_logprobs;
}

static void deliver(pending *p, const trellis_event *ev) {
    tr_dsl_gen_out out = {0};
    out.finish = trellis_finish_name(ev->finish);
    out.prompt_tokens = ev->metrics.prompt_tokens;
    out.cached_tokens = ev->metrics.cached_tokens;
    out.completion_tokens = ev->metrics.completion_tokens;
    if (p->lost || !tr_dsl_buf_put(&p->text, ev->text, ev->text_len)) {
        out.status = TR_ERR_NOMEM;
        snprintf(out.error, sizeof out.error, "out of memory");
    } else if (ev->finish == TRELLIS_FINISH_ERROR) {
        out.status = ev->status ? ev->status : TR_ERR_INTERNAL;
        snprintf(out.error, sizeof out.error, "%s", ev->error);
    } else if (ev->finish == TRELLIS_FINISH_CANCELLED) {
        out.status = TR_ERR_CANCELLED;
        snprintf(out.error, sizeof out.error, "the engine cancelled the generation");
    }
    if (out.status == TR_OK && p->want_plp && !p->plp) {
        out.status = TR_ERR_NOMEM;
        snprintf(out.error, sizeof out.error, "no prompt log-probs (out of memory)");
    }
    if (out.status == TR_OK) {
        out.text = p->text.p;
        out.len = p->text.len;
        p->text.p = NULL;
        out.prompt_logprobs = p->plp;
        out.n_prompt_logprobs = p->n_plp;
        p->plp = NULL;
    }
    free(p->plp);
    tr_dsl_buf_free(&p->text);
    p->sink.done(p->sink.user, &out);
    tr_dsl_gen_out_deinit(&out);
}

static void *pump_main(void *arg) {
    engine_backend *b = arg;
    for (;;) {
        if (atomic_load(&b->stop) && atomic_load(&b->inflight) == 0) break;
        trellis_event *ev;
        if (trellis_wait(b->e, 50, &ev) != 1) continue;
        pending *p = ev->user;
        keep_plp(p, ev);
        if (ev->kind == TRELLIS_EVENT_DELTA) {
            if (p->stream && p->sink.delta && ev->text_len)
                p->sink.delta(p->sink.user, ev->text, ev->text_len);
            if (!tr_dsl_buf_put(&p->text, ev->text, ev->text_len)) p->lost = true;
        } else {
            if (p->stream && p->sink.delta && ev->text_len)
                p->sink.delta(p->sink.user, ev->text, ev->text_len);
            deliver(p, ev);
            free(p);
            atomic_fetch_sub(&b->inflight, 1);
        }
        trellis_event_free(ev);
    }
    return NULL;
}

static tr_status fail(char *err, size_t cap, tr_status code, const char *msg) {
    snprintf(err, cap, "%s", msg);
    return code;
}

static tr_status engine_submit(tr_dsl_backend *base, const tr_dsl_gen_req *r,
                               const tr_dsl_gen_sink *sink, char *err, size_t cap) {
    engine_backend *b = (engine_backend *)base;
    trellis_request q;
    trellis_request_default(&q);
    q.prompt = r->prompt;
    q.prompt_len = r->prompt_len;
    q.parse_special = true; /* chat markers are the template's special tokens */
    q.temperature = r->temperature;
    q.top_p = r->top_p;
    q.top_k = r->top_k;
    q.min_p = r->min_p;
    q.presence_penalty = r->presence_penalty;
    q.frequency_penalty = r->frequency_penalty;
    q.repetition_penalty = r->repetition_penalty;
    if (r->has_seed) q.seed = r->seed;
    q.max_tokens = r->max_tokens;
    q.stop = r->stop;
    q.n_stop = r->n_stop;
    q.ignore_eos = r->ignore_eos;
    q.stream = r->stream;
    q.prompt_logprobs = r->prompt_logprobs;
    q.prompt_logprobs_start = r->prompt_logprobs ? r->prompt_logprobs_start : 0;
    trellis_grammar *g = NULL;
    int rc = TRELLIS_OK;
    switch (r->constraint) {
    case TR_DSL_CONSTRAINT_NONE: break;
    case TR_DSL_CONSTRAINT_REGEX: q.regex = r->constraint_text; break;
    case TR_DSL_CONSTRAINT_CHOICES:
        rc = trellis_grammar_compile_choices(b->e, r->choices, r->n_choices, &g, err, cap);
        break;
    case TR_DSL_CONSTRAINT_JSON_SCHEMA:
        rc = trellis_grammar_compile(b->e, TRELLIS_GRAMMAR_JSON_SCHEMA, r->constraint_text, 0,
                                     NULL, &g, err, cap);
        break;
    case TR_DSL_CONSTRAINT_JSON:
        rc = trellis_grammar_compile(b->e, TRELLIS_GRAMMAR_JSON_OBJECT, NULL, 0, NULL, &g, err,
                                     cap);
        break;
    }
    if (rc != TRELLIS_OK) return (tr_status)rc;
    q.grammar = g;
    pending *p = calloc(1, sizeof *p);
    if (!p) {
        trellis_grammar_release(g);
        return fail(err, cap, TR_ERR_NOMEM, "out of memory");
    }
    p->sink = *sink;
    p->stream = r->stream;
    p->want_plp = r->prompt_logprobs;
    q.user = p;
    atomic_fetch_add(&b->inflight, 1);
    rc = trellis_submit(b->e, &q, NULL, err, cap);
    trellis_grammar_release(g); /* the request holds its own reference */
    if (rc != TRELLIS_OK) {
        atomic_fetch_sub(&b->inflight, 1);
        free(p);
        return (tr_status)rc;
    }
    return TR_OK;
}

static tr_status engine_render(tr_dsl_backend *base, const trellis_message *m, int32_t n,
                               bool gen_prompt, char **out, size_t *len, char *err,
                               size_t cap) {
    engine_backend *b = (engine_backend *)base;
    return (tr_status)trellis_chat_render(b->e, m, n, gen_prompt, out, len, err, cap);
}

static void engine_stats(tr_dsl_backend *base, tr_dsl_backend_stats *out) {
    engine_backend *b = (engine_backend *)base;
    trellis_stats st;
    trellis_get_stats(b->e, &st);
    out->known = true;
    out->prompt_tokens = st.prompt_tokens;
    out->cached_tokens = st.cached_prompt_tokens;
}

static void engine_free(tr_dsl_backend *base) {
    engine_backend *b = (engine_backend *)base;
    atomic_store(&b->stop, true);
    pthread_join(b->pump, NULL);
    free(b);
}

static const tr_dsl_backend_ops engine_ops = {
    "engine", engine_submit, engine_render, engine_stats, engine_free,
};

tr_status tr_dsl_backend_engine_new(trellis_engine *e, tr_dsl_backend **out, char *err,
                                    size_t cap) {
    engine_backend *b = calloc(1, sizeof *b);
    if (!b) return fail(err, cap, TR_ERR_NOMEM, "out of memory");
    b->base.ops = &engine_ops;
    b->e = e;
    if (pthread_create(&b->pump, NULL, pump_main, b) != 0) {
        free(b);
        return fail(err, cap, TR_ERR_NOMEM, "cannot start the event thread");
    }
    *out = &b->base;
    return TR_OK;
}
