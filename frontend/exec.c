/* exec.c — statements: appending text, let/assign, role blocks, if, for,
 * return; gen/select go to gen.c, fork/parallel and calls to task.c. */
#include <string.h>

#include "frontend/interp_internal.h"

#define TRY(x)                      \
    do {                            \
        tr_status s_ = (x);         \
        if (s_ != TR_OK) return s_; \
    } while (0)

/* Checks that text may go into the prompt here, and sets the mode. */
static tr_status check_append(tr_dsl_task *t, uint32_t off) {
    tr_dsl_prompt *p = &t->prompt;
    if (p->open_role) return TR_OK;
    if (p->mode == TR_DSL_MODE_CHAT)
        return tr_dsl_fail(t, off, TR_ERR_STATE,
                           "text outside a role block in a chat prompt: put it inside "
                           "system { }, user { } or assistant { } (a prompt is either "
                           "plain text or role blocks)");
    p->mode = TR_DSL_MODE_TEXT;
    return TR_OK;
}

static tr_status append_value(tr_dsl_task *t, json_t *v, uint32_t off) {
    if (json_is_null(v)) return TR_OK;
    json_t *text = v;
    tr_dsl_buf b = {0};
    if (!json_is_string(v)) {
        if (tr_dsl_value_append_text(&b, v) != TR_OK)
            return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
        text = json_stringn_nocheck(b.p ? b.p : "", b.len);
        tr_dsl_buf_free(&b);
        if (!text) return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
    } else {
        tr_dsl_ref(text);
    }
    tr_status s = TR_OK;
    if (json_string_length(text) == 0) goto out;
    if ((s = check_append(t, off))) goto out;
    if (t->prompt.bytes + json_string_length(text) > t->run->lim->max_prompt_bytes) {
        s = tr_dsl_fail(t, off, TR_ERR_LIMIT,
                        "the prompt would grow past the limit max_prompt_bytes (%zu)",
                        t->run->lim->max_prompt_bytes);
        goto out;
    }
    if (tr_dsl_prompt_push(&t->prompt, TR_DSL_ITEM_TEXT, text, NULL, NULL))
        s = tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
out:
    tr_dsl_unref(text);
    return s;
}

static tr_status exec_expr_stmt(tr_dsl_task *t, const tr_dsl_stmt *st) {
    const tr_dsl_expr *e = st->u.expr;
    if (e->kind == TR_DSL_E_CALL && e->u.call.callee == TR_DSL_CALLEE_SCRIPT)
        return tr_dsl_call(t, e, true, NULL);
    if (e->kind == TR_DSL_E_VAR) { /* a pending generation goes in as it is */
        tr_dsl_slot *s = tr_dsl_env_find(&t->frame->env, e->u.name);
        if (s && s->fut && s->fut->kind == TR_DSL_FUT_GEN && !s->fut->parse_json) {
            TRY(check_append(t, st->off));
            if (tr_dsl_prompt_push(&t->prompt, TR_DSL_ITEM_FUT, NULL, s->fut, NULL))
                return tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
            return TR_OK;
        }
    }
    json_t *v;
    TRY(tr_dsl_eval(t, e, &v));
    tr_status s = append_value(t, v, st->off);
    tr_dsl_unref(v);
    return s;
}

static bool is_global(const tr_dsl_task *t, const char *name) {
    const tr_dsl_script *sc = t->run->sess->script;
    for (int32_t i = 0; i < sc->n_globals; i++)
        if (strcmp(sc->globals[i].name, name) == 0) return true;
    return false;
}

static tr_status exec_let(tr_dsl_task *t, const tr_dsl_stmt *st) {
    const char *name = st->u.let.name;
    if (st->kind == TR_DSL_S_ASSIGN && !tr_dsl_env_find(&t->frame->env, name)) {
        if (is_global(t, name))
            return tr_dsl_fail(t, st->off, TR_ERR_STATE,
                               "cannot assign to top-level '%s' (top-level values are "
                               "constants; `let %s = ...` makes a local one)",
                               name, name);
        return tr_dsl_fail(t, st->off, TR_ERR_NOT_FOUND,
                           "assignment to '%s', which is not defined (write `let %s = ...` "
                           "the first time)",
                           name, name);
    }
    const tr_dsl_expr *e = st->u.let.value;
    if (e->kind == TR_DSL_E_CALL && e->u.call.callee == TR_DSL_CALLEE_SCRIPT &&
        t->run->sess->script->fns[e->u.call.index].generates) {
        tr_dsl_future *f;
        TRY(tr_dsl_spawn_call(t, e, &f));
        tr_status s = tr_dsl_env_set(&t->frame->env, name, NULL, f, false);
        tr_dsl_future_release(f);
        return s ? tr_dsl_fail(t, st->off, s, "out of memory") : TR_OK;
    }
    json_t *v;
    TRY(tr_dsl_eval(t, e, &v));
    tr_status s = tr_dsl_env_set(&t->frame->env, name, v, NULL, false);
    tr_dsl_unref(v);
    return s ? tr_dsl_fail(t, st->off, s, "out of memory") : TR_OK;
}

