/* select_lp.c — `select NAME from OPTIONS by logprob`: each option scored
 * by the mean log-probability of its tokens given the prompt, the best
 * one bound (frontend/README.md, "select", says when to use which).
 *
 * Layering: frontend (interpreter), through the backend interface only.
 *
 * How, as SGLang's frontend does it: the prompt alone is prefilled first
 * (max_tokens 0: its token count P, and its KV cached for what follows);
 * then every option is sent at once as prompt + option, prefill only,
 * asking for the prompt log-probs from token position P - 1 on. The score
 * of an option is the mean of those log-probs: its own tokens, and the
 * prompt's last token, included so that an option whose first characters
 * merge with the prompt's last token (a space, say) is scored on the token
 * the model actually reads there. Ties go to the earlier option. It runs
 * within the task (the task waits; other tasks go on): n + 1 prefill
 * requests, no sampling, so temperature and seed mean nothing here.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "frontend/interp_internal.h"

typedef struct score_slot {
    struct score_wait *w;
    tr_dsl_gen_out out;
} score_slot;

typedef struct score_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t left;
} score_wait;

static void score_done(void *user, tr_dsl_gen_out *out) {
    score_slot *s = user;
    pthread_mutex_lock(&s->w->mu);
    s->out = *out; /* taken over: out's memory is ours now */
    memset(out, 0, sizeof *out);
    s->w->left--;
    pthread_cond_broadcast(&s->w->cv);
    pthread_mutex_unlock(&s->w->mu);
}

/* Submits prompt[0..len) prefill-only into slots[k]; the prompt's
 * log-probs from `start` when start >= 0. */
static tr_status score_submit(tr_dsl_task *t, uint32_t off, score_slot *slot, const char *prompt,
                              size_t len, int32_t start) {
    tr_dsl_gen_req r;
    tr_dsl_gen_req_default(&r);
    r.prompt = prompt;
    r.prompt_len = len;
    r.max_tokens = 0;
    r.temperature = 0;
    r.prompt_logprobs = start >= 0;
    r.prompt_logprobs_start = start >= 0 ? start : 0;
    tr_dsl_gen_sink sink = {NULL, score_done, slot};
    char err[600] = "";
    tr_dsl_session *sess = t->run->sess;
    int64_t c0 = tr_dsl_thread_cpu_ns();
    tr_status s = sess->backend->ops->submit(sess->backend, &r, &sink, err, sizeof err);
    t->backend_ns += tr_dsl_thread_cpu_ns() - c0;
    if (s != TR_OK) return tr_dsl_fail(t, off, s, "select by logprob: %s", err);
    atomic_fetch_add(&t->run->gens, 1);
    return TR_OK;
}

