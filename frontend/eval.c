/* eval.c — expressions. Every function returns a new reference in *out
 * or records an error on the task (tr_dsl_fail) and returns its code. */
#include <string.h>

#include "frontend/builtins_internal.h"
#include "frontend/interp_internal.h"

#define TRY(x)                      \
    do {                            \
        tr_status s_ = (x);         \
        if (s_ != TR_OK) return s_; \
    } while (0)

static tr_status nomem(tr_dsl_task *t, uint32_t off) {
    return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
}

tr_status tr_dsl_resolve_slot(tr_dsl_task *t, tr_dsl_slot *s) {
    if (!s->fut) return TR_OK;
    tr_dsl_future_wait(s->fut);
    if (s->fut->error.code != TR_OK) return tr_dsl_fail_with(t, &s->fut->error);
    /* a copy: the future's value was made on another thread (the engine's
     * or a spawned task's) and is freed by whichever thread drops the
     * future last; values shared across threads that way would be freed
     * by one thread's last decrement inside jansson, which is not ordered
     * after the others' reads (value.h, tr_dsl_ref) */
    json_t *v = s->fut->value ? json_deep_copy(s->fut->value) : NULL;
    if (s->fut->value && !v) return tr_dsl_fail(t, 0, TR_ERR_NOMEM, "out of memory");
    s->value = v;
    s->origin = s->fut->value;
    tr_dsl_future_release(s->fut);
    s->fut = NULL;
    return TR_OK;
}

tr_status tr_dsl_read_var(tr_dsl_task *t, const char *name, uint32_t off, json_t **out) {
    tr_dsl_slot *s = tr_dsl_env_find(&t->frame->env, name);
    if (s) {
        TRY(tr_dsl_resolve_slot(t, s));
        *out = tr_dsl_ref(s->value);
        return TR_OK;
    }
    const tr_dsl_session *sess = t->run->sess;
    for (int32_t i = 0; i < sess->script->n_globals; i++)
        if (strcmp(sess->script->globals[i].name, name) == 0) {
            if (!sess->globals[i])
                return tr_dsl_fail(t, off, TR_ERR_STATE,
                                   "top-level '%s' is used before it is defined", name);
            *out = tr_dsl_ref(sess->globals[i]);
            return TR_OK;
        }
    return tr_dsl_fail(t, off, TR_ERR_NOT_FOUND,
                       "undefined variable '%s' (not a parameter, not set by let, gen or "
                       "select before this point, not a top-level let)",
                       name);
}

static tr_status eval_string(tr_dsl_task *t, const tr_dsl_expr *e, json_t **out) {
    tr_dsl_buf b = {0};
    tr_status s = tr_dsl_buf_put(&b, "", 0) ? TR_OK : nomem(t, e->off);
    size_t max = t->run->lim->max_string_bytes;
    for (int32_t i = 0; i < e->u.str.n && s == TR_OK; i++) {
        const tr_dsl_strseg *seg = &e->u.str.segs[i];
        if (seg->text) {
            if (!tr_dsl_buf_put(&b, seg->text, seg->len)) s = nomem(t, e->off);
        } else {
            json_t *v;
            s = tr_dsl_eval(t, seg->expr, &v);
            if (s == TR_OK) {
                if (tr_dsl_value_append_text(&b, v) != TR_OK) s = nomem(t, e->off);
                tr_dsl_unref(v);
            }
        }
        if (s == TR_OK && b.len > max)
            s = tr_dsl_fail(t, e->off, TR_ERR_LIMIT,
                            "string of %zu bytes over the limit max_string_bytes (%zu)", b.len,
                            max);
    }
    if (s == TR_OK) {
        *out = json_stringn_nocheck(b.p, b.len);
        if (!*out) s = nomem(t, e->off);
    }
    tr_dsl_buf_free(&b);
    return s;
}

static tr_status eval_builtin(tr_dsl_task *t, const tr_dsl_expr *e, json_t **out) {
    const tr_dsl_builtin *b = tr_dsl_builtin_get(e->u.call.index);
    int32_t n = e->u.call.n_args;
    json_t *args[16];
    if (n > (int32_t)(sizeof args / sizeof args[0]))
        return tr_dsl_fail(t, e->off, TR_ERR_LIMIT, "too many arguments");
    tr_status s = TR_OK;
    int32_t got = 0;
    for (; got < n && s == TR_OK; got++) {
        s = tr_dsl_eval(t, e->u.call.args[got], &args[got]);
        if (s) break;
    }
    if (s == TR_OK) {
        char err[600] = "";
        const tr_dsl_limits *lim = t->run->lim;
        tr_dsl_builtin_env env = {t->run->sess->script->dir, lim->max_file_bytes,
                                  lim->max_string_bytes, lim->max_loop_iterations,
                                  err, sizeof err};
        s = b->fn(&env, args, n, out);
        if (s != TR_OK)
            tr_dsl_fail(t, e->off, s, "%s", err[0] ? err : "out of memory");
    }
    for (int32_t i = 0; i < got; i++) tr_dsl_unref(args[i]);
    return s;
}

static tr_status eval_list(tr_dsl_task *t, const tr_dsl_expr *e, json_t **out) {
    json_t *list = json_array();
    if (!list) return nomem(t, e->off);
    for (int32_t i = 0; i < e->u.list.n; i++) {
        json_t *v;
        tr_status s = tr_dsl_eval(t, e->u.list.items[i], &v);
        if (s == TR_OK && json_array_append_new(list, v)) s = nomem(t, e->off);
        if (s) {
            tr_dsl_unref(list);
            return s;
        }
    }
    *out = list;
    return TR_OK;
}

