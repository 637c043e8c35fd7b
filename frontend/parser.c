/* parser.c — see parser_internal.h. Expressions by precedence climbing, lowest
 * first:
 *
 *   or < and < not < comparison (== != < <= > >= in, not in) < + - <
 *   * / % < unary - < postfix (.name [index] call(...)) < primary
 *
 * Line breaks: statements need no separator, so an operator or a postfix
 * bracket that starts a new line begins a new statement, never continues
 * the expression (`let a = b` then `(x)` on the next line is not a call);
 * inside (), [] and object braces line breaks are free.
 */
#include "frontend/parser_internal.h"

#include <string.h>

#include "frontend/builtins_internal.h"
#include "frontend/lexer_internal.h"
#include "frontend/value.h"

const char *const tr_dsl_gen_option_names[TR_DSL_GEN_OPT_COUNT_] = {
#define TR_DSL_GEN_OPT_NAME_(name, text) text,
    TR_DSL_GEN_OPTION_LIST(TR_DSL_GEN_OPT_NAME_)
#undef TR_DSL_GEN_OPT_NAME_
};

typedef struct parser {
    tr_dsl_script *s;
    tr_dsl_lexer lx;
    tr_dsl_token cur, next;
    tr_diag *d;
    const tr_dsl_limits *lim;
    int32_t depth;   /* current nesting */
    int32_t bracket; /* > 0: inside (), [] or an object: line breaks free */
    int32_t fork;    /* > 0: inside a fork or parallel branch */
    bool in_fn;
} parser;

/* ---- arena vectors (freed with the arena, even on error) ---- */

typedef struct vec {
    void **items;
    int32_t n, cap;
} vec;

static bool vec_push(parser *p, vec *v, void *item) {
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 4;
        void **ni = tr_arena_array(&p->s->arena, (size_t)cap, sizeof *ni);
        if (!ni) return false;
        if (v->n) memcpy(ni, v->items, (size_t)v->n * sizeof *ni);
        v->items = ni;
        v->cap = cap;
    }
    v->items[v->n++] = item;
    return true;
}

/* ---- errors and tokens ---- */

static tr_status nomem(parser *p) {
    return tr_diag_set(p->d, TR_ERR_NOMEM, p->cur.offset,
                       "out of memory (or over the parser's budget of %zu bytes)",
                       p->lim->max_ast_bytes);
}

static tr_status err_at(parser *p, uint32_t off, const char *fmt, const char *a,
                        const char *b) {
    return tr_diag_set(p->d, TR_ERR_FORMAT, off, fmt, a ? a : "", b ? b : "");
}

static tr_status advance(parser *p) {
    p->cur = p->next;
    if (p->cur.kind == TR_DSL_TOK_EOF) return TR_OK;
    return tr_dsl_lex_next(&p->lx, &p->next);
}

static bool is(const parser *p, tr_dsl_tok k) { return p->cur.kind == k; }

static tr_status expect(parser *p, tr_dsl_tok k, const char *context) {
    if (p->cur.kind != k)
        return err_at(p, p->cur.offset, "expected %s %s", tr_dsl_tok_describe(k), context);
    return advance(p);
}

static tr_status enter(parser *p) {
    if (++p->depth > p->lim->max_nesting)
        return tr_diag_set(p->d, TR_ERR_LIMIT, p->cur.offset,
                           "nested more than %d deep (limit max_nesting)",
                           p->lim->max_nesting);
    return TR_OK;
}

/* May the current token continue the expression to its left? */
static bool continues(const parser *p) { return !p->cur.nl_before || p->bracket > 0; }

#define TRY(x)                       \
    do {                             \
        tr_status s_ = (x);          \
        if (s_ != TR_OK) return s_;  \
    } while (0)

static tr_dsl_expr *new_expr(parser *p, tr_dsl_expr_kind k, uint32_t off) {
    tr_dsl_expr *e = tr_arena_alloc(&p->s->arena, sizeof *e);
    if (e) {
        e->kind = k;
        e->off = off;
    }
    return e;
}

static tr_dsl_stmt *new_stmt(parser *p, tr_dsl_stmt_kind k, uint32_t off) {
    tr_dsl_stmt *st = tr_arena_alloc(&p->s->arena, sizeof *st);
    if (st) {
        st->kind = k;
        st->off = off;
    }
    return st;
}

/* Takes a reference to v for the script's lifetime. */
static tr_status add_const(parser *p, json_t *v, uint32_t off, tr_dsl_expr **out) {
    if (!v) return nomem(p);
    tr_dsl_script *s = p->s;
    if (s->n_consts == s->cap_consts) {
        int32_t cap = s->cap_consts ? s->cap_consts * 2 : 16;
        json_t **nc = realloc(s->consts, (size_t)cap * sizeof *nc);
        if (!nc) {
            tr_dsl_unref(v);
            return nomem(p);
        }
        s->consts = nc;
        s->cap_consts = cap;
    }
    s->consts[s->n_consts++] = v;
    tr_dsl_expr *e = new_expr(p, TR_DSL_E_CONST, off);
    if (!e) return nomem(p);
    e->u.value = v;
    *out = e;
    return TR_OK;
}

/* ---- expressions ---- */

static tr_status parse_expr(parser *p, tr_dsl_expr **out);

