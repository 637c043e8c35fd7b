/* task.c — tasks and everything that crosses them: errors and traces,
 * variables, calls (inline, fresh, spawned as tasks), fork and parallel.
 *
 * A fork's branches are tasks on threads of their own, each with a copy
 * of the parent's prompt and variables (values shared by reference); the
 * parent waits for all of them (the join), then binds every variable a
 * branch set as a list of the branches' values, in branch order. The
 * branches' prompts are dropped: the parent's prompt is what it was
 * before the fork.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "frontend/interp_internal.h"

#define TRY(x)                      \
    do {                            \
        tr_status s_ = (x);         \
        if (s_ != TR_OK) return s_; \
    } while (0)

#define TASK_STACK_BYTES ((size_t)4 << 20)

int64_t tr_dsl_thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- errors ---- */

void tr_dsl_locate(const tr_dsl_script *s, tr_dsl_error *e) {
    uint64_t off = e->offset > s->len ? s->len : e->offset;
    int line = 1;
    size_t start = 0;
    for (size_t i = 0; i < off; i++)
        if (s->src[i] == '\n') {
            line++;
            start = i + 1;
        }
    e->line = line;
    e->column = (int)(off - start) + 1;
}

static void trace_append(tr_dsl_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void trace_append(tr_dsl_error *e, const char *fmt, ...) {
    size_t used = strlen(e->trace);
    if (used + 1 >= sizeof e->trace) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->trace + used, sizeof e->trace - used, fmt, ap);
    va_end(ap);
}

void tr_dsl_add_trace(tr_dsl_task *t, tr_dsl_error *e) {
    const tr_dsl_script *s = t->run->sess->script;
    for (const tr_dsl_frame *f = t->frame; f; f = f->parent) {
        if (!f->fn) continue;
        if (f->parent && f->parent->fn) {
            tr_dsl_error at = {.offset = f->call_off};
            tr_dsl_locate(s, &at);
            trace_append(e, "  in %s, called from %s at %d:%d\n", f->fn->name,
                         f->parent->fn->name, at.line, at.column);
        } else {
            trace_append(e, "  in %s\n", f->fn->name);
        }
    }
}

tr_status tr_dsl_fail(tr_dsl_task *t, uint32_t off, tr_status code, const char *fmt, ...) {
    atomic_store(&t->run->abort, true);
    if (t->err.code != TR_OK) return code; /* the first error wins */
    tr_dsl_error *e = &t->err;
    memset(e, 0, sizeof *e);
    e->code = code;
    e->has_location = true;
    e->offset = off;
    tr_dsl_locate(t->run->sess->script, e);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    tr_dsl_add_trace(t, e);
    return code;
}

tr_status tr_dsl_fail_with(tr_dsl_task *t, const tr_dsl_error *e) {
    atomic_store(&t->run->abort, true);
    if (t->err.code == TR_OK) {
        t->err = *e;
        tr_dsl_add_trace(t, &t->err);
    }
    return e->code;
}

tr_status tr_dsl_step(tr_dsl_task *t, uint32_t off) {
    if (atomic_load_explicit(&t->run->abort, memory_order_relaxed))
        return tr_dsl_fail(t, off, TR_ERR_CANCELLED,
                           "stopped: another part of the run failed");
    int64_t n = atomic_fetch_add_explicit(&t->run->steps, 1, memory_order_relaxed);
    if (n >= t->run->lim->max_steps)
        return tr_dsl_fail(t, off, TR_ERR_LIMIT,
                           "the run executed more than max_steps (%lld) statements",
                           (long long)t->run->lim->max_steps);
    return TR_OK;
}

/* ---- variables ---- */

void tr_dsl_env_deinit(tr_dsl_env *e) {
    for (int32_t i = 0; i < e->n; i++) {
        tr_dsl_unref(e->slots[i].value);
        tr_dsl_future_release(e->slots[i].fut);
    }
    free(e->slots);
    memset(e, 0, sizeof *e);
}

