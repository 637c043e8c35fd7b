/* lexer.c — see lexer_internal.h. Strings are the only involved part:
 *
 *   "text {expr} more"   escapes \n \t \r \0 \\ \" \' \{ \} \u{HEX};
 *                        {{ and }} are literal braces; {expr} is an
 *                        interpolation whose span the parser parses
 *   r"raw {not} \here"   no escapes, no interpolation
 *   """                  multi-line: the text starts on the line after the
 *     indented text      opening quotes and ends before the line of the
 *     """                closing ones, whose indentation is removed from
 *                        every line; a backslash at the end of a line
 *                        joins it to the next (r""" has neither)
 *
 * An interpolation's span is found by counting braces and skipping the
 * string literals inside it, recursively up to max_nesting levels, so that
 * "{join(xs, "}")}" is one interpolation.
 */
#include "frontend/lexer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

const char *tr_dsl_tok_describe(tr_dsl_tok t) {
    static const char *names[] = {
#define TR_DSL_TOK_DESC_(name, desc) desc,
        TR_DSL_TOKEN_LIST(TR_DSL_TOK_DESC_)
#undef TR_DSL_TOK_DESC_
    };
    return (unsigned)t < TR_DSL_TOK_COUNT_ ? names[t] : "?";
}

void tr_dsl_lexer_init(tr_dsl_lexer *lx, const char *src, size_t start, size_t end,
                       tr_arena *arena, tr_diag *diag, int32_t max_nesting) {
    lx->src = src;
    lx->pos = start;
    lx->end = end;
    lx->arena = arena;
    lx->diag = diag;
    lx->max_nesting = max_nesting > 0 ? max_nesting : 64;
}

static tr_status lex_err(tr_dsl_lexer *lx, size_t at, const char *msg) {
    return tr_diag_set(lx->diag, TR_ERR_FORMAT, at, "%s", msg);
}

static tr_status lex_nomem(tr_dsl_lexer *lx, size_t at) {
    return tr_diag_set(lx->diag, TR_ERR_NOMEM, at,
                       "out of memory (or over the script's memory budget)");
}

static bool at(const tr_dsl_lexer *lx, size_t p, const char *s) {
    size_t n = strlen(s);
    return p + n <= lx->end && memcmp(lx->src + p, s, n) == 0;
}

/* ---- a growable byte buffer and part list for one string ---- */

typedef struct strbuild {
    char *buf;
    size_t len, cap;
    uint32_t lit_start;
    tr_dsl_strpart *parts;
    int32_t n, cap_parts;
} strbuild;

static bool sb_put(strbuild *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) return false;
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    return true;
}

static bool sb_part(strbuild *b, tr_dsl_strpart p) {
    if (b->n == b->cap_parts) {
        int32_t cap = b->cap_parts ? b->cap_parts * 2 : 4;
        tr_dsl_strpart *np = realloc(b->parts, (size_t)cap * sizeof *np);
        if (!np) return false;
        b->parts = np;
        b->cap_parts = cap;
    }
    b->parts[b->n++] = p;
    return true;
}

/* Closes the literal collected so far (if any) as a part. */
static bool sb_flush(tr_dsl_lexer *lx, strbuild *b) {
    if (b->len == 0) return true;
    char *t = tr_arena_strndup(lx->arena, b->buf, b->len);
    if (!t) return false;
    tr_dsl_strpart p = {false, t, b->len, b->lit_start};
    b->len = 0;
    return sb_part(b, p);
}

static void sb_free(strbuild *b) {
    free(b->buf);
    free(b->parts);
}

/* ---- skipping an interpolation's source ---- */

static bool ident_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }

static tr_status skip_interp(tr_dsl_lexer *lx, size_t *p, bool allow_nl, int depth);

/* *p at the opening quote of a "..." or r"..." inside an interpolation;
 * leaves *p after the closing quote. */
static tr_status skip_inner_string(tr_dsl_lexer *lx, size_t *p, bool raw, int depth) {
    size_t start = *p, q = *p + 1;
    if (at(lx, *p, "\"\"\""))
        return lex_err(lx, *p, "a multi-line string cannot be nested in an interpolation");
    while (q < lx->end) {
        char c = lx->src[q];
        if (c == '"') {
            *p = q + 1;
            return TR_OK;
        }
        if (c == '\n') break;
        if (!raw && c == '\\') {
            q += 2;
            continue;
        }
        if (!raw && c == '{') {
            if (q + 1 < lx->end && lx->src[q + 1] == '{') {
                q += 2;
                continue;
            }
            tr_status s = skip_interp(lx, &q, false, depth + 1);
            if (s) return s == TR_ERR_FORMAT ? TR_ERR_NOT_FOUND : s;
            continue;
        }
        q++;
    }
    (void)start;
    return TR_ERR_NOT_FOUND; /* skip_interp says where the interpolation began */
}