/* A string token: one constant when it has no interpolation. */
static tr_status parse_string(parser *p, tr_dsl_expr **out) {
    tr_dsl_token t = p->cur;
    TRY(advance(p));
    bool plain = true;
    for (int32_t i = 0; i < t.n_parts; i++)
        if (t.parts[i].is_expr) plain = false;
    if (plain) {
        const char *text = t.n_parts ? t.parts[0].text : "";
        size_t len = t.n_parts ? t.parts[0].len : 0;
        return add_const(p, json_stringn_nocheck(text, len), t.offset, out);
    }
    tr_dsl_expr *e = new_expr(p, TR_DSL_E_STRING, t.offset);
    tr_dsl_strseg *segs = tr_arena_array(&p->s->arena, (size_t)t.n_parts, sizeof *segs);
    if (!e || !segs) return nomem(p);
    for (int32_t i = 0; i < t.n_parts; i++) {
        const tr_dsl_strpart *pt = &t.parts[i];
        if (!pt->is_expr) {
            segs[i].text = pt->text;
            segs[i].len = pt->len;
            continue;
        }
        /* a sub-parser over the interpolation's span */
        parser sub = *p;
        sub.bracket = 1;
        tr_dsl_lexer_init(&sub.lx, p->s->src, pt->offset, pt->offset + pt->len,
                          &p->s->arena, p->d, p->lim->max_nesting);
        TRY(tr_dsl_lex_next(&sub.lx, &sub.next));
        TRY(advance(&sub));
        if (is(&sub, TR_DSL_TOK_EOF))
            return err_at(p, pt->offset - 1, "empty interpolation {} (write {{}} for "
                                             "literal braces)%s%s", NULL, NULL);
        TRY(parse_expr(&sub, &segs[i].expr));
        if (!is(&sub, TR_DSL_TOK_EOF))
            return err_at(p, sub.cur.offset,
                          "expected '}' to end the interpolation, found %s%s",
                          tr_dsl_tok_describe(sub.cur.kind), NULL);
    }
    e->u.str.segs = segs;
    e->u.str.n = t.n_parts;
    *out = e;
    return TR_OK;
}

/* ( args ) after a callee name; p->cur is '('. */
static tr_status parse_call(parser *p, const char *name, uint32_t off, tr_dsl_expr **out) {
    TRY(advance(p));
    p->bracket++;
    vec args = {0}, names = {0};
    bool named_seen = false;
    while (!is(p, TR_DSL_TOK_RPAREN)) {
        const char *arg_name = NULL;
        uint32_t aoff = p->cur.offset;
        if (is(p, TR_DSL_TOK_IDENT) && p->next.kind == TR_DSL_TOK_ASSIGN) {
            arg_name = p->cur.name;
            TRY(advance(p));
            TRY(advance(p));
            named_seen = true;
        } else if (named_seen) {
            return err_at(p, aoff, "a positional argument after a named one%s%s", NULL,
                          NULL);
        }
        tr_dsl_expr *a;
        TRY(parse_expr(p, &a));
        if (!vec_push(p, &args, a) || !vec_push(p, &names, (void *)arg_name))
            return nomem(p);
        if (!is(p, TR_DSL_TOK_COMMA)) break;
        TRY(advance(p));
    }
    p->bracket--;
    TRY(expect(p, TR_DSL_TOK_RPAREN, "to end the arguments"));
    tr_dsl_expr *e = new_expr(p, TR_DSL_E_CALL, off);
    if (!e) return nomem(p);
    e->u.call.name = name;
    e->u.call.args = (tr_dsl_expr **)args.items;
    e->u.call.arg_names = (const char **)names.items;
    e->u.call.n_args = args.n;
    *out = e;
    return TR_OK;
}

static tr_status parse_list(parser *p, tr_dsl_expr **out) {
    uint32_t off = p->cur.offset;
    TRY(advance(p));
    p->bracket++;
    vec items = {0};
    while (!is(p, TR_DSL_TOK_RBRACKET)) {
        tr_dsl_expr *a;
        TRY(parse_expr(p, &a));
        if (!vec_push(p, &items, a)) return nomem(p);
        if (!is(p, TR_DSL_TOK_COMMA)) break;
        TRY(advance(p));
    }
    p->bracket--;
    TRY(expect(p, TR_DSL_TOK_RBRACKET, "to end the list"));
    tr_dsl_expr *e = new_expr(p, TR_DSL_E_LIST, off);
    if (!e) return nomem(p);
    e->u.list.items = (tr_dsl_expr **)items.items;
    e->u.list.n = items.n;
    *out = e;
    return TR_OK;
}

static tr_status parse_object(parser *p, tr_dsl_expr **out) {
    uint32_t off = p->cur.offset;
    TRY(advance(p));
    p->bracket++;
    vec keys = {0}, vals = {0};
    while (!is(p, TR_DSL_TOK_RBRACE)) {
        const char *key;
        if (is(p, TR_DSL_TOK_IDENT)) {
            key = p->cur.name;
        } else if (is(p, TR_DSL_TOK_STRING) && p->cur.n_parts <= 1 &&
                   (p->cur.n_parts == 0 || !p->cur.parts[0].is_expr)) {
            key = p->cur.n_parts ? p->cur.parts[0].text : "";
            if (p->cur.n_parts && strlen(key) != p->cur.parts[0].len)
                return err_at(p, p->cur.offset, "an object key cannot contain a NUL "
                                                "byte%s%s", NULL, NULL);
        } else {
            return err_at(p, p->cur.offset,
                          "expected a key (a name or a plain string) in the object, "
                          "found %s%s",
                          tr_dsl_tok_describe(p->cur.kind), NULL);
        }
        TRY(advance(p));
        TRY(expect(p, TR_DSL_TOK_COLON, "after the object key"));
        tr_dsl_expr *v;
        TRY(parse_expr(p, &v));
        if (!vec_push(p, &keys, (void *)key) || !vec_push(p, &vals, v)) return nomem(p);
        if (!is(p, TR_DSL_TOK_COMMA)) break;
        TRY(advance(p));
    }
    p->bracket--;
    TRY(expect(p, TR_DSL_TOK_RBRACE, "to end the object"));
    tr_dsl_expr *e = new_expr(p, TR_DSL_E_OBJECT, off);
    if (!e) return nomem(p);
    e->u.object.keys = (const char **)keys.items;
    e->u.object.values = (tr_dsl_expr **)vals.items;
    e->u.object.n = keys.n;
    *out = e;
    return TR_OK;
}

