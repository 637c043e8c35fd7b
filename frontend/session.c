/* session.c — sessions (a script, a backend, the globals evaluated once)
 * and runs (one function call to completion: the entry task on the
 * caller's thread, its result and statistics). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "frontend/interp_internal.h"

void tr_dsl_session_options_default(tr_dsl_session_options *o) {
    memset(o, 0, sizeof *o);
    tr_dsl_limits_default(&o->limits);
    o->warm_forks = true;
}

void tr_dsl_result_deinit(tr_dsl_result *r) {
    tr_dsl_unref(r->ret);
    tr_dsl_unref(r->vars);
    free(r->text);
    memset(r, 0, sizeof *r);
}

static void run_init(tr_dsl_run *run, tr_dsl_session *s) {
    memset(run, 0, sizeof *run);
    run->sess = s;
    run->lim = &s->opt.limits;
    pthread_mutex_init(&run->children_mu, NULL);
    atomic_init(&run->task_ids, 1);
}

static void run_deinit(tr_dsl_run *run) {
    tr_dsl_run_join_children(run);
    pthread_mutex_destroy(&run->children_mu);
}

static void fill_stats(tr_dsl_run *run, uint64_t t0, tr_dsl_run_stats *st) {
    st->gens = atomic_load(&run->gens);
    st->prompt_tokens = atomic_load(&run->prompt_tokens);
    st->cached_tokens = atomic_load(&run->cached_tokens);
    st->completion_tokens = atomic_load(&run->completion_tokens);
    st->tasks = atomic_load(&run->tasks);
    st->wall_ms = (double)(tr_now_ns() - t0) / 1e6;
    st->interp_ms = (double)atomic_load(&run->interp_ns) / 1e6;
    st->backend_ms = (double)atomic_load(&run->backend_ns) / 1e6;
}

static void copy_error(tr_dsl_error *dst, const tr_dsl_error *src) {
    if (dst) *dst = *src;
}

static void plain_error(tr_dsl_error *err, tr_status code, const char *fmt, const char *a) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    err->code = code;
    snprintf(err->message, sizeof err->message, fmt, a);
}

/* Evaluates the top-level lets in order, each fully resolved. */
static tr_status eval_globals(tr_dsl_session *s, tr_dsl_error *err) {
    tr_dsl_run run;
    run_init(&run, s);
    tr_dsl_task t;
    tr_dsl_task_init(&t, &run);
    tr_dsl_frame f = {0};
    t.frame = &f;
    tr_status st = TR_OK;
    for (int32_t i = 0; i < s->script->n_globals && st == TR_OK; i++) {
        json_t *v;
        st = tr_dsl_eval(&t, s->script->globals[i].value, &v);
        if (st == TR_OK) st = tr_dsl_task_drain(&t);
        if (st == TR_OK) s->globals[i] = v;
    }
    if (st == TR_OK) st = tr_dsl_task_drain(&t);
    if (st != TR_OK) copy_error(err, &t.err);
    tr_dsl_env_deinit(&f.env);
    tr_dsl_task_deinit(&t);
    run_deinit(&run);
    return st;
}

tr_status tr_dsl_session_new(const tr_dsl_script *script, tr_dsl_backend *b,
                             const tr_dsl_session_options *o, tr_dsl_session **out,
                             tr_dsl_error *err) {
    if (err) memset(err, 0, sizeof *err);
    tr_dsl_session *s = calloc(1, sizeof *s);
    if (!s) {
        plain_error(err, TR_ERR_NOMEM, "out of memory%s", "");
        return TR_ERR_NOMEM;
    }
    s->script = script;
    s->backend = b;
    if (o) s->opt = *o;
    else tr_dsl_session_options_default(&s->opt);
    s->globals = calloc(script->n_globals ? (size_t)script->n_globals : 1, sizeof *s->globals);
    pthread_mutex_init(&s->stream_mu, NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->seed_base = ((uint64_t)ts.tv_sec * 1000003u) ^ (uint64_t)ts.tv_nsec;
    atomic_init(&s->seed_counter, 0);
    if (!s->globals) {
        tr_dsl_session_free(s);
        plain_error(err, TR_ERR_NOMEM, "out of memory%s", "");
        return TR_ERR_NOMEM;
    }
    tr_status st = eval_globals(s, err);
    if (st != TR_OK) {
        tr_dsl_session_free(s);
        return st;
    }
    *out = s;
    return TR_OK;
}

void tr_dsl_session_free(tr_dsl_session *s) {
    if (!s) return;
    if (s->globals)
        for (int32_t i = 0; i < s->script->n_globals; i++) tr_dsl_unref(s->globals[i]);
    free(s->globals);
    pthread_mutex_destroy(&s->stream_mu);
    free(s);
}

static const tr_dsl_fn *find_fn(const tr_dsl_script *sc, const char *name) {
    for (int32_t i = 0; i < sc->n_fns; i++)
        if (strcmp(sc->fns[i].name, name) == 0) return &sc->fns[i];
    return NULL;
}

/* Binds args (an object) to fn's parameters. */
static tr_status bind_entry_args(tr_dsl_task *t, const tr_dsl_fn *fn, json_t *args,
                                 tr_dsl_error *err) {
    if (args && !json_is_object(args)) {
        plain_error(err, TR_ERR_INVALID_ARG, "the arguments must be a JSON object, not %s",
                    tr_dsl_type_name(args));
        return TR_ERR_INVALID_ARG;
    }
    const char *k;
    json_t *v;
    json_object_foreach(args, k, v) {
        int32_t i = 0;
        while (i < fn->n_params && strcmp(fn->params[i].name, k) != 0) i++;
        if (i == fn->n_params) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s has no parameter '%.100s'", fn->name, k);
            plain_error(err, TR_ERR_INVALID_ARG, "%s", msg);
            if (err) {
                size_t used = strlen(err->message);
                snprintf(err->message + used, sizeof err->message - used, " (it takes:");
                for (int32_t j = 0; j < fn->n_params; j++) {
                    used = strlen(err->message);
                    snprintf(err->message + used, sizeof err->message - used, " %s",
                             fn->params[j].name);
                }
                used = strlen(err->message);
                snprintf(err->message + used, sizeof err->message - used, ")");
            }
            return TR_ERR_INVALID_ARG;
        }
        if (tr_dsl_env_set(&t->frame->env, fn->params[i].name, v, NULL, false)) {
            plain_error(err, TR_ERR_NOMEM, "out of memory%s", "");
            return TR_ERR_NOMEM;
        }
    }
    for (int32_t i = 0; i < fn->n_params; i++)
        if (!fn->params[i].def && !tr_dsl_env_find(&t->frame->env, fn->params[i].name)) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s needs the argument '%s' (--arg %s=VALUE)", fn->name,
                     fn->params[i].name, fn->params[i].name);
            plain_error(err, TR_ERR_INVALID_ARG, "%s", msg);
            return TR_ERR_INVALID_ARG;
        }
    return TR_OK;
}

