/* batch.c — one function over many inputs: `trellis run --batch`.
 *
 * A pool of o->parallel threads takes inputs in order; each result is
 * emitted, in input order, as soon as it and every earlier one are done
 * (a slow input holds back the lines after it, never the work).
 *
 * Warm-up: inputs of one batch usually share a long prompt prefix
 * (instructions, few-shot examples). Started together, every run would
 * compute that prefix itself, since none is in the prefix cache yet; so
 * the first input runs alone until its first generation is done, which
 * leaves the shared prefix cached, and the rest then find it there.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "frontend/interp_internal.h"

void tr_dsl_batch_options_default(tr_dsl_batch_options *o) {
    o->parallel = 32;
    o->warm_first = true;
}

typedef struct slot {
    json_t *line; /* the output line, once done */
    bool done;
} slot;

typedef struct batch {
    tr_dsl_session *sess;
    const char *fn;
    json_t *const *inputs;
    const char *const *inputs_err;
    size_t n;
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next;      /* the next input to start */
    size_t emitted;   /* lines written */
    bool gate_open;   /* the warm-up is over */
    tr_dsl_batch_emit emit;
    void *user;
    tr_dsl_batch_stats *st;
} batch;

static void open_gate(void *arg) {
    batch *b = arg;
    pthread_mutex_lock(&b->mu);
    b->gate_open = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static json_t *error_line(size_t i, const tr_dsl_script *sc, const tr_dsl_error *e) {
    char text[2048];
    tr_dsl_error_format(sc, e, text, sizeof text);
    json_t *err = json_pack("{s:s, s:s}", "message", e->message, "text", text);
    if (err && e->has_location) {
        json_object_set_new(err, "line", json_integer(e->line));
        json_object_set_new(err, "column", json_integer(e->column));
    }
    return json_pack("{s:I, s:o*}", "index", (json_int_t)i, "error", err);
}

static json_t *ok_line(size_t i, tr_dsl_result *r) {
    return json_pack("{s:I, s:O, s:O}", "index", (json_int_t)i, "return", r->ret, "vars",
                     r->vars);
}

static void add_stats(tr_dsl_run_stats *sum, const tr_dsl_run_stats *s) {
    sum->gens += s->gens;
    sum->prompt_tokens += s->prompt_tokens;
    sum->cached_tokens += s->cached_tokens;
    sum->completion_tokens += s->completion_tokens;
    sum->tasks += s->tasks;
    sum->interp_ms += s->interp_ms;
    sum->backend_ms += s->backend_ms;
}

/* Emits every finished line at the front, in order (under mu). */
static void flush(batch *b) {
    while (b->emitted < b->n && b->slots[b->emitted].done) {
        slot *s = &b->slots[b->emitted];
        json_t *line = s->line;
        s->line = NULL;
        size_t i = b->emitted++;
        if (line) {
            b->emit(b->user, i, line);
            tr_dsl_unref(line);
        }
    }
}

static void run_one(batch *b, size_t i) {
    tr_dsl_result r;
    tr_dsl_error e;
    json_t *line;
    bool ok = false;
    tr_dsl_run_stats stats = {0};
    if (!b->inputs[i] || !json_is_object(b->inputs[i])) {
        memset(&e, 0, sizeof e);
        e.code = TR_ERR_FORMAT;
        snprintf(e.message, sizeof e.message, "%s",
                 b->inputs_err && b->inputs_err[i] ? b->inputs_err[i]
                                                   : "the input is not a JSON object");
        line = error_line(i, NULL, &e);
        if (i == 0) open_gate(b);
    } else {
        bool first = i == 0;
        tr_status s = tr_dsl_session_run_hooked(b->sess, b->fn, b->inputs[i],
                                                first ? open_gate : NULL, b, &r, &e);
        if (first) open_gate(b); /* a run without generations, or a failed one */
        if (s == TR_OK) {
            ok = true;
            stats = r.stats;
            line = ok_line(i, &r);
            tr_dsl_result_deinit(&r);
        } else {
            line = error_line(i, b->sess->script, &e);
        }
    }
    pthread_mutex_lock(&b->mu);
    b->slots[i].line = line;
    b->slots[i].done = true;
    if (ok) b->st->ok++;
    else b->st->failed++;
    add_stats(&b->st->sum, &stats);
    flush(b);
    pthread_mutex_unlock(&b->mu);
}

static void *worker(void *arg) {
    batch *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        /* input 0 runs alone until the gate opens */
        while (b->next > 0 && !b->gate_open) pthread_cond_wait(&b->cv, &b->mu);
        size_t i = b->next < b->n ? b->next++ : b->n;
        pthread_mutex_unlock(&b->mu);
        if (i >= b->n) return NULL;
        run_one(b, i);
    }
}

tr_status tr_dsl_batch_run(tr_dsl_session *s, const char *fn, json_t *const *inputs,
                           const char *const *inputs_err, size_t n,
                           const tr_dsl_batch_options *o, tr_dsl_batch_emit emit, void *user,
                           tr_dsl_batch_stats *st, tr_dsl_error *err) {
    tr_dsl_batch_options defaults;
    if (!o) {
        tr_dsl_batch_options_default(&defaults);
        o = &defaults;
    }
    memset(st, 0, sizeof *st);
    if (err) memset(err, 0, sizeof *err);
    if (!tr_dsl_script_has_fn(s->script, fn)) {
        if (err) {
            err->code = TR_ERR_NOT_FOUND;
            snprintf(err->message, sizeof err->message, "the script has no function '%.200s'",
                     fn);
        }
        return TR_ERR_NOT_FOUND;
    }
    uint64_t t0 = tr_now_ns();
    batch b = {0};
    b.sess = s;
    b.fn = fn;
    b.inputs = inputs;
    b.inputs_err = inputs_err;
    b.n = n;
    b.emit = emit;
    b.user = user;
    b.st = st;
    b.gate_open = !o->warm_first;
    b.slots = calloc(n ? n : 1, sizeof *b.slots);
    int32_t workers = o->parallel < 1 ? 1 : o->parallel;
    if ((size_t)workers > n) workers = n ? (int32_t)n : 1;
    pthread_t *th = calloc((size_t)workers, sizeof *th);
    if (!b.slots || !th) {
        free(b.slots);
        free(th);
        if (err) {
            err->code = TR_ERR_NOMEM;
            snprintf(err->message, sizeof err->message, "out of memory");
        }
        return TR_ERR_NOMEM;
    }
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    int32_t started = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)4 << 20);
    for (; started < workers; started++)
        if (pthread_create(&th[started], &attr, worker, &b) != 0) break;
    pthread_attr_destroy(&attr);
    if (started == 0) worker(&b); /* no threads at all: one after another */
    for (int32_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
    for (size_t i = 0; i < n; i++) tr_dsl_unref(b.slots[i].line);
    free(b.slots);
    free(th);
    st->sum.wall_ms = (double)(tr_now_ns() - t0) / 1e6;
    return TR_OK;
}