tr_dsl_slot *tr_dsl_env_find(tr_dsl_env *e, const char *name) {
    for (int32_t i = e->n - 1; i >= 0; i--)
        if (strcmp(e->slots[i].name, name) == 0) return &e->slots[i];
    return NULL;
}

tr_status tr_dsl_env_set(tr_dsl_env *e, const char *name, json_t *value,
                         tr_dsl_future *fut, bool captured) {
    tr_dsl_slot *s = tr_dsl_env_find(e, name);
    if (!s) {
        if (e->n == e->cap) {
            int32_t cap = e->cap ? e->cap * 2 : 8;
            tr_dsl_slot *ns = realloc(e->slots, (size_t)cap * sizeof *ns);
            if (!ns) return TR_ERR_NOMEM;
            e->slots = ns;
            e->cap = cap;
        }
        s = &e->slots[e->n++];
        memset(s, 0, sizeof *s);
        s->name = name;
    }
    json_t *old = s->value;
    tr_dsl_future *old_fut = s->fut;
    s->value = value ? tr_dsl_ref(value) : NULL;
    s->fut = fut ? tr_dsl_future_ref(fut) : NULL;
    s->origin = NULL;
    s->captured = captured;
    tr_dsl_unref(old);
    tr_dsl_future_release(old_fut);
    return TR_OK;
}

tr_status tr_dsl_env_copy(const tr_dsl_env *src, tr_dsl_env *dst) {
    memset(dst, 0, sizeof *dst);
    if (!src->n) return TR_OK;
    dst->slots = malloc((size_t)src->n * sizeof *dst->slots);
    if (!dst->slots) return TR_ERR_NOMEM;
    for (int32_t i = 0; i < src->n; i++) {
        dst->slots[i] = src->slots[i];
        tr_dsl_ref(dst->slots[i].value);
        if (dst->slots[i].fut) tr_dsl_future_ref(dst->slots[i].fut);
    }
    dst->n = dst->cap = src->n;
    return TR_OK;
}

/* ---- tasks ---- */

void tr_dsl_task_init(tr_dsl_task *t, tr_dsl_run *run) {
    memset(t, 0, sizeof *t);
    t->run = run;
}

void tr_dsl_task_deinit(tr_dsl_task *t) {
    for (int32_t i = 0; i < t->n_futs; i++) tr_dsl_future_release(t->futs[i]);
    free(t->futs);
    tr_dsl_prompt_deinit(&t->prompt);
    t->futs = NULL;
    t->n_futs = 0;
}

tr_status tr_dsl_task_track(tr_dsl_task *t, tr_dsl_future *f) {
    if (t->n_futs == t->cap_futs) {
        int32_t cap = t->cap_futs ? t->cap_futs * 2 : 16;
        tr_dsl_future **nf = realloc(t->futs, (size_t)cap * sizeof *nf);
        if (!nf) return TR_ERR_NOMEM;
        t->futs = nf;
        t->cap_futs = cap;
    }
    t->futs[t->n_futs++] = tr_dsl_future_ref(f);
    return TR_OK;
}

tr_status tr_dsl_task_drain(tr_dsl_task *t) {
    for (int32_t i = 0; i < t->n_futs; i++) {
        tr_dsl_future *f = t->futs[i];
        tr_dsl_future_wait(f);
        if (f->error.code != TR_OK) tr_dsl_fail_with(t, &f->error);
    }
    return t->err.code;
}

tr_status tr_dsl_frame_captures(tr_dsl_task *t, tr_dsl_frame *f, json_t **out) {
    json_t *obj = json_object();
    if (!obj) return tr_dsl_fail(t, 0, TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < f->env.n; i++) {
        tr_dsl_slot *s = &f->env.slots[i];
        if (!s->captured) continue;
        tr_status st = tr_dsl_resolve_slot(t, s);
        if (st == TR_OK && json_object_set(obj, s->name, s->value))
            st = tr_dsl_fail(t, 0, TR_ERR_NOMEM, "out of memory");
        if (st) {
            tr_dsl_unref(obj);
            return st;
        }
    }
    *out = obj;
    return TR_OK;
}

/* ---- calls ---- */