/* *p at '{'; leaves *p after the matching '}'. */
static tr_status skip_interp(tr_dsl_lexer *lx, size_t *p, bool allow_nl, int depth) {
    if (depth > lx->max_nesting)
        return tr_diag_set(lx->diag, TR_ERR_LIMIT, *p,
                           "strings and interpolations nested more than %d deep",
                           lx->max_nesting);
    size_t open = *p, q = *p + 1;
    int braces = 1;
    while (q < lx->end) {
        char c = lx->src[q];
        if (c == '{') {
            if (++braces > lx->max_nesting)
                return tr_diag_set(lx->diag, TR_ERR_LIMIT, q,
                                   "braces nested more than %d deep", lx->max_nesting);
        } else if (c == '}') {
            if (--braces == 0) {
                *p = q + 1;
                return TR_OK;
            }
        } else if (c == '"' || (c == 'r' && q + 1 < lx->end && lx->src[q + 1] == '"' &&
                                !(q > open + 1 && ident_char(lx->src[q - 1])))) {
            bool raw = c == 'r';
            if (raw) q++;
            tr_status s = skip_inner_string(lx, &q, raw, depth);
            if (s == TR_ERR_NOT_FOUND) break;
            if (s) return s;
            continue;
        } else if (c == '\n' && !allow_nl) {
            break;
        }
        q++;
    }
    return lex_err(lx, open,
                   "unterminated interpolation: this '{' has no matching '}' (write {{ "
                   "for a literal brace)");
}

/* ---- escapes ---- */

/* *p at the backslash; appends the decoded character, moves *p past. */
static tr_status escape(tr_dsl_lexer *lx, strbuild *b, size_t *p) {
    size_t q = *p + 1;
    if (q >= lx->end) return lex_err(lx, *p, "a backslash ends the script");
    char c = lx->src[q], out;
    switch (c) {
    case 'n': out = '\n'; break;
    case 't': out = '\t'; break;
    case 'r': out = '\r'; break;
    case '0': out = 0; break;
    case '\\': case '"': case '\'': case '{': case '}': out = c; break;
    case 'u': {
        if (q + 1 >= lx->end || lx->src[q + 1] != '{')
            return lex_err(lx, *p, "\\u needs braces: \\u{1F600}");
        size_t r = q + 2;
        uint32_t cp = 0;
        int digits = 0;
        for (; r < lx->end && lx->src[r] != '}'; r++) {
            char h = lx->src[r];
            int v = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (v < 0 || ++digits > 6)
                return lex_err(lx, *p, "\\u{...} takes 1 to 6 hex digits");
            cp = cp * 16 + (uint32_t)v;
        }
        if (r >= lx->end || digits == 0)
            return lex_err(lx, *p, "\\u{...} takes 1 to 6 hex digits");
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return lex_err(lx, *p, "\\u{...} is not a Unicode scalar value");
        uint8_t u[4];
        int n = tr_utf8_encode(cp, u);
        if (!sb_put(b, (const char *)u, (size_t)n)) return lex_nomem(lx, *p);
        *p = r + 1;
        return TR_OK;
    }
    default:
        return lex_err(lx, *p,
                       "unknown escape (known: \\n \\t \\r \\0 \\\\ \\\" \\' \\{ \\} "
                       "\\u{HEX}; r\"...\" takes backslashes literally)");
    }
    if (!sb_put(b, &out, 1)) return lex_nomem(lx, *p);
    *p = q + 1;
    return TR_OK;
}

/* One character of string content at *p (not a quote, not a newline):
 * an escape, an interpolation, a doubled brace or a plain byte. */