static tr_status parse_primary(parser *p, tr_dsl_expr **out) {
    tr_dsl_token t = p->cur;
    switch (t.kind) {
    case TR_DSL_TOK_INT:
        TRY(advance(p));
        return add_const(p, json_integer(t.i), t.offset, out);
    case TR_DSL_TOK_FLOAT:
        TRY(advance(p));
        return add_const(p, json_real(t.f), t.offset, out);
    case TR_DSL_TOK_TRUE:
    case TR_DSL_TOK_FALSE:
        TRY(advance(p));
        return add_const(p, json_boolean(t.kind == TR_DSL_TOK_TRUE), t.offset, out);
    case TR_DSL_TOK_NULL:
        TRY(advance(p));
        return add_const(p, json_null(), t.offset, out);
    case TR_DSL_TOK_STRING:
        return parse_string(p, out);
    case TR_DSL_TOK_IDENT:
        TRY(advance(p));
        if (is(p, TR_DSL_TOK_LPAREN) && continues(p))
            return parse_call(p, t.name, t.offset, out);
        *out = new_expr(p, TR_DSL_E_VAR, t.offset);
        if (!*out) return nomem(p);
        (*out)->u.name = t.name;
        return TR_OK;
    case TR_DSL_TOK_LPAREN: {
        TRY(advance(p));
        p->bracket++;
        TRY(parse_expr(p, out));
        p->bracket--;
        return expect(p, TR_DSL_TOK_RPAREN, "to close the parenthesis");
    }
    case TR_DSL_TOK_LBRACKET:
        return parse_list(p, out);
    case TR_DSL_TOK_LBRACE:
        return parse_object(p, out);
    case TR_DSL_TOK_GEN:
    case TR_DSL_TOK_SELECT:
        return err_at(p, t.offset,
                      "%s is a statement, not a value: write `%s NAME(...)` on its "
                      "own, then use NAME",
                      t.kind == TR_DSL_TOK_GEN ? "gen" : "select",
                      t.kind == TR_DSL_TOK_GEN ? "gen" : "select");
    default:
        return err_at(p, t.offset, "expected a value, found %s%s",
                      tr_dsl_tok_describe(t.kind), NULL);
    }
}

static tr_status parse_postfix(parser *p, tr_dsl_expr **out) {
    TRY(parse_primary(p, out));
    for (;;) {
        if (!continues(p)) return TR_OK;
        uint32_t off = p->cur.offset;
        if (is(p, TR_DSL_TOK_DOT)) {
            TRY(advance(p));
            if (!is(p, TR_DSL_TOK_IDENT))
                return err_at(p, p->cur.offset, "expected a field name after '.', "
                                                "found %s%s",
                              tr_dsl_tok_describe(p->cur.kind), NULL);
            tr_dsl_expr *e = new_expr(p, TR_DSL_E_FIELD, off);
            if (!e) return nomem(p);
            e->u.field.base = *out;
            e->u.field.name = p->cur.name;
            TRY(advance(p));
            *out = e;
        } else if (is(p, TR_DSL_TOK_LBRACKET)) {
            TRY(advance(p));
            p->bracket++;
            tr_dsl_expr *e = new_expr(p, TR_DSL_E_INDEX, off);
            if (!e) return nomem(p);
            e->u.index.base = *out;
            TRY(parse_expr(p, &e->u.index.index));
            p->bracket--;
            TRY(expect(p, TR_DSL_TOK_RBRACKET, "to end the index"));
            *out = e;
        } else if (is(p, TR_DSL_TOK_LPAREN)) {
            return err_at(p, off, "only functions can be called: write NAME(...)%s%s",
                          NULL, NULL);
        } else {
            return TR_OK;
        }
    }
}

static tr_status make_op(parser *p, tr_dsl_op op, uint32_t off, tr_dsl_expr *a,
                         tr_dsl_expr *b, tr_dsl_expr **out) {
    tr_dsl_expr *e = new_expr(p, b ? TR_DSL_E_BINARY : TR_DSL_E_UNARY, off);
    if (!e) return nomem(p);
    e->u.op.op = op;
    e->u.op.a = a;
    e->u.op.b = b;
    *out = e;
    return TR_OK;
}

static tr_status parse_unary(parser *p, tr_dsl_expr **out) {
    if (is(p, TR_DSL_TOK_MINUS)) {
        uint32_t off = p->cur.offset;
        TRY(advance(p));
        TRY(enter(p));
        tr_dsl_expr *a;
        TRY(parse_unary(p, &a));
        p->depth--;
        return make_op(p, TR_DSL_OP_NEG, off, a, NULL, out);
    }
    return parse_postfix(p, out);
}

static tr_status parse_mul(parser *p, tr_dsl_expr **out) {
    TRY(parse_unary(p, out));
    while (continues(p) &&
           (is(p, TR_DSL_TOK_STAR) || is(p, TR_DSL_TOK_SLASH) || is(p, TR_DSL_TOK_PERCENT))) {
        tr_dsl_op op = is(p, TR_DSL_TOK_STAR)    ? TR_DSL_OP_MUL
                       : is(p, TR_DSL_TOK_SLASH) ? TR_DSL_OP_DIV
                                                 : TR_DSL_OP_MOD;
        uint32_t off = p->cur.offset;
        TRY(advance(p));
        tr_dsl_expr *b;
        TRY(parse_unary(p, &b));
        TRY(make_op(p, op, off, *out, b, out));
    }
    return TR_OK;
}

static tr_status parse_add(parser *p, tr_dsl_expr **out) {
    TRY(parse_mul(p, out));
    while (continues(p) && (is(p, TR_DSL_TOK_PLUS) || is(p, TR_DSL_TOK_MINUS))) {
        tr_dsl_op op = is(p, TR_DSL_TOK_PLUS) ? TR_DSL_OP_ADD : TR_DSL_OP_SUB;
        uint32_t off = p->cur.offset;
        TRY(advance(p));
        tr_dsl_expr *b;
        TRY(parse_mul(p, &b));
        TRY(make_op(p, op, off, *out, b, out));
    }
    return TR_OK;
}