/* Binds the call's arguments to fn's parameters in env (evaluated in the
 * caller's task; a bare variable still being generated is passed on as
 * its future when lazy). Defaults are evaluated by the callee. */
static tr_status bind_args(tr_dsl_task *t, const tr_dsl_expr *call, const tr_dsl_fn *fn,
                           tr_dsl_env *env, bool lazy) {
    for (int32_t i = 0; i < call->u.call.n_args; i++) {
        const char *pname = fn->params[i].name;
        if (call->u.call.arg_names[i]) pname = call->u.call.arg_names[i];
        for (int32_t k = 0; k < fn->n_params; k++) /* the script's own name string */
            if (strcmp(fn->params[k].name, pname) == 0) pname = fn->params[k].name;
        const tr_dsl_expr *a = call->u.call.args[i];
        if (lazy && a->kind == TR_DSL_E_VAR) {
            tr_dsl_slot *s = tr_dsl_env_find(&t->frame->env, a->u.name);
            if (s && s->fut) {
                if (tr_dsl_env_set(env, pname, NULL, s->fut, false))
                    return tr_dsl_fail(t, a->off, TR_ERR_NOMEM, "out of memory");
                continue;
            }
        }
        json_t *v;
        TRY(tr_dsl_eval(t, a, &v));
        tr_status s = tr_dsl_env_set(env, pname, v, NULL, false);
        tr_dsl_unref(v);
        if (s) return tr_dsl_fail(t, a->off, s, "out of memory");
    }
    return TR_OK;
}

/* Evaluates the defaults of parameters not given, in the callee's frame. */
tr_status tr_dsl_bind_defaults(tr_dsl_task *t, const tr_dsl_fn *fn) {
    for (int32_t k = 0; k < fn->n_params; k++) {
        if (tr_dsl_env_find(&t->frame->env, fn->params[k].name)) continue;
        if (!fn->params[k].def)
            return tr_dsl_fail(t, fn->params[k].off, TR_ERR_INVALID_ARG,
                               "missing argument '%s' of %s", fn->params[k].name, fn->name);
        json_t *v;
        TRY(tr_dsl_eval(t, fn->params[k].def, &v));
        tr_status s = tr_dsl_env_set(&t->frame->env, fn->params[k].name, v, NULL, false);
        tr_dsl_unref(v);
        if (s) return tr_dsl_fail(t, fn->params[k].off, s, "out of memory");
    }
    return TR_OK;
}

/* Runs fn's body in frame f (pushed on t); *out (may be NULL) gets the
 * return value or the captures. */
static tr_status run_body(tr_dsl_task *t, tr_dsl_frame *f, json_t **out) {
    tr_dsl_frame *saved = t->frame;
    t->frame = f;
    t->calls++;
    tr_status s = tr_dsl_bind_defaults(t, f->fn);
    if (s == TR_OK) s = tr_dsl_exec_block(t, &f->fn->body);
    if (s == TR_OK && out) {
        if (f->returned) *out = tr_dsl_ref(f->ret);
        else s = tr_dsl_frame_captures(t, f, out);
    }
    t->calls--;
    t->frame = saved;
    return s;
}

static tr_status check_depth(tr_dsl_task *t, const tr_dsl_expr *call) {
    if (t->calls >= t->run->lim->max_call_depth)
        return tr_dsl_fail(t, call->off, TR_ERR_LIMIT,
                           "calls nested more than max_call_depth (%d) deep (a recursion "
                           "that does not end?)",
                           t->run->lim->max_call_depth);
    return tr_dsl_step(t, call->off);
}

tr_status tr_dsl_call(tr_dsl_task *t, const tr_dsl_expr *call, bool inline_, json_t **out) {
    const tr_dsl_fn *fn = &t->run->sess->script->fns[call->u.call.index];
    TRY(check_depth(t, call));
    tr_dsl_frame f = {.fn = fn, .parent = t->frame, .call_off = call->off};
    tr_status s = bind_args(t, call, fn, &f.env, false);
    if (s == TR_OK) {
        if (inline_) {
            s = run_body(t, &f, NULL);
        } else { /* a fresh prompt for the callee */
            tr_dsl_prompt mine = t->prompt;
            memset(&t->prompt, 0, sizeof t->prompt);
            s = run_body(t, &f, out);
            tr_dsl_prompt_deinit(&t->prompt);
            t->prompt = mine;
        }
    }
    tr_dsl_env_deinit(&f.env);
    tr_dsl_unref(f.ret);
    return s;
}