tr_status tr_dsl_session_run_hooked(tr_dsl_session *s, const char *fn_name, json_t *args,
                                    void (*on_gen_done)(void *), void *user,
                                    tr_dsl_result *out, tr_dsl_error *err) {
    if (err) memset(err, 0, sizeof *err);
    const tr_dsl_fn *fn = find_fn(s->script, fn_name);
    if (!fn) {
        plain_error(err, TR_ERR_NOT_FOUND, "the script has no function '%.200s'", fn_name);
        return TR_ERR_NOT_FOUND;
    }
    uint64_t t0 = tr_now_ns();
    int64_t cpu0 = tr_dsl_thread_cpu_ns();
    tr_dsl_run run;
    run_init(&run, s);
    run.on_gen_done = on_gen_done;
    run.on_gen_done_user = user;
    atomic_store(&run.tasks, 1);
    atomic_store(&run.live_tasks, 1);
    tr_dsl_task t;
    tr_dsl_task_init(&t, &run);
    tr_dsl_frame f = {.fn = fn};
    t.frame = &f;
    t.calls = 1;
    tr_status st = bind_entry_args(&t, fn, args, err);
    bool located = false;
    if (st == TR_OK) {
        located = true;
        st = tr_dsl_bind_defaults(&t, fn);
        if (st == TR_OK) st = tr_dsl_exec_block(&t, &fn->body);
        if (st == TR_OK) st = tr_dsl_task_drain(&t);
    }
    json_t *ret = NULL, *vars = NULL;
    char *text = NULL;
    size_t len = 0;
    if (st == TR_OK) {
        ret = f.returned ? tr_dsl_ref(f.ret) : json_null();
        t.frame = &f;
        st = tr_dsl_frame_captures(&t, &f, &vars);
    }
    if (st == TR_OK) st = tr_dsl_prompt_render(&t, &t.prompt, fn->off, &text, &len);
    if (st == TR_OK) st = tr_dsl_task_drain(&t);
    if (st != TR_OK && located) copy_error(err, &t.err);
    if (st == TR_OK && !ret) st = TR_ERR_NOMEM;
    /* everything spawned has finished once the entry task drained; a
     * failed run still waits for its generations to come back */
    if (st != TR_OK) tr_dsl_task_drain(&t);
    int64_t cpu = tr_dsl_thread_cpu_ns() - cpu0;
    atomic_fetch_add(&run.interp_ns, cpu - t.backend_ns);
    atomic_fetch_add(&run.backend_ns, t.backend_ns);
    tr_dsl_env_deinit(&f.env);
    tr_dsl_unref(f.ret);
    tr_dsl_task_deinit(&t);
    run_deinit(&run);
    if (st != TR_OK) {
        tr_dsl_unref(ret);
        tr_dsl_unref(vars);
        free(text);
        return st;
    }
    memset(out, 0, sizeof *out);
    out->ret = ret;
    out->vars = vars;
    out->text = text;
    fill_stats(&run, t0, &out->stats);
    return TR_OK;
}

tr_status tr_dsl_session_run(tr_dsl_session *s, const char *fn, json_t *args,
                             tr_dsl_result *out, tr_dsl_error *err) {
    return tr_dsl_session_run_hooked(s, fn, args, NULL, NULL, out, err);
}