static tr_status parse_cmp(parser *p, tr_dsl_expr **out) {
    TRY(parse_add(p, out));
    if (!continues(p)) return TR_OK;
    tr_dsl_op op;
    switch (p->cur.kind) {
    case TR_DSL_TOK_EQ: op = TR_DSL_OP_EQ; break;
    case TR_DSL_TOK_NE: op = TR_DSL_OP_NE; break;
    case TR_DSL_TOK_LT: op = TR_DSL_OP_LT; break;
    case TR_DSL_TOK_LE: op = TR_DSL_OP_LE; break;
    case TR_DSL_TOK_GT: op = TR_DSL_OP_GT; break;
    case TR_DSL_TOK_GE: op = TR_DSL_OP_GE; break;
    case TR_DSL_TOK_IN: op = TR_DSL_OP_IN; break;
    case TR_DSL_TOK_NOT:
        if (p->next.kind != TR_DSL_TOK_IN) return TR_OK;
        op = TR_DSL_OP_NOT_IN;
        TRY(advance(p));
        break;
    default: return TR_OK;
    }
    uint32_t off = p->cur.offset;
    TRY(advance(p));
    tr_dsl_expr *b;
    TRY(parse_add(p, &b));
    TRY(make_op(p, op, off, *out, b, out));
    if (continues(p) && (is(p, TR_DSL_TOK_EQ) || is(p, TR_DSL_TOK_NE) ||
                         is(p, TR_DSL_TOK_LT) || is(p, TR_DSL_TOK_LE) ||
                         is(p, TR_DSL_TOK_GT) || is(p, TR_DSL_TOK_GE)))
        return err_at(p, p->cur.offset, "comparisons do not chain: write `a < b and b "
                                        "< c`%s%s",
                      NULL, NULL);
    return TR_OK;
}

static tr_status parse_not(parser *p, tr_dsl_expr **out) {
    if (is(p, TR_DSL_TOK_NOT)) {
        uint32_t off = p->cur.offset;
        TRY(advance(p));
        TRY(enter(p));
        tr_dsl_expr *a;
        TRY(parse_not(p, &a));
        p->depth--;
        return make_op(p, TR_DSL_OP_NOT, off, a, NULL, out);
    }
    return parse_cmp(p, out);
}

static tr_status parse_and(parser *p, tr_dsl_expr **out) {
    TRY(parse_not(p, out));
    while (continues(p) && is(p, TR_DSL_TOK_AND)) {
        uint32_t off = p->cur.offset;
        TRY(advance(p));
        tr_dsl_expr *b;
        TRY(parse_not(p, &b));
        TRY(make_op(p, TR_DSL_OP_AND, off, *out, b, out));
    }
    return TR_OK;
}

static tr_status parse_expr(parser *p, tr_dsl_expr **out) {
    TRY(enter(p));
    TRY(parse_and(p, out));
    while (continues(p) && is(p, TR_DSL_TOK_OR)) {
        uint32_t off = p->cur.offset;
        TRY(advance(p));
        tr_dsl_expr *b;
        TRY(parse_and(p, &b));
        TRY(make_op(p, TR_DSL_OP_OR, off, *out, b, out));
    }
    p->depth--;
    return TR_OK;
}

/* ---- statements ---- */

static tr_status parse_block(parser *p, tr_dsl_block *out, const char *what);

static bool is_role(const parser *p) {
    return is(p, TR_DSL_TOK_IDENT) && p->next.kind == TR_DSL_TOK_LBRACE &&
           (strcmp(p->cur.name, "system") == 0 || strcmp(p->cur.name, "user") == 0 ||
            strcmp(p->cur.name, "assistant") == 0);
}

/* (name = expr, ...) after gen NAME or select NAME from X. */
static tr_status parse_genopts(parser *p, tr_dsl_stmt *st, bool is_select) {
    vec opts = {0};
    if (is(p, TR_DSL_TOK_LPAREN) && continues(p)) {
        TRY(advance(p));
        p->bracket++;
        while (!is(p, TR_DSL_TOK_RPAREN)) {
            if (!is(p, TR_DSL_TOK_IDENT) || p->next.kind != TR_DSL_TOK_ASSIGN)
                return err_at(p, p->cur.offset,
                              "expected an option `name=value` (e.g. max_tokens=64), "
                              "found %s%s",
                              tr_dsl_tok_describe(p->cur.kind), NULL);
            int32_t k = 0;
            while (k < TR_DSL_GEN_OPT_COUNT_ &&
                   strcmp(tr_dsl_gen_option_names[k], p->cur.name) != 0)
                k++;
            if (k == TR_DSL_GEN_OPT_COUNT_)
                return err_at(p, p->cur.offset,
                              "unknown option '%s' (gen takes max_tokens, temperature, "
                              "top_p, top_k, min_p, stop, seed, regex, json_schema, json, "
                              "choices, ignore_eos, presence_penalty, frequency_penalty, "
                              "repetition_penalty)%s",
                              p->cur.name, NULL);
            if (is_select && k != TR_DSL_GEN_OPT_TEMPERATURE && k != TR_DSL_GEN_OPT_SEED &&
                k != TR_DSL_GEN_OPT_MAX_TOKENS)
                return err_at(p, p->cur.offset,
                              "select takes only temperature, seed and max_tokens, not "
                              "'%s'%s",
                              p->cur.name, NULL);
            for (int32_t j = 0; j < opts.n; j++)
                if (((tr_dsl_genopt *)opts.items[j])->opt == (tr_dsl_gen_option)k)
                    return err_at(p, p->cur.offset, "option '%s' given twice%s",
                                  p->cur.name, NULL);
            tr_dsl_genopt *o = tr_arena_alloc(&p->s->arena, sizeof *o);
            if (!o) return nomem(p);
            o->opt = (tr_dsl_gen_option)k;
            o->off = p->cur.offset;
            TRY(advance(p));
            TRY(advance(p));
            TRY(parse_expr(p, &o->value));
            if (!vec_push(p, &opts, o)) return nomem(p);
            if (!is(p, TR_DSL_TOK_COMMA)) break;
            TRY(advance(p));
        }
        p->bracket--;
        TRY(expect(p, TR_DSL_TOK_RPAREN, "to end the options"));
    }
    tr_dsl_genopt *arr = tr_arena_array(&p->s->arena, (size_t)opts.n, sizeof *arr);
    if (opts.n && !arr) return nomem(p);
    for (int32_t j = 0; j < opts.n; j++) arr[j] = *(tr_dsl_genopt *)opts.items[j];
    st->u.gen.opts = arr;
    st->u.gen.n_opts = opts.n;
    return TR_OK;
}