/* ---- tasks on threads ---- */

typedef struct child {
    tr_dsl_task task;
    tr_dsl_frame frame;
    pthread_t thread;
    bool started;
    tr_dsl_future *result; /* spawned calls */
    const tr_dsl_block *body; /* fork / parallel branches */
} child;

static tr_status reserve_tasks(tr_dsl_task *t, uint32_t off, int32_t n) {
    int32_t live = atomic_fetch_add(&t->run->live_tasks, n) + n;
    if (live > t->run->lim->max_tasks) {
        atomic_fetch_sub(&t->run->live_tasks, n);
        return tr_dsl_fail(t, off, TR_ERR_LIMIT,
                           "%d tasks at once, over the limit max_tasks (%d) (forks inside "
                           "forks multiply)",
                           live, t->run->lim->max_tasks);
    }
    atomic_fetch_add(&t->run->tasks, n);
    return TR_OK;
}

static void account(tr_dsl_task *t, int64_t cpu0) {
    int64_t cpu = tr_dsl_thread_cpu_ns() - cpu0;
    atomic_fetch_add(&t->run->interp_ns, cpu - t->backend_ns);
    atomic_fetch_add(&t->run->backend_ns, t->backend_ns);
}

static int start_thread(child *c, void *(*fn)(void *)) {
    pthread_attr_t attr;
    if (pthread_attr_init(&attr)) return -1;
    pthread_attr_setstacksize(&attr, TASK_STACK_BYTES);
    int rc = pthread_create(&c->thread, &attr, fn, c);
    pthread_attr_destroy(&attr);
    c->started = rc == 0;
    return rc;
}

static void *spawn_main(void *arg) {
    child *c = arg;
    tr_dsl_task *t = &c->task;
    int64_t cpu0 = tr_dsl_thread_cpu_ns();
    json_t *value = NULL;
    tr_status s = run_body(t, &c->frame, &value);
    if (s == TR_OK) s = tr_dsl_task_drain(t);
    account(t, cpu0);
    atomic_fetch_sub(&t->run->live_tasks, 1);
    if (s != TR_OK) {
        tr_dsl_unref(value);
        value = NULL;
    }
    tr_dsl_env_deinit(&c->frame.env);
    tr_dsl_unref(c->frame.ret);
    c->frame.ret = NULL;
    tr_dsl_task_deinit(t);
    tr_dsl_future *result = c->result;
    c->result = NULL;
    tr_dsl_future_complete(result, value, NULL, s != TR_OK ? &t->err : NULL);
    tr_dsl_future_release(result);
    return NULL;
}

void tr_dsl_run_join_children(tr_dsl_run *run) {
    pthread_mutex_lock(&run->children_mu);
    for (int32_t i = 0; i < run->n_children; i++) {
        child *c = run->children[i];
        if (c->started) pthread_join(c->thread, NULL);
        free(c);
    }
    free(run->children);
    run->children = NULL;
    run->n_children = run->cap_children = 0;
    pthread_mutex_unlock(&run->children_mu);
}

static bool remember_child(tr_dsl_run *run, child *c) {
    pthread_mutex_lock(&run->children_mu);
    bool ok = true;
    if (run->n_children == run->cap_children) {
        int32_t cap = run->cap_children ? run->cap_children * 2 : 8;
        void **nc = realloc(run->children, (size_t)cap * sizeof *nc);
        if (nc) {
            run->children = nc;
            run->cap_children = cap;
        } else {
            ok = false;
        }
    }
    if (ok) run->children[run->n_children++] = c;
    pthread_mutex_unlock(&run->children_mu);
    return ok;
}