static void score_wait_all(score_wait *w) {
    pthread_mutex_lock(&w->mu);
    while (w->left > 0) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void account(tr_dsl_task *t, const tr_dsl_gen_out *o) {
    atomic_fetch_add(&t->run->prompt_tokens, o->prompt_tokens);
    atomic_fetch_add(&t->run->cached_tokens, o->cached_tokens);
}

/* The mean of the finite log-probs of o; false when it has none. */
static bool mean_logprob(const tr_dsl_gen_out *o, double *out) {
    double sum = 0;
    int32_t n = 0;
    for (int32_t i = 0; i < o->n_prompt_logprobs; i++) {
        if (isnan(o->prompt_logprobs[i])) continue;
        sum += o->prompt_logprobs[i];
        n++;
    }
    if (n == 0) return false;
    *out = sum / n;
    return true;
}

/* Scores options against the prompt; *best the index chosen. */
static tr_status score_options(tr_dsl_task *t, uint32_t off, const char *prompt, size_t len,
                               const char *const *options, int32_t n, int32_t *best) {
    score_wait w = {.left = 1};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    score_slot *slots = calloc((size_t)n + 1, sizeof *slots);
    char **texts = calloc((size_t)n, sizeof *texts);
    tr_status s = slots && texts ? TR_OK : tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
    int32_t sent = 0;
    if (s == TR_OK) {
        slots[n].w = &w;
        s = score_submit(t, off, &slots[n], prompt, len, -1);
        if (s != TR_OK) w.left = 0;
        score_wait_all(&w);
    }
    if (s == TR_OK && slots[n].out.status != TR_OK)
        s = tr_dsl_fail(t, off, slots[n].out.status, "select by logprob: the prompt: %s",
                        slots[n].out.error);
    int32_t start = s == TR_OK ? TR_MAX(slots[n].out.prompt_tokens - 1, 0) : 0;
    if (s == TR_OK) account(t, &slots[n].out);
    for (int32_t i = 0; s == TR_OK && i < n; i++) {
        size_t ol = strlen(options[i]);
        texts[i] = malloc(len + ol + 1);
        if (!texts[i]) {
            s = tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(texts[i], prompt, len);
        memcpy(texts[i] + len, options[i], ol + 1);
        slots[i].w = &w;
        pthread_mutex_lock(&w.mu);
        w.left++;
        pthread_mutex_unlock(&w.mu);
        s = score_submit(t, off, &slots[i], texts[i], len + ol, start);
        if (s != TR_OK) {
            pthread_mutex_lock(&w.mu);
            w.left--;
            pthread_mutex_unlock(&w.mu);
        } else {
            sent++;
        }
    }
    score_wait_all(&w); /* every submitted one, even after a failure */
    double top = -INFINITY;
    for (int32_t i = 0; i < sent && s == TR_OK; i++) {
        const tr_dsl_gen_out *o = &slots[i].out;
        account(t, o);
        double m;
        if (o->status != TR_OK)
            s = tr_dsl_fail(t, off, o->status, "select by logprob: option %d: %s", (int)i,
                            o->error);
        else if (!mean_logprob(o, &m))
            s = tr_dsl_fail(t, off, TR_ERR_FORMAT,
                            "select by logprob: option %d came back without log-probs (a "
                            "server that does not return input_token_logprobs?)",
                            (int)i);
        else if (m > top) {
            top = m;
            *best = i;
        }
    }
    for (int32_t i = 0; slots && i <= n; i++) tr_dsl_gen_out_deinit(&slots[i].out);
    for (int32_t i = 0; texts && i < n; i++) free(texts[i]);
    free(slots);
    free(texts);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return s;
}

tr_status tr_dsl_select_by_logprob(tr_dsl_task *t, const tr_dsl_stmt *st, json_t *options) {
    if (st->u.gen.n_opts > 0)
        return tr_dsl_fail(t, st->u.gen.opts[0].off, TR_ERR_INVALID_ARG,
                           "select by logprob takes no options: it samples nothing, it "
                           "scores each option");
    int32_t n = (int32_t)json_array_size(options);
    const char **texts = calloc((size_t)n, sizeof *texts);
    if (!texts) return tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) texts[i] = json_string_value(json_array_get(options, i));
    char *prompt = NULL; /* set only on success */
    size_t len = 0;
    tr_status s = tr_dsl_prompt_render(t, &t->prompt, st->off, &prompt, &len);
    if (s == TR_OK && len == 0)
        s = tr_dsl_fail(t, st->off, TR_ERR_INVALID_ARG,
                        "select with an empty prompt: put some text (or a role block) "
                        "before it");
    int32_t best = 0;
    if (s == TR_OK) s = score_options(t, st->off, prompt, len, texts, n, &best);
    if (s == TR_OK) {
        tr_dsl_prompt *p = &t->prompt;
        json_t *v = json_array_get(options, (size_t)best);
        if (p->mode == TR_DSL_MODE_EMPTY) p->mode = TR_DSL_MODE_TEXT;
        if (tr_dsl_prompt_push(p, TR_DSL_ITEM_TEXT, v, NULL, NULL) ||
            tr_dsl_env_set(&t->frame->env, st->u.gen.name, v, NULL, true))
            s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
    }
    free(prompt);
    free(texts);
    return s;
}