static tr_status parse_gen(parser *p, tr_dsl_stmt **out) {
    bool is_select = is(p, TR_DSL_TOK_SELECT);
    const char *kw = is_select ? "select" : "gen";
    tr_dsl_stmt *st = new_stmt(p, is_select ? TR_DSL_S_SELECT : TR_DSL_S_GEN, p->cur.offset);
    if (!st) return nomem(p);
    TRY(advance(p));
    if (!is(p, TR_DSL_TOK_IDENT))
        return err_at(p, p->cur.offset,
                      "expected the name of the variable %s binds (e.g. `%s answer`)", kw,
                      kw);
    st->u.gen.name = p->cur.name;
    TRY(advance(p));
    TRY(parse_genopts(p, st, is_select));
    if (is_select) {
        if (!is(p, TR_DSL_TOK_IDENT) || strcmp(p->cur.name, "from") != 0)
            return err_at(p, p->cur.offset,
                          "expected `from` and the options: select NAME from [\"a\", "
                          "\"b\"]%s%s",
                          NULL, NULL);
        TRY(advance(p));
        TRY(parse_expr(p, &st->u.gen.from));
        /* `by logprob` / `by constrained`, on the same line */
        if (is(p, TR_DSL_TOK_IDENT) && !p->cur.nl_before && strcmp(p->cur.name, "by") == 0) {
            TRY(advance(p));
            bool lp = is(p, TR_DSL_TOK_IDENT) && strcmp(p->cur.name, "logprob") == 0;
            if (!lp && !(is(p, TR_DSL_TOK_IDENT) && strcmp(p->cur.name, "constrained") == 0))
                return err_at(p, p->cur.offset,
                              "expected `logprob` or `constrained` after `by` (how select "
                              "chooses)%s%s",
                              NULL, NULL);
            st->u.gen.by_logprob = lp;
            TRY(advance(p));
        }
    }
    *out = st;
    return TR_OK;
}

static tr_status parse_if(parser *p, tr_dsl_stmt **out) {
    tr_dsl_stmt *st = new_stmt(p, TR_DSL_S_IF, p->cur.offset);
    if (!st) return nomem(p);
    vec conds = {0}, blocks = {0};
    for (;;) {
        TRY(advance(p)); /* 'if' */
        tr_dsl_expr *c;
        TRY(parse_expr(p, &c));
        tr_dsl_block *b = tr_arena_alloc(&p->s->arena, sizeof *b);
        if (!b) return nomem(p);
        TRY(parse_block(p, b, "after the if condition"));
        if (!vec_push(p, &conds, c) || !vec_push(p, &blocks, b)) return nomem(p);
        if (!is(p, TR_DSL_TOK_ELSE)) break;
        TRY(advance(p));
        if (is(p, TR_DSL_TOK_IF)) continue;
        st->u.if_.has_else = true;
        TRY(parse_block(p, &st->u.if_.else_block, "after else"));
        break;
    }
    tr_dsl_block *arr = tr_arena_array(&p->s->arena, (size_t)blocks.n, sizeof *arr);
    if (!arr) return nomem(p);
    for (int32_t i = 0; i < blocks.n; i++) arr[i] = *(tr_dsl_block *)blocks.items[i];
    st->u.if_.conds = (tr_dsl_expr **)conds.items;
    st->u.if_.blocks = arr;
    st->u.if_.n_conds = conds.n;
    *out = st;
    return TR_OK;
}

/* for [i,] x in EXPR { } / fork [i,] x in EXPR { } / fork N { } */
static tr_status parse_loop(parser *p, tr_dsl_stmt **out) {
    bool fork = is(p, TR_DSL_TOK_FORK);
    tr_dsl_stmt *st = new_stmt(p, fork ? TR_DSL_S_FORK : TR_DSL_S_FOR, p->cur.offset);
    if (!st) return nomem(p);
    TRY(advance(p));
    bool binding = is(p, TR_DSL_TOK_IDENT) &&
                   (p->next.kind == TR_DSL_TOK_IN || p->next.kind == TR_DSL_TOK_COMMA);
    if (binding) {
        const char *first = p->cur.name;
        TRY(advance(p));
        if (is(p, TR_DSL_TOK_COMMA)) {
            TRY(advance(p));
            if (!is(p, TR_DSL_TOK_IDENT))
                return err_at(p, p->cur.offset, "expected the item's name after `%s,`%s",
                              first, NULL);
            st->u.loop.index_name = first;
            st->u.loop.item_name = p->cur.name;
            TRY(advance(p));
        } else {
            st->u.loop.item_name = first;
        }
        TRY(expect(p, TR_DSL_TOK_IN, "after the loop variable"));
    } else if (!fork) {
        return err_at(p, p->cur.offset, "expected `for NAME in LIST` (or `for i, NAME in "
                                        "LIST`)%s%s",
                      NULL, NULL);
    }
    TRY(parse_expr(p, &st->u.loop.iter));
    if (fork) p->fork++;
    TRY(parse_block(p, &st->u.loop.body, fork ? "for the fork's branches" : "for the loop"));
    if (fork) p->fork--;
    *out = st;
    return TR_OK;
}

static tr_status parse_parallel(parser *p, tr_dsl_stmt **out) {
    tr_dsl_stmt *st = new_stmt(p, TR_DSL_S_PARALLEL, p->cur.offset);
    if (!st) return nomem(p);
    TRY(advance(p));
    TRY(expect(p, TR_DSL_TOK_LBRACE, "after parallel"));
    vec blocks = {0}, offs = {0};
    p->fork++;
    while (is(p, TR_DSL_TOK_BRANCH)) {
        uint32_t boff = p->cur.offset;
        TRY(advance(p));
        tr_dsl_block *b = tr_arena_alloc(&p->s->arena, sizeof *b);
        uint32_t *o = tr_arena_alloc(&p->s->arena, sizeof *o);
        if (!b || !o) return nomem(p);
        *o = boff;
        TRY(parse_block(p, b, "after branch"));
        if (!vec_push(p, &blocks, b) || !vec_push(p, &offs, o)) return nomem(p);
    }
    p->fork--;
    if (blocks.n == 0)
        return err_at(p, p->cur.offset, "a parallel block holds `branch { ... }` blocks, "
                                        "found %s%s",
                      tr_dsl_tok_describe(p->cur.kind), NULL);
    TRY(expect(p, TR_DSL_TOK_RBRACE, "after the last branch (only `branch { }` blocks go "
                                     "in a parallel block)"));
    tr_dsl_block *arr = tr_arena_array(&p->s->arena, (size_t)blocks.n, sizeof *arr);
    uint32_t *oarr = tr_arena_array(&p->s->arena, (size_t)blocks.n, sizeof *oarr);
    if (!arr || !oarr) return nomem(p);
    for (int32_t i = 0; i < blocks.n; i++) {
        arr[i] = *(tr_dsl_block *)blocks.items[i];
        oarr[i] = *(uint32_t *)offs.items[i];
    }
    st->u.par.branches = arr;
    st->u.par.offs = oarr;
    st->u.par.n = blocks.n;
    *out = st;
    return TR_OK;
}