static tr_status content_char(tr_dsl_lexer *lx, strbuild *b, size_t *p, bool raw,
                              bool multiline) {
    char c = lx->src[*p];
    if (raw) {
        if (b->len == 0) b->lit_start = (uint32_t)*p;
        if (!sb_put(b, &c, 1)) return lex_nomem(lx, *p);
        (*p)++;
        return TR_OK;
    }
    if (c == '{' || c == '}') {
        if (*p + 1 < lx->end && lx->src[*p + 1] == c) {
            if (b->len == 0) b->lit_start = (uint32_t)*p;
            if (!sb_put(b, &c, 1)) return lex_nomem(lx, *p);
            *p += 2;
            return TR_OK;
        }
        if (c == '}')
            return lex_err(lx, *p, "a lone '}' in a string (write }} for a literal brace)");
        size_t open = *p, q = *p;
        tr_status s = skip_interp(lx, &q, multiline, 1);
        if (s) return s;
        if (!sb_flush(lx, b) ||
            !sb_part(b, (tr_dsl_strpart){true, NULL, q - open - 2, (uint32_t)(open + 1)}))
            return lex_nomem(lx, open);
        *p = q;
        return TR_OK;
    }
    if (b->len == 0) b->lit_start = (uint32_t)*p;
    if (c == '\\') return escape(lx, b, p);
    if (!sb_put(b, &c, 1)) return lex_nomem(lx, *p);
    (*p)++;
    return TR_OK;
}

static tr_status finish_string(tr_dsl_lexer *lx, strbuild *b, tr_dsl_token *t) {
    if (!sb_flush(lx, b)) return lex_nomem(lx, t->offset);
    t->kind = TR_DSL_TOK_STRING;
    t->n_parts = b->n;
    if (b->n) {
        tr_dsl_strpart *parts = tr_arena_array(lx->arena, (size_t)b->n, sizeof *parts);
        if (!parts) return lex_nomem(lx, t->offset);
        memcpy(parts, b->parts, (size_t)b->n * sizeof *parts);
        t->parts = parts;
    }
    return TR_OK;
}

/* "..." or r"...": *p after the opening quote. */
static tr_status simple_string(tr_dsl_lexer *lx, size_t *p, bool raw, tr_dsl_token *t) {
    strbuild b = {0};
    tr_status s = TR_OK;
    for (;;) {
        if (*p >= lx->end || lx->src[*p] == '\n') {
            s = lex_err(lx, t->offset,
                        "unterminated string (a line break or the end of the script "
                        "before the closing quote; use \"\"\" for multi-line text)");
            break;
        }
        if (lx->src[*p] == '"') {
            (*p)++;
            s = finish_string(lx, &b, t);
            break;
        }
        if ((s = content_char(lx, &b, p, raw, false))) break;
    }
    sb_free(&b);
    return s;
}

/* Finds the closing """ of a multi-line string whose content starts at p:
 * *close at its first quote. */
static tr_status find_close(tr_dsl_lexer *lx, size_t p, bool raw, size_t open,
                            size_t *close) {
    while (p < lx->end) {
        if (at(lx, p, "\"\"\"")) {
            *close = p;
            return TR_OK;
        }
        char c = lx->src[p];
        if (!raw && c == '\\') {
            p += 2;
        } else if (!raw && c == '{') {
            if (p + 1 < lx->end && lx->src[p + 1] == '{') {
                p += 2;
                continue;
            }
            tr_status s = skip_interp(lx, &p, true, 1);
            if (s) return s;
        } else {
            p++;
        }
    }
    return lex_err(lx, open, "unterminated multi-line string: no closing \"\"\"");
}

/* """...""": *p after the opening quotes. */
static tr_status multi_string(tr_dsl_lexer *lx, size_t *p, bool raw, tr_dsl_token *t) {
    size_t q = *p;
    while (q < lx->end && (lx->src[q] == ' ' || lx->src[q] == '\t' || lx->src[q] == '\r'))
        q++;
    if (q >= lx->end || lx->src[q] != '\n')
        return lex_err(lx, t->offset,
                       "a multi-line string's text starts on the line after its "
                       "opening \"\"\"");
    size_t content = q + 1, close = 0;
    tr_status s = find_close(lx, content, raw, t->offset, &close);
    if (s) return s;
    size_t line_start = close;
    while (line_start > content && lx->src[line_start - 1] != '\n') line_start--;
    for (size_t k = line_start; k < close; k++)
        if (lx->src[k] != ' ' && lx->src[k] != '\t')
            return lex_err(lx, close,
                           "the closing \"\"\" of a multi-line string goes on a line of "
                           "its own");
    const char *indent = lx->src + line_start;
    size_t n_indent = close - line_start;
    /* the text ends at the line break before the closing line */
    size_t text_end = line_start > content ? line_start - 1 : content;
    strbuild b = {0};
    size_t r = content;
    bool line_begin = true;
    while (s == TR_OK && r < text_end) {
        if (line_begin) {
            line_begin = false;
            size_t e = r;
            while (e < text_end && lx->src[e] != '\n') e++;
            bool blank = true;
            for (size_t k = r; k < e; k++)
                if (lx->src[k] != ' ' && lx->src[k] != '\t' && lx->src[k] != '\r')
                    blank = false;
            if (blank) {
                r = e; /* a blank line is empty, whatever its indentation */
                continue;
            }
            if (e - r < n_indent || memcmp(lx->src + r, indent, n_indent) != 0) {
                s = lex_err(lx, r,
                            "this line of a multi-line string is indented less than "
                            "its closing \"\"\" (every line starts with the closing "
                            "line's indentation)");
                break;
            }
            r += n_indent;
            continue;
        }
        char c = lx->src[r];
        if (c == '\n' || (c == '\r' && r + 1 < text_end && lx->src[r + 1] == '\n')) {
            if (b.len == 0) b.lit_start = (uint32_t)r;
            if (!sb_put(&b, "\n", 1)) s = lex_nomem(lx, r);
            r += c == '\r' ? 2 : 1;
            line_begin = true;
            continue;
        }
        if (!raw && c == '\\' && r + 1 < lx->end &&
            (lx->src[r + 1] == '\n' ||
             (lx->src[r + 1] == '\r' && r + 2 < lx->end && lx->src[r + 2] == '\n'))) {
            r += lx->src[r + 1] == '\n' ? 2 : 3; /* line continuation */
            line_begin = true;
            continue;
        }
        s = content_char(lx, &b, &r, raw, true);
    }
    if (s == TR_OK) s = finish_string(lx, &b, t);
    sb_free(&b);
    if (s == TR_OK) *p = close + 3;
    return s;
}