tr_status tr_dsl_spawn_call(tr_dsl_task *t, const tr_dsl_expr *call, tr_dsl_future **out) {
    const tr_dsl_fn *fn = &t->run->sess->script->fns[call->u.call.index];
    TRY(check_depth(t, call));
    child *c = calloc(1, sizeof *c);
    tr_dsl_future *f = tr_dsl_future_new(TR_DSL_FUT_TASK);
    if (!c || !f) {
        free(c);
        tr_dsl_future_release(f);
        return tr_dsl_fail(t, call->off, TR_ERR_NOMEM, "out of memory");
    }
    tr_dsl_task_init(&c->task, t->run);
    c->task.id = atomic_fetch_add(&t->run->task_ids, 1);
    c->task.calls = t->calls;
    c->frame = (tr_dsl_frame){.fn = fn, .parent = NULL, .call_off = call->off};
    tr_status s = bind_args(t, call, fn, &c->frame.env, true);
    if (s == TR_OK) s = reserve_tasks(t, call->off, 1);
    if (s == TR_OK && tr_dsl_task_track(t, f) != TR_OK) {
        atomic_fetch_sub(&t->run->live_tasks, 1);
        s = tr_dsl_fail(t, call->off, TR_ERR_NOMEM, "out of memory");
    }
    if (s != TR_OK) {
        tr_dsl_env_deinit(&c->frame.env);
        free(c);
        tr_dsl_future_release(f);
        return s;
    }
    /* tracked: from here on the future completes, whatever happens */
    c->result = tr_dsl_future_ref(f);
    if (!remember_child(t->run, c)) {
        spawn_main(c); /* no room to remember a thread: run it here */
        free(c);
    } else if (start_thread(c, spawn_main) != 0) {
        spawn_main(c); /* no thread: here too, correct, only not concurrent */
    }
    *out = f;
    return TR_OK;
}

/* ---- fork and parallel ---- */

static void *branch_main(void *arg) {
    child *c = arg;
    tr_dsl_task *t = &c->task;
    int64_t cpu0 = tr_dsl_thread_cpu_ns();
    tr_status s = tr_dsl_exec_block(t, c->body);
    if (s == TR_OK) s = tr_dsl_task_drain(t);
    for (int32_t i = 0; s == TR_OK && i < c->frame.env.n; i++)
        s = tr_dsl_resolve_slot(t, &c->frame.env.slots[i]);
    account(t, cpu0);
    return NULL;
}

/* Whether a branch's slot still holds what the parent's held. */
static bool same_slot(const tr_dsl_slot *parent, const tr_dsl_slot *branch) {
    if (parent->fut == branch->fut && parent->value == branch->value) return true;
    return parent->fut && !branch->fut && parent->fut->done &&
           parent->fut->value == branch->origin;
}

static void free_children(child *cs, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        tr_dsl_env_deinit(&cs[i].frame.env);
        tr_dsl_unref(cs[i].frame.ret);
        tr_dsl_task_deinit(&cs[i].task);
    }
    free(cs);
}

/* Prepares n branch tasks as copies of t. */
static tr_status make_children(tr_dsl_task *t, uint32_t off, int32_t n, child **out) {
    child *cs = calloc(n ? (size_t)n : 1, sizeof *cs);
    if (!cs) return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        child *c = &cs[i];
        tr_dsl_task_init(&c->task, t->run);
        c->task.id = atomic_fetch_add(&t->run->task_ids, 1);
        c->task.calls = t->calls;
        c->frame = (tr_dsl_frame){.fn = t->frame->fn, .parent = t->frame->parent,
                                  .call_off = t->frame->call_off};
        c->task.frame = &c->frame;
        if (tr_dsl_env_copy(&t->frame->env, &c->frame.env) ||
            tr_dsl_prompt_copy(&t->prompt, &c->task.prompt)) {
            free_children(cs, i + 1);
            return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
        }
    }
    *out = cs;
    return TR_OK;
}