static tr_status parse_stmt(parser *p, tr_dsl_stmt **out) {
    uint32_t off = p->cur.offset;
    switch (p->cur.kind) {
    case TR_DSL_TOK_LET: {
        TRY(advance(p));
        if (!is(p, TR_DSL_TOK_IDENT))
            return err_at(p, p->cur.offset, "expected a name after let, found %s%s",
                          tr_dsl_tok_describe(p->cur.kind), NULL);
        tr_dsl_stmt *st = new_stmt(p, TR_DSL_S_LET, off);
        if (!st) return nomem(p);
        st->u.let.name = p->cur.name;
        TRY(advance(p));
        TRY(expect(p, TR_DSL_TOK_ASSIGN, "after the name (let NAME = VALUE)"));
        TRY(parse_expr(p, &st->u.let.value));
        *out = st;
        return TR_OK;
    }
    case TR_DSL_TOK_IF: return parse_if(p, out);
    case TR_DSL_TOK_FOR:
    case TR_DSL_TOK_FORK: return parse_loop(p, out);
    case TR_DSL_TOK_PARALLEL: return parse_parallel(p, out);
    case TR_DSL_TOK_GEN:
    case TR_DSL_TOK_SELECT: return parse_gen(p, out);
    case TR_DSL_TOK_RETURN: {
        if (p->fork)
            return err_at(p, off, "return inside a fork or parallel branch (branches "
                                  "end at their block's end; their variables are joined)"
                                  "%s%s",
                          NULL, NULL);
        tr_dsl_stmt *st = new_stmt(p, TR_DSL_S_RETURN, off);
        if (!st) return nomem(p);
        TRY(advance(p));
        if (!is(p, TR_DSL_TOK_RBRACE) && !p->cur.nl_before)
            TRY(parse_expr(p, &st->u.expr));
        *out = st;
        return TR_OK;
    }
    case TR_DSL_TOK_ELSE:
        return err_at(p, off, "else without an if before it%s%s", NULL, NULL);
    case TR_DSL_TOK_BRANCH:
        return err_at(p, off, "branch outside a parallel block%s%s", NULL, NULL);
    case TR_DSL_TOK_FN:
        return err_at(p, off, "functions are defined at the top level, not inside "
                              "another%s%s",
                      NULL, NULL);
    default: break;
    }
    if (is_role(p)) {
        tr_dsl_stmt *st = new_stmt(p, TR_DSL_S_ROLE, off);
        if (!st) return nomem(p);
        st->u.role.role = p->cur.name;
        TRY(advance(p));
        TRY(parse_block(p, &st->u.role.body, "for the role block"));
        *out = st;
        return TR_OK;
    }
    if (is(p, TR_DSL_TOK_IDENT) && p->next.kind == TR_DSL_TOK_ASSIGN) {
        tr_dsl_stmt *st = new_stmt(p, TR_DSL_S_ASSIGN, off);
        if (!st) return nomem(p);
        st->u.let.name = p->cur.name;
        TRY(advance(p));
        TRY(advance(p));
        TRY(parse_expr(p, &st->u.let.value));
        *out = st;
        return TR_OK;
    }
    tr_dsl_stmt *st = new_stmt(p, TR_DSL_S_EXPR, off);
    if (!st) return nomem(p);
    TRY(parse_expr(p, &st->u.expr));
    *out = st;
    return TR_OK;
}

static tr_status parse_block(parser *p, tr_dsl_block *out, const char *what) {
    if (!is(p, TR_DSL_TOK_LBRACE))
        return err_at(p, p->cur.offset, "expected '{' %s, found %s", what,
                      tr_dsl_tok_describe(p->cur.kind));
    uint32_t open = p->cur.offset;
    TRY(advance(p));
    TRY(enter(p));
    int32_t saved = p->bracket;
    p->bracket = 0;
    vec stmts = {0};
    while (!is(p, TR_DSL_TOK_RBRACE)) {
        if (is(p, TR_DSL_TOK_EOF))
            return err_at(p, open, "this '{' is never closed (the script ends first)%s%s",
                          NULL, NULL);
        tr_dsl_stmt *st;
        TRY(parse_stmt(p, &st));
        if (!vec_push(p, &stmts, st)) return nomem(p);
    }
    TRY(advance(p));
    p->bracket = saved;
    p->depth--;
    out->stmts = (tr_dsl_stmt **)stmts.items;
    out->n = stmts.n;
    return TR_OK;
}

/* ---- top level ---- */