/* ---- the rest ---- */

static const struct {
    const char *word;
    tr_dsl_tok tok;
} keywords[] = {
    {"fn", TR_DSL_TOK_FN},         {"let", TR_DSL_TOK_LET},
    {"if", TR_DSL_TOK_IF},         {"else", TR_DSL_TOK_ELSE},
    {"for", TR_DSL_TOK_FOR},       {"in", TR_DSL_TOK_IN},
    {"fork", TR_DSL_TOK_FORK},     {"parallel", TR_DSL_TOK_PARALLEL},
    {"branch", TR_DSL_TOK_BRANCH}, {"return", TR_DSL_TOK_RETURN},
    {"gen", TR_DSL_TOK_GEN},       {"select", TR_DSL_TOK_SELECT},
    {"true", TR_DSL_TOK_TRUE},     {"false", TR_DSL_TOK_FALSE},
    {"null", TR_DSL_TOK_NULL},     {"and", TR_DSL_TOK_AND},
    {"or", TR_DSL_TOK_OR},         {"not", TR_DSL_TOK_NOT},
};


#define TR_DSL_MAX_IDENT 128

static tr_status number(tr_dsl_lexer *lx, size_t *p, tr_dsl_token *t) {
    size_t q = *p;
    int64_t v = 0;
    bool overflow = false;
    while (q < lx->end && lx->src[q] >= '0' && lx->src[q] <= '9') {
        int d = lx->src[q] - '0';
        if (v > (INT64_MAX - d) / 10) overflow = true;
        else v = v * 10 + d;
        q++;
    }
    bool is_float = false;
    if (q + 1 < lx->end && lx->src[q] == '.' && lx->src[q + 1] >= '0' &&
        lx->src[q + 1] <= '9') {
        is_float = true;
        q++;
        while (q < lx->end && lx->src[q] >= '0' && lx->src[q] <= '9') q++;
    }
    if (q < lx->end && (lx->src[q] == 'e' || lx->src[q] == 'E')) {
        size_t e = q + 1;
        if (e < lx->end && (lx->src[e] == '+' || lx->src[e] == '-')) e++;
        if (e < lx->end && lx->src[e] >= '0' && lx->src[e] <= '9') {
            is_float = true;
            q = e;
            while (q < lx->end && lx->src[q] >= '0' && lx->src[q] <= '9') q++;
        }
    }
    if (q < lx->end && ident_char(lx->src[q]))
        return lex_err(lx, q, "a letter right after a number");
    if (is_float) {
        char tmp[64];
        size_t n = q - *p;
        if (n >= sizeof tmp) return lex_err(lx, *p, "number literal too long");
        memcpy(tmp, lx->src + *p, n);
        tmp[n] = 0;
        t->kind = TR_DSL_TOK_FLOAT;
        t->f = strtod(tmp, NULL);
    } else {
        if (overflow) return lex_err(lx, *p, "integer literal too large (max 2^63-1)");
        t->kind = TR_DSL_TOK_INT;
        t->i = v;
    }
    *p = q;
    return TR_OK;
}

