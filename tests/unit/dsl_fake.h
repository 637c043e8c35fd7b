/* dsl_fake.h — a fake backend for the DSL's tests: it answers each
 * generation from a rule (choices: the chosen option; JSON: a fixed
 * object; regex: "42"; else "A<n>"), after delay_ms on a thread of its own
 * (0: before submit returns), and records every request (prompt, options,
 * the order of submissions and completions, the most in flight at once).
 * Chat prompts are rendered with the real ChatML renderer. */
#ifndef TR_TESTS_DSL_FAKE_H
#define TR_TESTS_DSL_FAKE_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frontend/backend.h"

#define FAKE_MAX 512

typedef struct fake_backend {
    tr_dsl_backend base;
    pthread_mutex_t mu;
    int delay_ms;
    int n, inflight, max_inflight, done;
    char *prompts[FAKE_MAX];
    tr_dsl_gen_req reqs[FAKE_MAX];   /* scalar fields only */
    char *ctext[FAKE_MAX];           /* constraint text */
    char *choices[FAKE_MAX];         /* choices joined by '|' */
    char *stop0[FAKE_MAX];
    int done_before[FAKE_MAX];       /* completions seen when submitted */
    pthread_t threads[FAKE_MAX];
    int n_threads;
    int pick;                        /* which choice to answer */
    const char *json_answer;
    const char *fail_submit;         /* a message: submit fails */
    const char *fail_done;           /* a message: the generation fails */
    const char *finish;              /* "stop" (default) or "length" */
    char *(*answer)(struct fake_backend *f, int index, const char *prompt);
    /* prompt log-probs (select by logprob): one entry per prompt byte from
     * the start asked (the fake's tokens are bytes), each score(prompt),
     * default -1; NAN at position 0; none at all when no_plp */
    double (*score)(const char *prompt);
    bool no_plp;
} fake_backend;

typedef struct fake_job {
    fake_backend *f;
    int index;
    tr_dsl_gen_sink sink;
    bool stream;
} fake_job;

static void fake_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fake_complete(fake_job *j) {
    fake_backend *f = j->f;
    tr_dsl_gen_out out = {0};
    out.finish = f->finish ? f->finish : "stop";
    out.prompt_tokens = (int32_t)strlen(f->prompts[j->index]);
    out.cached_tokens = out.prompt_tokens / 2;
    out.completion_tokens = 3;
    const tr_dsl_gen_req *r = &f->reqs[j->index];
    char *text = NULL;
    if (f->fail_done) {
        out.status = TR_ERR_IO;
        out.finish = "error";
        snprintf(out.error, sizeof out.error, "%s", f->fail_done);
    } else if (f->answer) {
        text = f->answer(f, j->index, f->prompts[j->index]);
    } else if (r->constraint == TR_DSL_CONSTRAINT_CHOICES) {
        const char *c = f->choices[j->index];
        int k = 0;
        while (k < f->pick && strchr(c, '|')) {
            c = strchr(c, '|') + 1;
            k++;
        }
        size_t n = strcspn(c, "|");
        text = strndup(c, n);
    } else if (r->constraint == TR_DSL_CONSTRAINT_JSON ||
               r->constraint == TR_DSL_CONSTRAINT_JSON_SCHEMA) {
        text = strdup(f->json_answer ? f->json_answer : "{\"name\": \"Ada\", \"age\": 36}");
    } else if (r->constraint == TR_DSL_CONSTRAINT_REGEX) {
        text = strdup("42");
    } else {
        char buf[32];
        snprintf(buf, sizeof buf, "A%d", j->index);
        text = strdup(buf);
    }
    if (r->prompt_logprobs && !f->no_plp && !f->fail_done) {
        int32_t n = out.prompt_tokens;
        int32_t start = r->prompt_logprobs_start < 0 ? n + r->prompt_logprobs_start
                                                     : r->prompt_logprobs_start;
        if (start >= 0 && start < n) {
            out.prompt_logprobs = malloc((size_t)(n - start) * sizeof(float));
            out.n_prompt_logprobs = n - start;
            double v = f->score ? f->score(f->prompts[j->index]) : -1.0;
            for (int32_t k = 0; k < n - start; k++)
                out.prompt_logprobs[k] = start + k == 0 ? NAN : (float)v;
        }
    }
    if (r->max_tokens == 0 && !f->fail_done) { /* prefill only: no text */
        free(text);
        text = strdup("");
    }
    if (text) {
        if (j->stream && j->sink.delta) {
            size_t half = strlen(text) / 2;
            j->sink.delta(j->sink.user, text, half);
            j->sink.delta(j->sink.user, text + half, strlen(text) - half);
        }
        out.text = text;
        out.len = strlen(text);
    }
    pthread_mutex_lock(&f->mu);
    f->inflight--;
    f->done++;
    pthread_mutex_unlock(&f->mu);
    j->sink.done(j->sink.user, &out);
    free(out.text);
    free(out.prompt_logprobs);
    free(j);
}