static tr_status parse_fn(parser *p, vec *fns) {
    tr_dsl_fn *f = tr_arena_alloc(&p->s->arena, sizeof *f);
    if (!f) return nomem(p);
    f->off = p->cur.offset;
    TRY(advance(p));
    if (!is(p, TR_DSL_TOK_IDENT))
        return err_at(p, p->cur.offset, "expected the function's name after fn, found %s%s",
                      tr_dsl_tok_describe(p->cur.kind), NULL);
    f->name = p->cur.name;
    TRY(advance(p));
    TRY(expect(p, TR_DSL_TOK_LPAREN, "after the function's name"));
    p->bracket++;
    vec params = {0};
    bool defaults = false;
    while (!is(p, TR_DSL_TOK_RPAREN)) {
        if (!is(p, TR_DSL_TOK_IDENT))
            return err_at(p, p->cur.offset, "expected a parameter name, found %s%s",
                          tr_dsl_tok_describe(p->cur.kind), NULL);
        tr_dsl_param *prm = tr_arena_alloc(&p->s->arena, sizeof *prm);
        if (!prm) return nomem(p);
        prm->name = p->cur.name;
        prm->off = p->cur.offset;
        for (int32_t i = 0; i < params.n; i++)
            if (strcmp(((tr_dsl_param *)params.items[i])->name, prm->name) == 0)
                return err_at(p, prm->off, "parameter '%s' appears twice%s", prm->name,
                              NULL);
        TRY(advance(p));
        if (is(p, TR_DSL_TOK_ASSIGN)) {
            TRY(advance(p));
            TRY(parse_expr(p, &prm->def));
            defaults = true;
        } else if (defaults) {
            return err_at(p, prm->off, "parameter '%s' without a default after one with a "
                                       "default%s",
                          prm->name, NULL);
        }
        if (!vec_push(p, &params, prm)) return nomem(p);
        if (!is(p, TR_DSL_TOK_COMMA)) break;
        TRY(advance(p));
    }
    p->bracket--;
    TRY(expect(p, TR_DSL_TOK_RPAREN, "to end the parameters"));
    f->params = tr_arena_array(&p->s->arena, (size_t)params.n, sizeof *f->params);
    if (params.n && !f->params) return nomem(p);
    for (int32_t i = 0; i < params.n; i++) f->params[i] = *(tr_dsl_param *)params.items[i];
    f->n_params = params.n;
    for (int32_t i = 0; i < fns->n; i++)
        if (strcmp(((tr_dsl_fn *)fns->items[i])->name, f->name) == 0)
            return err_at(p, f->off, "function '%s' is defined twice%s", f->name, NULL);
    if (tr_dsl_builtin_find(f->name) >= 0)
        return err_at(p, f->off, "'%s' is a built-in function; pick another name%s",
                      f->name, NULL);
    p->in_fn = true;
    TRY(parse_block(p, &f->body, "for the function's body"));
    p->in_fn = false;
    return vec_push(p, fns, f) ? TR_OK : nomem(p);
}

static tr_status parse_top(parser *p) {
    vec fns = {0}, globals = {0};
    while (!is(p, TR_DSL_TOK_EOF)) {
        if (is(p, TR_DSL_TOK_FN)) {
            TRY(parse_fn(p, &fns));
        } else if (is(p, TR_DSL_TOK_LET)) {
            tr_dsl_stmt *st;
            TRY(parse_stmt(p, &st));
            tr_dsl_global *g = tr_arena_alloc(&p->s->arena, sizeof *g);
            if (!g) return nomem(p);
            g->name = st->u.let.name;
            g->off = st->off;
            g->value = st->u.let.value;
            for (int32_t i = 0; i < globals.n; i++)
                if (strcmp(((tr_dsl_global *)globals.items[i])->name, g->name) == 0)
                    return err_at(p, g->off, "top-level '%s' is defined twice%s", g->name,
                                  NULL);
            if (!vec_push(p, &globals, g)) return nomem(p);
        } else {
            return err_at(p, p->cur.offset,
                          "expected `fn NAME(...) { ... }` or `let NAME = VALUE` at the top "
                          "level, found %s%s (prompt text, gen and role blocks go inside "
                          "a function)",
                          tr_dsl_tok_describe(p->cur.kind), NULL);
        }
    }
    tr_dsl_script *s = p->s;
    s->fns = tr_arena_array(&s->arena, (size_t)fns.n, sizeof *s->fns);
    s->globals = tr_arena_array(&s->arena, (size_t)globals.n, sizeof *s->globals);
    if ((fns.n && !s->fns) || (globals.n && !s->globals)) return nomem(p);
    for (int32_t i = 0; i < fns.n; i++) s->fns[i] = *(tr_dsl_fn *)fns.items[i];
    for (int32_t i = 0; i < globals.n; i++) s->globals[i] = *(tr_dsl_global *)globals.items[i];
    s->n_fns = fns.n;
    s->n_globals = globals.n;
    return TR_OK;
}

/* ---- resolution: calls to functions, `generates` ---- */

typedef struct resolver {
    tr_dsl_script *s;
    tr_diag *d;
    bool changed;
} resolver;

static tr_status resolve_block(resolver *r, tr_dsl_block *b, bool *gen);

static int32_t fn_index(const tr_dsl_script *s, const char *name) {
    for (int32_t i = 0; i < s->n_fns; i++)
        if (strcmp(s->fns[i].name, name) == 0) return i;
    return -1;
}

static tr_status resolve_call(resolver *r, tr_dsl_expr *e, bool *gen) {
    int32_t fi = fn_index(r->s, e->u.call.name);
    int32_t n = e->u.call.n_args;
    if (fi >= 0) {
        tr_dsl_fn *f = &r->s->fns[fi];
        e->u.call.callee = TR_DSL_CALLEE_SCRIPT;
        e->u.call.index = fi;
        if (f->generates) *gen = true;
        if (n > f->n_params)
            return tr_diag_set(r->d, TR_ERR_FORMAT, e->off,
                               "%s takes %d argument%s, %d given", f->name, f->n_params,
                               f->n_params == 1 ? "" : "s", n);
        bool seen[256] = {0};
        if (f->n_params > 256)
            return tr_diag_set(r->d, TR_ERR_LIMIT, f->off, "more than 256 parameters");
        for (int32_t i = 0; i < n; i++) {
            int32_t k = i;
            if (e->u.call.arg_names[i]) {
                for (k = 0; k < f->n_params; k++)
                    if (strcmp(f->params[k].name, e->u.call.arg_names[i]) == 0) break;
                if (k == f->n_params)
                    return tr_diag_set(r->d, TR_ERR_FORMAT, e->u.call.args[i]->off,
                                       "%s has no parameter '%s'", f->name,
                                       e->u.call.arg_names[i]);
            }
            if (seen[k])
                return tr_diag_set(r->d, TR_ERR_FORMAT, e->u.call.args[i]->off,
                                   "parameter '%s' of %s given twice", f->params[k].name,
                                   f->name);
            seen[k] = true;
        }
        for (int32_t k = 0; k < f->n_params; k++)
            if (!seen[k] && !f->params[k].def)
                return tr_diag_set(r->d, TR_ERR_FORMAT, e->off,
                                   "missing argument '%s' of %s", f->params[k].name,
                                   f->name);
        return TR_OK;
    }
    int32_t bi = tr_dsl_builtin_find(e->u.call.name);
    if (bi < 0)
        return tr_diag_set(r->d, TR_ERR_FORMAT, e->off,
                           "unknown function '%s' (not defined in this script, not a "
                           "built-in)",
                           e->u.call.name);
    const tr_dsl_builtin *b = tr_dsl_builtin_get(bi);
    e->u.call.callee = TR_DSL_CALLEE_BUILTIN;
    e->u.call.index = bi;
    for (int32_t i = 0; i < n; i++)
        if (e->u.call.arg_names[i])
            return tr_diag_set(r->d, TR_ERR_FORMAT, e->u.call.args[i]->off,
                               "built-in %s takes no named arguments", b->signature);
    if (n < b->min_args || n > b->max_args)
        return tr_diag_set(r->d, TR_ERR_FORMAT, e->off, "wrong number of arguments: %s",
                           b->signature);
    return TR_OK;
}