/* Starts every branch, waits for all, adopts the first real error. */
static tr_status run_children(tr_dsl_task *t, uint32_t off, child *cs, int32_t n,
                              const char *what) {
    tr_status s = reserve_tasks(t, off, n);
    if (s) return s;
    for (int32_t i = 0; i < n; i++)
        if (start_thread(&cs[i], branch_main) != 0) branch_main(&cs[i]);
    for (int32_t i = 0; i < n; i++)
        if (cs[i].started) pthread_join(cs[i].thread, NULL);
    atomic_fetch_sub(&t->run->live_tasks, n);
    int32_t bad = -1;
    for (int32_t i = 0; i < n; i++) {
        tr_status c = cs[i].task.err.code;
        if (c != TR_OK && (bad < 0 || (cs[bad].task.err.code == TR_ERR_CANCELLED &&
                                       c != TR_ERR_CANCELLED)))
            bad = i;
    }
    if (bad < 0) return TR_OK;
    tr_dsl_error e = cs[bad].task.err;
    tr_dsl_error at = {.offset = off};
    tr_dsl_locate(t->run->sess->script, &at);
    size_t used = strlen(e.trace);
    if (used < sizeof e.trace)
        snprintf(e.trace + used, sizeof e.trace - used, "  in branch %d of the %s at %d:%d\n",
                 bad, what, at.line, at.column);
    /* the branch's trace already names this function and its callers */
    if (t->err.code == TR_OK) t->err = e;
    atomic_store(&t->run->abort, true);
    return e.code;
}

tr_status tr_dsl_exec_fork(tr_dsl_task *t, const tr_dsl_stmt *st) {
    json_t *iter;
    TRY(tr_dsl_eval(t, st->u.loop.iter, &iter));
    int64_t n;
    tr_status s = TR_OK;
    if (json_is_integer(iter) && !st->u.loop.item_name) {
        n = json_integer_value(iter);
    } else if (json_is_array(iter) && st->u.loop.item_name) {
        n = (int64_t)json_array_size(iter);
    } else {
        s = tr_dsl_fail(t, st->u.loop.iter->off, TR_ERR_INVALID_ARG,
                        st->u.loop.item_name
                            ? "fork NAME in LIST needs a list, not %s"
                            : "fork N needs an integer count of branches, not %s",
                        tr_dsl_type_name(iter));
        tr_dsl_unref(iter);
        return s;
    }
    if (n < 1 || n > t->run->lim->max_fork_width) {
        tr_dsl_unref(iter);
        return tr_dsl_fail(t, st->u.loop.iter->off, TR_ERR_LIMIT,
                           "a fork of %lld branches (expected 1..max_fork_width, %d)",
                           (long long)n, t->run->lim->max_fork_width);
    }
    if (t->run->sess->opt.warm_forks && n > 1 && t->prompt.n > 0 && st->u.loop.generates &&
        (s = tr_dsl_warm(t, st->off)) != TR_OK) {
        tr_dsl_unref(iter);
        return s;
    }
    child *cs;
    if ((s = make_children(t, st->off, (int32_t)n, &cs))) {
        tr_dsl_unref(iter);
        return s;
    }
    for (int32_t i = 0; i < n && s == TR_OK; i++) {
        cs[i].body = &st->u.loop.body;
        json_t *index = json_integer(i);
        json_t *item = st->u.loop.item_name ? tr_dsl_ref(json_array_get(iter, (size_t)i))
                                            : NULL;
        const char *iname = st->u.loop.item_name ? st->u.loop.index_name : NULL;
        if (!index ||
            (iname && tr_dsl_env_set(&cs[i].frame.env, iname, index, NULL, false)) ||
            (item && tr_dsl_env_set(&cs[i].frame.env, st->u.loop.item_name, item, NULL, false)))
            s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
        tr_dsl_unref(index);
        tr_dsl_unref(item);
    }
    tr_dsl_unref(iter);
    if (s == TR_OK) s = run_children(t, st->off, cs, (int32_t)n, "fork");
    /* the join: every variable a branch set becomes a list */
    tr_dsl_env before = {0};
    if (s == TR_OK && tr_dsl_env_copy(&t->frame->env, &before))
        s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
    for (int32_t b = 0; s == TR_OK && b < n; b++) {
        tr_dsl_env *env = &cs[b].frame.env;
        for (int32_t k = 0; s == TR_OK && k < env->n; k++) {
            tr_dsl_slot *bs = &env->slots[k];
            if ((st->u.loop.item_name && strcmp(bs->name, st->u.loop.item_name) == 0) ||
                (st->u.loop.index_name && strcmp(bs->name, st->u.loop.index_name) == 0))
                continue;
            bool seen = false; /* joined already, from an earlier branch */
            for (int32_t j = 0; j < b && !seen; j++)
                seen = tr_dsl_env_find(&cs[j].frame.env, bs->name) != NULL;
            if (seen) continue;
            tr_dsl_slot *ps = tr_dsl_env_find(&before, bs->name);
            bool changed = false;
            for (int32_t j = b; j < n && !changed; j++) {
                tr_dsl_slot *js = tr_dsl_env_find(&cs[j].frame.env, bs->name);
                changed = js && (!ps || !same_slot(ps, js));
            }
            if (!changed) continue;
            json_t *list = json_array();
            bool captured = false;
            for (int32_t j = 0; list && j < n; j++) {
                tr_dsl_slot *js = tr_dsl_env_find(&cs[j].frame.env, bs->name);
                bool set = js && (!ps || !same_slot(ps, js));
                if (set && js->captured) captured = true;
                if (json_array_append(list, set ? js->value : json_null())) {
                    tr_dsl_unref(list);
                    list = NULL;
                }
            }
            if (!list || tr_dsl_env_set(&t->frame->env, bs->name, list, NULL, captured))
                s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
            tr_dsl_unref(list);
        }
    }
    tr_dsl_env_deinit(&before);
    free_children(cs, (int32_t)n);
    return s;
}

