/* gen_output.c — `generate`'s output: the engine's events for one
 * request, printed sample after sample (see gen_internal.h).
 *
 * The engine runs the n samples side by side and their events interleave.
 * Sample `cur` is printed as its events come; the text of later samples
 * is kept until their turn, and a DONE event is kept until its sample is
 * printed, so that the output reads sample 0, then 1, ... whatever order
 * they finish in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli/cli_json_internal.h"
#include "app/cli/gen_internal.h"

typedef struct sample {
    char *text; /* text mode: what arrived before the sample's turn */
    size_t len, cap;
    int32_t n_tokens;    /* output tokens so far */
    trellis_event *done; /* kept until printed */
} sample;

typedef struct out_state {
    trellis_engine *e;
    const gen_opts *o;
    const gen_facts *f;
    sample *s;
    int32_t n, cur;
    int rc;
} out_state;

static const char *piece(const void *e, int32_t id, size_t *len) {
    return trellis_token_text(e, id, len);
}

static bool keep_text(sample *s, const char *t, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *p = realloc(s->text, cap);
        if (!p) return false;
        s->text = p;
        s->cap = cap;
    }
    memcpy(s->text + s->len, t, n);
    s->len += n;
    return true;
}

static void print_header(const out_state *st) {
    if (st->n > 1 && !st->o->json) printf("--- sample %d of %d ---\n", st->cur + 1, st->n);
}


/* The stop string or pattern that ended a sample (the DONE event's
 * stop_index counts the strings first), or NULL. */
static const char *stop_text(const gen_facts *f, int32_t i) {
    if (i < 0) return NULL;
    if (i < f->n_stops) return f->stops[i];
    i -= f->n_stops;
    return i < f->n_stop_regexes ? f->stop_regexes[i] : NULL;
}
static void print_json(out_state *st, const trellis_event *ev) {
    const gen_facts *f = st->f;
    cli_sample_json j = {
        .index = ev->index, .n_samples = st->n,
        .text = ev->text, .text_len = ev->text_len,
        .tokens = ev->tokens, .n_tokens = ev->n_tokens,
        .logprobs = st->o->logprobs >= 0 ? ev->logprobs : NULL,
        .finish = trellis_finish_name(ev->finish),
        .stop = stop_text(f, ev->stop_index),
        .stop_token = ev->stop_token,
        .error = ev->finish == TRELLIS_FINISH_ERROR ? ev->error : NULL,
        .metrics = ev->metrics, .load_ms = f->load_ms, .threads = f->threads,
        .model_load = f->model_load, .kv_type_k = f->kv_type_k, .kv_type_v = f->kv_type_v,
        .constraint = f->constraint ? f->constraint->kind : NULL,
        .constraint_ms = f->constraint ? f->constraint->compile_ms : 0,
    };
    char *s = tr_cli_json_sample(&j, piece, st->e);
    if (s) printf("%s\n", s);
    else fprintf(stderr, "trellis generate: out of memory\n"), st->rc = 1;
    free(s);
}

/* The summary line after a streamed sample (stderr). */
static void print_summary(const out_state *st, const sample *s) {
    const trellis_metrics *m = &s->done->metrics;
    char who[32] = "";
    if (st->n > 1) snprintf(who, sizeof who, "sample %d: ", st->cur + 1);
    fprintf(stderr,
            "\n[%sprompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | %s]\n",
            who, m->prompt_tokens, m->ttft_ms > 0 ? m->prompt_tokens / (m->ttft_ms / 1e3) : 0.0,
            s->n_tokens, m->tpot_ms > 0 ? 1e3 / m->tpot_ms : 0.0,
            trellis_finish_name(s->done->finish));
}

/* Prints every finished sample whose turn it is. */
static void advance(out_state *st) {
    while (st->cur < st->n && st->s[st->cur].done) {
        sample *s = &st->s[st->cur];
        const trellis_event *ev = s->done;
        if (st->o->json) {
            print_json(st, ev);
        } else {
            printf("\n");
            fflush(stdout);
            print_summary(st, s);
        }
        if (ev->finish == TRELLIS_FINISH_ERROR) {
            if (st->n > 1)
                fprintf(stderr, "trellis generate: sample %d: %s\n", st->cur + 1, ev->error);
            else
                fprintf(stderr, "trellis generate: generation failed: %s\n", ev->error);
            st->rc = 1;
        }
        trellis_event_free(s->done);
        s->done = NULL;
        free(s->text);
        s->text = NULL;
        if (++st->cur < st->n && !st->o->json) {
            sample *nx = &st->s[st->cur];
            print_header(st);
            fwrite(nx->text, 1, nx->len, stdout);
            fflush(stdout);
        }
    }
}

static void take(out_state *st, trellis_event *ev) {
    if (ev->index < 0 || ev->index >= st->n) { /* cannot happen: one request */
        trellis_event_free(ev);
        return;
    }
    sample *s = &st->s[ev->index];
    s->n_tokens += ev->n_tokens;
    if (!st->o->json) {
        if (ev->index == st->cur) {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        } else if (!keep_text(s, ev->text, ev->text_len)) {
            fprintf(stderr, "trellis generate: out of memory\n");
            st->rc = 1;
        }
    }
    if (ev->kind == TRELLIS_EVENT_DONE) s->done = ev;
    else trellis_event_free(ev);
    advance(st);
}

int tr_cli_gen_output_run(trellis_engine *e, const gen_opts *o, const gen_facts *f, int32_t n) {
    out_state st = {.e = e, .o = o, .f = f, .n = n};
    st.s = calloc((size_t)n, sizeof *st.s);
    if (!st.s) {
        fprintf(stderr, "trellis generate: out of memory\n");
        return 1;
    }
    print_header(&st);
    fflush(stdout);
    while (st.cur < n) {
        trellis_event *ev = NULL;
        if (trellis_wait(e, -1, &ev) == 1) take(&st, ev);
    }
    for (int32_t i = 0; i < n; i++) {
        trellis_event_free(st.s[i].done);
        free(st.s[i].text);
    }
    free(st.s);
    return st.rc;
}