static tr_status resolve_expr(resolver *r, tr_dsl_expr *e, bool *gen) {
    if (!e) return TR_OK;
    switch (e->kind) {
    case TR_DSL_E_CONST:
    case TR_DSL_E_VAR: return TR_OK;
    case TR_DSL_E_STRING:
        for (int32_t i = 0; i < e->u.str.n; i++)
            TRY(resolve_expr(r, e->u.str.segs[i].expr, gen));
        return TR_OK;
    case TR_DSL_E_FIELD: return resolve_expr(r, e->u.field.base, gen);
    case TR_DSL_E_INDEX:
        TRY(resolve_expr(r, e->u.index.base, gen));
        return resolve_expr(r, e->u.index.index, gen);
    case TR_DSL_E_CALL:
        for (int32_t i = 0; i < e->u.call.n_args; i++)
            TRY(resolve_expr(r, e->u.call.args[i], gen));
        return resolve_call(r, e, gen);
    case TR_DSL_E_LIST:
        for (int32_t i = 0; i < e->u.list.n; i++) TRY(resolve_expr(r, e->u.list.items[i], gen));
        return TR_OK;
    case TR_DSL_E_OBJECT:
        for (int32_t i = 0; i < e->u.object.n; i++)
            TRY(resolve_expr(r, e->u.object.values[i], gen));
        return TR_OK;
    case TR_DSL_E_UNARY:
    case TR_DSL_E_BINARY:
        TRY(resolve_expr(r, e->u.op.a, gen));
        return resolve_expr(r, e->u.op.b, gen);
    }
    return TR_OK;
}

static tr_status resolve_stmt(resolver *r, tr_dsl_stmt *st, bool *gen) {
    switch (st->kind) {
    case TR_DSL_S_EXPR:
    case TR_DSL_S_RETURN: return resolve_expr(r, st->u.expr, gen);
    case TR_DSL_S_LET:
    case TR_DSL_S_ASSIGN: return resolve_expr(r, st->u.let.value, gen);
    case TR_DSL_S_ROLE:
        *gen = true;
        return resolve_block(r, &st->u.role.body, gen);
    case TR_DSL_S_GEN:
    case TR_DSL_S_SELECT:
        *gen = true;
        TRY(resolve_expr(r, st->u.gen.from, gen));
        for (int32_t i = 0; i < st->u.gen.n_opts; i++)
            TRY(resolve_expr(r, st->u.gen.opts[i].value, gen));
        return TR_OK;
    case TR_DSL_S_IF:
        for (int32_t i = 0; i < st->u.if_.n_conds; i++) {
            TRY(resolve_expr(r, st->u.if_.conds[i], gen));
            TRY(resolve_block(r, &st->u.if_.blocks[i], gen));
        }
        return st->u.if_.has_else ? resolve_block(r, &st->u.if_.else_block, gen) : TR_OK;
    case TR_DSL_S_FORK: {
        *gen = true;
        TRY(resolve_expr(r, st->u.loop.iter, gen));
        bool body = false;
        TRY(resolve_block(r, &st->u.loop.body, &body));
        st->u.loop.generates = body;
        return TR_OK;
    }
    case TR_DSL_S_FOR:
        TRY(resolve_expr(r, st->u.loop.iter, gen));
        return resolve_block(r, &st->u.loop.body, gen);
    case TR_DSL_S_PARALLEL: {
        *gen = true;
        bool body = false;
        for (int32_t i = 0; i < st->u.par.n; i++)
            TRY(resolve_block(r, &st->u.par.branches[i], &body));
        st->u.par.generates = body;
        return TR_OK;
    }
    }
    return TR_OK;
}

static tr_status resolve_block(resolver *r, tr_dsl_block *b, bool *gen) {
    for (int32_t i = 0; i < b->n; i++) TRY(resolve_stmt(r, b->stmts[i], gen));
    return TR_OK;
}

/* Binds calls, then propagates `generates` through calls to a fixpoint
 * (a function that calls one that generates generates too). */
static tr_status resolve(tr_dsl_script *s, tr_diag *d) {
    resolver r = {s, d, false};
    do {
        r.changed = false;
        for (int32_t i = 0; i < s->n_fns; i++) {
            bool gen = s->fns[i].generates;
            for (int32_t k = 0; k < s->fns[i].n_params; k++)
                TRY(resolve_expr(&r, s->fns[i].params[k].def, &gen));
            TRY(resolve_block(&r, &s->fns[i].body, &gen));
            if (gen && !s->fns[i].generates) {
                s->fns[i].generates = true;
                r.changed = true;
            }
        }
    } while (r.changed);
    bool ignored = false;
    for (int32_t i = 0; i < s->n_globals; i++)
        TRY(resolve_expr(&r, s->globals[i].value, &ignored));
    return TR_OK;
}

tr_status tr_dsl_parse(tr_dsl_script *s, const tr_dsl_limits *limits, tr_diag *diag) {
    parser p = {0};
    p.s = s;
    p.d = diag;
    p.lim = limits;
    tr_dsl_lexer_init(&p.lx, s->src, 0, s->len, &s->arena, diag, limits->max_nesting);
    TRY(tr_dsl_lex_next(&p.lx, &p.next));
    TRY(advance(&p));
    TRY(parse_top(&p));
    return resolve(s, diag);
}