tr_status tr_dsl_exec_parallel(tr_dsl_task *t, const tr_dsl_stmt *st) {
    int32_t n = st->u.par.n;
    if (n > t->run->lim->max_fork_width)
        return tr_dsl_fail(t, st->off, TR_ERR_LIMIT,
                           "%d parallel branches, over max_fork_width (%d)", n,
                           t->run->lim->max_fork_width);
    tr_status s = TR_OK;
    if (t->run->sess->opt.warm_forks && n > 1 && t->prompt.n > 0 && st->u.par.generates)
        TRY(tr_dsl_warm(t, st->off));
    child *cs;
    TRY(make_children(t, st->off, n, &cs));
    for (int32_t i = 0; i < n; i++) cs[i].body = &st->u.par.branches[i];
    s = run_children(t, st->off, cs, n, "parallel block");
    /* the join: each variable a branch set, bound as it is */
    tr_dsl_env before = {0};
    if (s == TR_OK && tr_dsl_env_copy(&t->frame->env, &before))
        s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
    for (int32_t b = 0; s == TR_OK && b < n; b++) {
        tr_dsl_env *env = &cs[b].frame.env;
        for (int32_t k = 0; s == TR_OK && k < env->n; k++) {
            tr_dsl_slot *bs = &env->slots[k];
            tr_dsl_slot *ps = tr_dsl_env_find(&before, bs->name);
            if (ps && same_slot(ps, bs)) continue;
            for (int32_t j = 0; j < b; j++) {
                tr_dsl_slot *js = tr_dsl_env_find(&cs[j].frame.env, bs->name);
                if (js && (!ps || !same_slot(ps, js))) {
                    tr_dsl_error at = {.offset = st->u.par.offs[j]};
                    tr_dsl_locate(t->run->sess->script, &at);
                    s = tr_dsl_fail(t, st->u.par.offs[b], TR_ERR_INVALID_ARG,
                                    "'%s' is set by this branch and by the one at %d:%d: "
                                    "parallel branches must set different variables",
                                    bs->name, at.line, at.column);
                    break;
                }
            }
            if (s == TR_OK &&
                tr_dsl_env_set(&t->frame->env, bs->name, bs->value, NULL, bs->captured))
                s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
        }
    }
    tr_dsl_env_deinit(&before);
    free_children(cs, n);
    return s;
}