static tr_status exec_role(tr_dsl_task *t, const tr_dsl_stmt *st) {
    tr_dsl_prompt *p = &t->prompt;
    if (p->open_role)
        return tr_dsl_fail(t, st->off, TR_ERR_STATE,
                           "a %s block inside a %s block: role blocks do not nest",
                           st->u.role.role, p->open_role);
    if (p->mode == TR_DSL_MODE_TEXT)
        return tr_dsl_fail(t, st->off, TR_ERR_STATE,
                           "a %s block after text outside role blocks: a prompt is either "
                           "plain text or role blocks",
                           st->u.role.role);
    p->mode = TR_DSL_MODE_CHAT;
    if (tr_dsl_prompt_push(p, TR_DSL_ITEM_OPEN, NULL, NULL, st->u.role.role))
        return tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
    p->open_role = st->u.role.role;
    tr_status s = tr_dsl_exec_block(t, &st->u.role.body);
    if (s != TR_OK) return s; /* a return inside the block closes it too */
    if (p->open_role != st->u.role.role)
        return tr_dsl_fail(t, st->off, TR_ERR_INTERNAL, "role block state lost");
    p->open_role = NULL;
    if (tr_dsl_prompt_push(p, TR_DSL_ITEM_CLOSE, NULL, NULL, st->u.role.role))
        return tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
    return TR_OK;
}

static tr_status exec_if(tr_dsl_task *t, const tr_dsl_stmt *st) {
    for (int32_t i = 0; i < st->u.if_.n_conds; i++) {
        json_t *c;
        TRY(tr_dsl_eval(t, st->u.if_.conds[i], &c));
        bool yes = tr_dsl_truthy(c);
        tr_dsl_unref(c);
        if (yes) return tr_dsl_exec_block(t, &st->u.if_.blocks[i]);
    }
    return st->u.if_.has_else ? tr_dsl_exec_block(t, &st->u.if_.else_block) : TR_OK;
}

static tr_status exec_for(tr_dsl_task *t, const tr_dsl_stmt *st) {
    json_t *iter;
    TRY(tr_dsl_eval(t, st->u.loop.iter, &iter));
    tr_status s = TR_OK;
    const tr_dsl_limits *lim = t->run->lim;
    if (json_is_array(iter) || json_is_object(iter)) {
        size_t n = json_is_array(iter) ? json_array_size(iter) : json_object_size(iter);
        if ((int64_t)n > lim->max_loop_iterations) {
            s = tr_dsl_fail(t, st->off, TR_ERR_LIMIT,
                            "a loop over %zu items, over the limit max_loop_iterations "
                            "(%lld)",
                            n, (long long)lim->max_loop_iterations);
        }
        /* `for k, v in obj`: key and value; `for k in obj`: the keys */
        void *it = json_is_object(iter) ? json_object_iter(iter) : NULL;
        for (size_t i = 0; s == TR_OK && i < n; i++) {
            json_t *item, *index;
            if (json_is_array(iter)) {
                item = tr_dsl_ref(json_array_get(iter, i));
                index = json_integer((json_int_t)i);
            } else {
                index = json_string(json_object_iter_key(it));
                item = st->u.loop.index_name ? tr_dsl_ref(json_object_iter_value(it))
                                             : tr_dsl_ref(index);
                it = json_object_iter_next(iter, it);
            }
            if (!item || !index) s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
            if (s == TR_OK && st->u.loop.index_name &&
                tr_dsl_env_set(&t->frame->env, st->u.loop.index_name, index, NULL, false))
                s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
            if (s == TR_OK &&
                tr_dsl_env_set(&t->frame->env, st->u.loop.item_name, item, NULL, false))
                s = tr_dsl_fail(t, st->off, TR_ERR_NOMEM, "out of memory");
            tr_dsl_unref(item);
            tr_dsl_unref(index);
            if (s == TR_OK) s = tr_dsl_exec_block(t, &st->u.loop.body);
            if (t->frame->returned) break;
        }
    } else {
        s = tr_dsl_fail(t, st->u.loop.iter->off, TR_ERR_INVALID_ARG,
                        "for loops go over a list or an object, not %s (range(n) counts)",
                        tr_dsl_type_name(iter));
    }
    tr_dsl_unref(iter);
    return s;
}

static tr_status exec_stmt(tr_dsl_task *t, const tr_dsl_stmt *st) {
    TRY(tr_dsl_step(t, st->off));
    switch (st->kind) {
    case TR_DSL_S_EXPR: return exec_expr_stmt(t, st);
    case TR_DSL_S_LET:
    case TR_DSL_S_ASSIGN: return exec_let(t, st);
    case TR_DSL_S_ROLE: return exec_role(t, st);
    case TR_DSL_S_GEN:
    case TR_DSL_S_SELECT: return tr_dsl_exec_gen(t, st);
    case TR_DSL_S_IF: return exec_if(t, st);
    case TR_DSL_S_FOR: return exec_for(t, st);
    case TR_DSL_S_FORK: return tr_dsl_exec_fork(t, st);
    case TR_DSL_S_PARALLEL: return tr_dsl_exec_parallel(t, st);
    case TR_DSL_S_RETURN: {
        json_t *v = NULL;
        if (st->u.expr) TRY(tr_dsl_eval(t, st->u.expr, &v));
        else v = json_null();
        tr_dsl_unref(t->frame->ret);
        t->frame->ret = v;
        t->frame->returned = true;
        return TR_OK;
    }
    }
    return tr_dsl_fail(t, st->off, TR_ERR_INTERNAL, "unknown statement");
}

tr_status tr_dsl_exec_block(tr_dsl_task *t, const tr_dsl_block *b) {
    if (++t->depth > 4 * t->run->lim->max_nesting + 2 * t->run->lim->max_call_depth) {
        t->depth--;
        return tr_dsl_fail(t, b->n ? b->stmts[0]->off : 0, TR_ERR_LIMIT,
                           "blocks and calls nested too deep (limits max_nesting, "
                           "max_call_depth)");
    }
    tr_status s = TR_OK;
    for (int32_t i = 0; i < b->n && s == TR_OK && !t->frame->returned; i++)
        s = exec_stmt(t, b->stmts[i]);
    t->depth--;
    return s;
}
