/* future.c — values that arrive later: a generation's text, a spawned
 * call's return. One writer completes a future once (the backend's
 * thread, or the spawned task); any number of readers wait on it. */
#include <stdlib.h>
#include <string.h>

#include "frontend/interp_internal.h"

tr_dsl_future *tr_dsl_future_new(tr_dsl_future_kind kind) {
    tr_dsl_future *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    if (pthread_mutex_init(&f->mu, NULL)) {
        free(f);
        return NULL;
    }
    if (pthread_cond_init(&f->cv, NULL)) {
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    atomic_init(&f->refs, 1);
    f->kind = kind;
    return f;
}

tr_dsl_future *tr_dsl_future_ref(tr_dsl_future *f) {
    atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
    return f;
}

void tr_dsl_future_release(tr_dsl_future *f) {
    if (!f || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
    tr_dsl_unref(f->value);
    tr_dsl_unref(f->text);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void tr_dsl_future_complete(tr_dsl_future *f, json_t *value, json_t *text,
                            const tr_dsl_error *err) {
    pthread_mutex_lock(&f->mu);
    f->value = value;
    f->text = text;
    if (err) f->error = *err;
    f->done = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void tr_dsl_future_wait(tr_dsl_future *f) {
    pthread_mutex_lock(&f->mu);
    while (!f->done) pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}