static tr_status punct(tr_dsl_lexer *lx, size_t *p, tr_dsl_token *t) {
    static const struct {
        const char *s;
        tr_dsl_tok tok;
    } ops[] = {
        {"==", TR_DSL_TOK_EQ},     {"!=", TR_DSL_TOK_NE},       {"<=", TR_DSL_TOK_LE},
        {">=", TR_DSL_TOK_GE},     {"(", TR_DSL_TOK_LPAREN},    {")", TR_DSL_TOK_RPAREN},
        {"{", TR_DSL_TOK_LBRACE},  {"}", TR_DSL_TOK_RBRACE},    {"[", TR_DSL_TOK_LBRACKET},
        {"]", TR_DSL_TOK_RBRACKET}, {",", TR_DSL_TOK_COMMA},    {".", TR_DSL_TOK_DOT},
        {":", TR_DSL_TOK_COLON},   {"=", TR_DSL_TOK_ASSIGN},    {"<", TR_DSL_TOK_LT},
        {">", TR_DSL_TOK_GT},      {"+", TR_DSL_TOK_PLUS},      {"-", TR_DSL_TOK_MINUS},
        {"*", TR_DSL_TOK_STAR},    {"/", TR_DSL_TOK_SLASH},     {"%", TR_DSL_TOK_PERCENT},
    };
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (at(lx, *p, ops[k].s)) {
            t->kind = ops[k].tok;
            *p += strlen(ops[k].s);
            return TR_OK;
        }
    unsigned char c = (unsigned char)lx->src[*p];
    if (c >= 0x80)
        return lex_err(lx, *p, "unexpected non-ASCII character (names are ASCII; text "
                               "goes in quotes)");
    if (c == '\'')
        return lex_err(lx, *p, "strings use double quotes: \"...\"");
    if (c == '!') return lex_err(lx, *p, "unexpected '!' (write 'not' or '!=')");
    if (c == '&' || c == '|')
        return lex_err(lx, *p, "unexpected operator (write 'and' / 'or')");
    return tr_diag_set(lx->diag, TR_ERR_FORMAT, *p, "unexpected character '%c'",
                       c >= 0x20 && c < 0x7f ? c : '?');
}

tr_status tr_dsl_lex_next(tr_dsl_lexer *lx, tr_dsl_token *t) {
    memset(t, 0, sizeof *t);
    size_t p = lx->pos;
    for (;;) { /* whitespace and comments */
        if (p >= lx->end) break;
        char c = lx->src[p];
        if (c == '\n') {
            t->nl_before = true;
            p++;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p++;
        } else if (c == '#') {
            while (p < lx->end && lx->src[p] != '\n') p++;
        } else {
            break;
        }
    }
    t->offset = (uint32_t)p;
    tr_status s = TR_OK;
    if (p >= lx->end) {
        t->kind = TR_DSL_TOK_EOF;
    } else if (lx->src[p] == 'r' && p + 1 < lx->end && lx->src[p + 1] == '"') {
        p += 1;
        if (at(lx, p, "\"\"\"")) {
            p += 3;
            s = multi_string(lx, &p, true, t);
        } else {
            p += 1;
            s = simple_string(lx, &p, true, t);
        }
    } else if (ident_start(lx->src[p])) {
        size_t q = p;
        while (q < lx->end && ident_char(lx->src[q])) q++;
        if (q - p > TR_DSL_MAX_IDENT)
            return tr_diag_set(lx->diag, TR_ERR_LIMIT, p, "name longer than %d bytes",
                               TR_DSL_MAX_IDENT);
        t->kind = TR_DSL_TOK_IDENT;
        for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++)
            if (strlen(keywords[k].word) == q - p &&
                memcmp(keywords[k].word, lx->src + p, q - p) == 0)
                t->kind = keywords[k].tok;
        if (t->kind == TR_DSL_TOK_IDENT) {
            t->name = tr_arena_strndup(lx->arena, lx->src + p, q - p);
            if (!t->name) return lex_nomem(lx, p);
        }
        p = q;
    } else if (lx->src[p] >= '0' && lx->src[p] <= '9') {
        s = number(lx, &p, t);
    } else if (lx->src[p] == '"') {
        if (at(lx, p, "\"\"\"")) {
            p += 3;
            s = multi_string(lx, &p, false, t);
        } else {
            p += 1;
            s = simple_string(lx, &p, false, t);
        }
    } else {
        s = punct(lx, &p, t);
    }
    if (s) return s;
    t->len = (uint32_t)(p - t->offset);
    lx->pos = p;
    return TR_OK;
}