static tr_status eval_object(tr_dsl_task *t, const tr_dsl_expr *e, json_t **out) {
    json_t *obj = json_object();
    if (!obj) return nomem(t, e->off);
    for (int32_t i = 0; i < e->u.object.n; i++) {
        json_t *v;
        tr_status s = tr_dsl_eval(t, e->u.object.values[i], &v);
        if (s == TR_OK && json_object_set_new(obj, e->u.object.keys[i], v)) s = nomem(t, e->off);
        if (s) {
            tr_dsl_unref(obj);
            return s;
        }
    }
    *out = obj;
    return TR_OK;
}

static tr_status eval_ops(tr_dsl_task *t, const tr_dsl_expr *e, json_t **out) {
    tr_dsl_op op = e->u.op.op;
    json_t *a;
    TRY(tr_dsl_eval(t, e->u.op.a, &a));
    if (op == TR_DSL_OP_NOT) {
        *out = json_boolean(!tr_dsl_truthy(a));
        tr_dsl_unref(a);
        return TR_OK;
    }
    if (op == TR_DSL_OP_NEG) {
        tr_status s = TR_OK;
        if (json_is_integer(a) && json_integer_value(a) != INT64_MIN)
            *out = json_integer(-json_integer_value(a));
        else if (json_is_real(a))
            *out = json_real(-json_real_value(a));
        else
            s = tr_dsl_fail(t, e->off, TR_ERR_INVALID_ARG, "cannot negate %s",
                            tr_dsl_type_name(a));
        tr_dsl_unref(a);
        return s;
    }
    if (op == TR_DSL_OP_AND || op == TR_DSL_OP_OR) { /* short-circuit, value-returning */
        bool a_true = tr_dsl_truthy(a);
        if ((op == TR_DSL_OP_AND) != a_true) {
            *out = a;
            return TR_OK;
        }
        tr_dsl_unref(a);
        return tr_dsl_eval(t, e->u.op.b, out);
    }
    json_t *b;
    tr_status s = tr_dsl_eval(t, e->u.op.b, &b);
    if (s) {
        tr_dsl_unref(a);
        return s;
    }
    char err[512] = "";
    s = tr_dsl_binary(op, a, b, t->run->lim->max_string_bytes, out, err, sizeof err);
    if (s != TR_OK) tr_dsl_fail(t, e->off, s, "%s", err[0] ? err : "out of memory");
    tr_dsl_unref(a);
    tr_dsl_unref(b);
    return s;
}

tr_status tr_dsl_eval(tr_dsl_task *t, const tr_dsl_expr *e, json_t **out) {
    if (++t->depth > 4 * t->run->lim->max_nesting + 2 * t->run->lim->max_call_depth) {
        t->depth--;
        return tr_dsl_fail(t, e->off, TR_ERR_LIMIT,
                           "expressions and calls nested too deep (limits max_nesting, "
                           "max_call_depth)");
    }
    tr_status s = TR_OK;
    switch (e->kind) {
    case TR_DSL_E_CONST: *out = tr_dsl_ref(e->u.value); break;
    case TR_DSL_E_STRING: s = eval_string(t, e, out); break;
    case TR_DSL_E_VAR: s = tr_dsl_read_var(t, e->u.name, e->off, out); break;
    case TR_DSL_E_FIELD: {
        json_t *base;
        s = tr_dsl_eval(t, e->u.field.base, &base);
        if (s) break;
        if (!json_is_object(base)) {
            s = tr_dsl_fail(t, e->off, TR_ERR_INVALID_ARG,
                            "cannot read field '%s' of %s (only objects have fields)",
                            e->u.field.name, tr_dsl_type_name(base));
        } else {
            json_t *v = json_object_get(base, e->u.field.name);
            if (!v)
                s = tr_dsl_fail(t, e->off, TR_ERR_NOT_FOUND, "the object has no field '%s'",
                                e->u.field.name);
            else
                *out = tr_dsl_ref(v);
        }
        tr_dsl_unref(base);
        break;
    }
    case TR_DSL_E_INDEX: {
        json_t *base, *index;
        s = tr_dsl_eval(t, e->u.index.base, &base);
        if (s) break;
        s = tr_dsl_eval(t, e->u.index.index, &index);
        if (s == TR_OK) {
            char err[512] = "";
            s = tr_dsl_index(base, index, out, err, sizeof err);
            if (s) tr_dsl_fail(t, e->off, s, "%s", err);
            tr_dsl_unref(index);
        }
        tr_dsl_unref(base);
        break;
    }
    case TR_DSL_E_CALL:
        s = e->u.call.callee == TR_DSL_CALLEE_BUILTIN ? eval_builtin(t, e, out)
                                                      : tr_dsl_call(t, e, false, out);
        break;
    case TR_DSL_E_LIST: s = eval_list(t, e, out); break;
    case TR_DSL_E_OBJECT: s = eval_object(t, e, out); break;
    case TR_DSL_E_UNARY:
    case TR_DSL_E_BINARY: s = eval_ops(t, e, out); break;
    }
    if (s == TR_OK && !*out) s = nomem(t, e->off);
    t->depth--;
    return s;
}