static void *fake_thread(void *arg) {
    fake_job *j = arg;
    fake_sleep_ms(j->f->delay_ms);
    fake_complete(j);
    return NULL;
}

static tr_status fake_submit(tr_dsl_backend *b, const tr_dsl_gen_req *r,
                             const tr_dsl_gen_sink *sink, char *err, size_t cap) {
    fake_backend *f = (fake_backend *)b;
    if (f->fail_submit) {
        snprintf(err, cap, "%s", f->fail_submit);
        return TR_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&f->mu);
    if (f->n >= FAKE_MAX) {
        pthread_mutex_unlock(&f->mu);
        snprintf(err, cap, "fake: too many requests");
        return TR_ERR_LIMIT;
    }
    int i = f->n++;
    f->prompts[i] = strndup(r->prompt, r->prompt_len);
    f->reqs[i] = *r;
    f->reqs[i].prompt = NULL;
    f->ctext[i] = r->constraint_text ? strdup(r->constraint_text) : NULL;
    f->stop0[i] = r->n_stop ? strdup(r->stop[0]) : NULL;
    if (r->n_choices) {
        size_t len = 1;
        for (int k = 0; k < r->n_choices; k++) len += strlen(r->choices[k]) + 1;
        f->choices[i] = calloc(1, len);
        for (int k = 0; k < r->n_choices; k++) {
            if (k) strcat(f->choices[i], "|");
            strcat(f->choices[i], r->choices[k]);
        }
    }
    f->done_before[i] = f->done;
    f->inflight++;
    if (f->inflight > f->max_inflight) f->max_inflight = f->inflight;
    fake_job *j = calloc(1, sizeof *j);
    j->f = f;
    j->index = i;
    j->sink = *sink;
    j->stream = r->stream;
    bool threaded = f->delay_ms > 0;
    if (threaded) pthread_create(&f->threads[f->n_threads++], NULL, fake_thread, j);
    pthread_mutex_unlock(&f->mu);
    if (!threaded) fake_complete(j);
    return TR_OK;
}

static tr_status fake_render(tr_dsl_backend *b, const trellis_message *m, int32_t n,
                             bool gen_prompt, char **out, size_t *len, char *err, size_t cap) {
    (void)b;
    return (tr_status)trellis_chat_template_render("chatml", m, n, gen_prompt, out, len, err,
                                                   cap);
}

static void fake_join(fake_backend *f) {
    for (int i = 0; i < f->n_threads; i++) pthread_join(f->threads[i], NULL);
    f->n_threads = 0;
}

static void fake_free(tr_dsl_backend *b) {
    fake_backend *f = (fake_backend *)b;
    fake_join(f);
    for (int i = 0; i < f->n; i++) {
        free(f->prompts[i]);
        free(f->ctext[i]);
        free(f->choices[i]);
        free(f->stop0[i]);
    }
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static const tr_dsl_backend_ops fake_ops = {"fake", fake_submit, fake_render, NULL, fake_free};

static fake_backend *fake_new(int delay_ms) {
    fake_backend *f = calloc(1, sizeof *f);
    f->base.ops = &fake_ops;
    f->delay_ms = delay_ms;
    pthread_mutex_init(&f->mu, NULL);
    return f;
}

#endif
