/* validate.c — see validate_internal.h. One reader per API (chat, completions,
 * generate) over a shared set of field readers that name the field in
 * every error. Unknown fields are ignored, as OpenAI does; fields Trellis
 * knows but cannot honour (tools, echo, suffix, stop_regex...) are refused
 * with a 400 when they ask for something, never silently dropped. */
#include "app/server/validate_internal.h"

#include "app/common/engine_flags.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tr_srv_limits_default(tr_srv_limits *l) {
    l->max_prompts = 64;
    l->max_n = TRELLIS_MAX_N;
    l->max_choices_total = 256;
    l->max_messages = 1024;
    l->max_message_bytes = 4u << 20;
    l->max_tokens = 0;
    l->max_logit_bias = 1024;
    l->max_input_ids = 1 << 20;
    l->max_constraint_bytes = 256u << 10;
}

int tr_srv_fail(tr_srv_error *e, int status, const char *type, const char *code,
                const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD(param, ...) tr_srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* ---- field readers: 0 absent (or null), 1 read, -1 error ---- */

typedef struct rd {
    tr_srv_gen *g;
    tr_srv_error *err;
    const tr_srv_limits *lim;
    const char *prefix; /* "sampling_params." for generate */
} rd;

static const char *pname(const rd *r, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", r->prefix, key);
    return buf;
}

static int get_num(rd *r, json_t *o, const char *key, double lo, double hi, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    char p[96];
    if (!json_is_number(v))
        return BAD(pname(r, key, p, sizeof p), "'%s' must be a number", p);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return BAD(pname(r, key, p, sizeof p), "'%s' is %g, expected %g..%g", p, d, lo, hi);
    *out = d;
    return 1;
}

static int get_int(rd *r, json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    char p[96];
    pname(r, key, p, sizeof p);
    int64_t x;
    const char *lit;
    size_t lit_len;
    if (json_is_string(v) &&
        trellis_json_exact_string(json_string_value(v), json_string_length(v), &lit, &lit_len))
        return BAD(p, "'%s' is %.*s, expected %lld..%lld", p, lit_len > 64 ? 64 : (int)lit_len,
                   lit, (long long)lo, (long long)hi);
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (int64_t)json_real_value(v); /* 16.0 from a client that only has floats */
    } else {
        return BAD(p, "'%s' must be an integer", p);
    }
    if (x < lo || x > hi)
        return BAD(p, "'%s' is %lld, expected %lld..%lld", p, (long long)x, (long long)lo,
                   (long long)hi);
    *out = x;
    return 1;
}

static int get_bool(rd *r, json_t *o, const char *key, bool *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    char p[96];
    if (!json_is_boolean(v)) return BAD(pname(r, key, p, sizeof p), "'%s' must be true or false", p);
    *out = json_is_true(v);
    return 1;
}

static int get_str(rd *r, json_t *o, const char *key, const char **out, size_t *len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    char p[96];
    if (!json_is_string(v)) return BAD(pname(r, key, p, sizeof p), "'%s' must be a string", p);
    *out = json_string_value(v);
    if (len) *len = json_string_length(v);
    return 1;
}

#define keep tr_srv_gen_keep
char *tr_srv_gen_keep(tr_srv_gen *g, char *s) {
    if (!s) return NULL;
    char **o = realloc(g->owned, ((size_t)g->n_owned + 1) * sizeof *o);
    if (!o) {
        free(s);
        return NULL;
    }
    g->owned = o;
    o[g->n_owned++] = s;
    return s;
}

static int nomem(tr_srv_error *err) {
    return tr_srv_fail(err, 503, "server_error", NULL, NULL, "out of memory");
}

/* ---- sampling fields shared by every API ---- */

/* A string or an array of strings (stop strings, stop patterns) into an
 * owned array of borrowed strings; *out_n gets the count. For
 * stop_regex, "" asks for nothing (SGLang's frontend sends it). */
static int read_strings(rd *r, json_t *o, const char *key, const char ***out,
                        int32_t *out_n) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    char p[96];
    pname(r, key, p, sizeof p);
    bool patterns = strcmp(key, "stop_regex") == 0;
    if (patterns && json_is_string(v) && json_string_length(v) == 0) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1) return BAD(p, "'%s' must be a string or an array of strings", p);
    if (n > TRELLIS_MAX_STOP)
        return BAD(p, "'%s' has %zu strings, at most %d are allowed", p, n, TRELLIS_MAX_STOP);
    if (n == 0) return 0;
    const char **a = calloc(n, sizeof *a);
    if (!a) return nomem(err);
    free(*out);
    *out = a;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s)) return BAD(p, "'%s[%zu]' must be a string", p, i);
        size_t len = json_string_length(s);
        if (len == 0) return BAD(p, "'%s[%zu]' is empty", p, i);
        if (len > TRELLIS_MAX_STOP_LEN || strlen(json_string_value(s)) != len)
            return BAD(p, "'%s[%zu]' is %zu bytes, at most %d are allowed (and no NUL)", p, i,
                       len, TRELLIS_MAX_STOP_LEN);
        a[i] = json_string_value(s);
    }
    *out_n = (int32_t)n;
    return 1;
}

static int read_stop(rd *r, json_t *o, const char *key) {
    tr_srv_gen *g = r->g;
    int k = read_strings(r, o, key, &g->stop, &g->req.n_stop);
    g->req.stop = g->stop;
    return k;
}

static int read_stop_ids(rd *r, json_t *o) {
    json_t *v = json_object_get(o, "stop_token_ids");
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    char p[96];
    pname(r, "stop_token_ids", p, sizeof p);
    if (!json_is_array(v)) return BAD(p, "'%s' must be an array of token ids", p);
    size_t n = json_array_size(v);
    if (n > 1024) return BAD(p, "'%s' has %zu ids, at most 1024 are allowed", p, n);
    if (n == 0) return 0;
    r->g->stop_tokens = malloc(n * sizeof(int32_t));
    if (!r->g->stop_tokens) return nomem(err);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > INT32_MAX)
            return BAD(p, "'%s[%zu]' must be a token id (an integer >= 0)", p, i);
        r->g->stop_tokens[i] = (int32_t)json_integer_value(x);
    }
    r->g->req.stop_tokens = r->g->stop_tokens;
    r->g->req.n_stop_tokens = (int32_t)n;
    return 1;
}

static int read_logit_bias(rd *r, json_t *o) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    if (!json_is_object(v))
        return BAD("logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n > (size_t)r->lim->max_logit_bias)
        return BAD("logit_bias", "'logit_bias' has %zu entries, at most %d are allowed", n,
                   r->lim->max_logit_bias);
    if (n == 0) return 0;
    r->g->bias = calloc(n, sizeof *r->g->bias);
    if (!r->g->bias) return nomem(err);
    const char *k;
    json_t *b;
    size_t i = 0;
    json_object_foreach(v, k, b) {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id > INT32_MAX)
            return BAD("logit_bias", "'logit_bias' key '%.40s' is not a token id", k);
        if (!json_is_number(b) || !(json_number_value(b) >= -100 && json_number_value(b) <= 100))
            return BAD("logit_bias", "'logit_bias[%ld]' must be a number in -100..100", id);
        double x = json_number_value(b);
        r->g->bias[i].token = (int32_t)id;
        r->g->bias[i].bias = x <= -100 ? -INFINITY : (float)x; /* -100 bans, as OpenAI */
        i++;
    }
    r->g->req.logit_bias = r->g->bias;
    r->g->req.n_logit_bias = (int32_t)n;
    return 1;
}

/* A string field that names one of n modes (names[i] -> i into *out);
 * a bad value names the field and lists the choices (what, one
 * sentence). */
static int read_mode(rd *r, json_t *o, const char *key, const char *const *names, int n,
                     const char *choices, int32_t *out) {
    const char *s = NULL;
    int k = get_str(r, o, key, &s, NULL);
    if (k <= 0) return k;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 1;
        }
    tr_srv_error *err = r->err;
    char p[96];
    return BAD(pname(r, key, p, sizeof p), "'%s' must be %s", p, choices);
}

/* "speculate" (extension): the request's proposers, as `--speculate`:
 * "off" (no drafts), "ngram" (n-gram drafts: spec_ngram of them, 8 unless
 * given) or "draft" (the server's draft model alone). A spec_ngram or
 * spec_draft that contradicts it is a 400 naming both. */
static int read_speculate(rd *r, json_t *o, trellis_request *q, bool ngram_given,
                          bool draft_given) {
    static const char *const names[] = {"off", "ngram", "draft"};
    int32_t m = -1;
    int k = read_mode(r, o, "speculate", names, 3, "\"off\", \"ngram\" or \"draft\"", &m);
    if (k <= 0) return k;
    const bool ngram = m == 1, draft = m == 2; /* the proposer the mode keeps */
    const char *clash = ngram_given && (q->spec_ngram != 0) != ngram   ? "spec_ngram"
                        : draft_given && (q->spec_draft != 0) != draft ? "spec_draft"
                                                                       : NULL;
    tr_srv_error *err = r->err;
    char p[96], p2[96];
    if (clash)
        return BAD(pname(r, "speculate", p, sizeof p), "'%s' \"%s\" contradicts '%s'", p,
                   names[m], pname(r, clash, p2, sizeof p2));
    if (!ngram) q->spec_ngram = 0;
    else if (!ngram_given || q->spec_ngram < 0) q->spec_ngram = TR_SPECULATE_NGRAM_DEFAULT;
    if (!draft) q->spec_draft = 0;
    return 1;
}

/* "whitespace" (extension; JSON kinds): what the grammar lets the model
 * put between JSON tokens: "flexible" (the default), "compact" (none:
 * every `": "`-free separator is forced, so jump-forward skips more
 * forward passes) or "pretty" (newlines and indentation).
 * "json_numbers" (extension; JSON kinds): "canonical" (the default: an
 * integer is digits only, never 1.0 or 1e5; other numbers take at most
 * 20 fraction and 3 exponent digits) or "full" (any JSON spelling of a
 * valid value). "property_order" (extension; JSON Schema): "schema" (the
 * default: properties in the schema's order) or "any" (any order, each
 * listed key once; grammar/README.md). All name TRELLIS_* values in
 * order. */
static int read_json_modes(rd *r, json_t *o) {
    static const char *const ws[] = {"flexible", "compact", "pretty"};
    static const char *const num[] = {"canonical", "full"};
    _Static_assert(TRELLIS_WS_FLEXIBLE == 0 && TRELLIS_WS_COMPACT == 1 && TRELLIS_WS_PRETTY == 2 &&
                       TRELLIS_JSON_NUMBERS_CANONICAL == 0 && TRELLIS_JSON_NUMBERS_FULL == 1,
                   "the names are listed in the values' order");
    if (read_mode(r, o, "whitespace", ws, 3, "\"flexible\", \"compact\" or \"pretty\"",
                  &r->g->con_ws) < 0)
        return -1;
    if (read_mode(r, o, "json_numbers", num, 2, "\"canonical\" or \"full\"",
                  &r->g->con_numbers) < 0)
        return -1;
    static const char *const order[] = {"schema", "any"};
    _Static_assert(TRELLIS_PROPERTY_ORDER_SCHEMA == 0 && TRELLIS_PROPERTY_ORDER_ANY == 1,
                   "the names are listed in the values' order");
    return read_mode(r, o, "property_order", order, 2, "\"schema\" or \"any\"",
                     &r->g->con_order);
}

/* temperature, top_p, top_k, min_p, penalties, seed, ignore_eos,
 * jump_forward, whitespace, json_numbers, n */
static int read_sampling(rd *r, json_t *o) {
    trellis_request *q = &r->g->req;
    tr_srv_error *err = r->err;
    double d;
    int64_t x;
    int k;
    if ((k = get_num(r, o, "temperature", 0, 100, &d)) < 0) return -1;
    if (k) q->temperature = (float)d;
    if ((k = get_num(r, o, "top_p", 0, 1, &d)) < 0) return -1;
    if (k) {
        char p[96];
        if (d <= 0) return BAD(pname(r, "top_p", p, sizeof p), "'%s' must be > 0 (1 = off)", p);
        q->top_p = (float)d;
    }
    if ((k = get_int(r, o, "top_k", -1, INT32_MAX, &x)) < 0) return -1;
    if (k) q->top_k = x < 0 ? 0 : (int32_t)x; /* SGLang's -1 and 0 both mean off */
    if ((k = get_num(r, o, "min_p", 0, 1, &d)) < 0) return -1;
    if (k) q->min_p = (float)d;
    if ((k = get_num(r, o, "presence_penalty", -2, 2, &d)) < 0) return -1;
    if (k) q->presence_penalty = (float)d;
    if ((k = get_num(r, o, "frequency_penalty", -2, 2, &d)) < 0) return -1;
    if (k) q->frequency_penalty = (float)d;
    if ((k = get_num(r, o, "repetition_penalty", 0, 10, &d)) < 0) return -1;
    if (k) {
        char p[96];
        if (d <= 0)
            return BAD(pname(r, "repetition_penalty", p, sizeof p), "'%s' must be > 0", p);
        q->repetition_penalty = (float)d;
    }
    if ((k = get_int(r, o, "seed", INT64_MIN, INT64_MAX, &x)) < 0) return -1;
    if (k) q->seed = (uint64_t)x;
    if (get_bool(r, o, "ignore_eos", &q->ignore_eos) < 0) return -1;
    /* speculative decoding for this request: -1 the server's --spec-ngram,
     * 0 off, 1..32 drafts a step at most */
    if ((k = get_int(r, o, "spec_ngram", -1, 32, &x)) < 0) return -1;
    if (k) q->spec_ngram = (int32_t)x;
    bool ngram_given = k;
    /* drafts from the server's --draft-model: -1 its --spec-draft, 0 off,
     * 1..16 a step at most (ignored without a draft model) */
    if ((k = get_int(r, o, "spec_draft", -1, 16, &x)) < 0) return -1;
    if (k) q->spec_draft = (int32_t)x;
    if (read_speculate(r, o, q, ngram_given, k) < 0) return -1;
    /* jump_forward (default true): false samples every token, even those
     * the constraint forces (trellis_request.no_jump_forward); for
     * measuring what jump-forward saves, and for clients that want the
     * model's own tokenization of forced text. */
    bool jf = true;
    if (get_bool(r, o, "jump_forward", &jf) < 0) return -1;
    q->no_jump_forward = !jf;
    if (read_json_modes(r, o) < 0) return -1;
    if ((k = get_int(r, o, "n", 1, r->lim->max_n, &x)) < 0) return -1;
    if (k) q->n = (int32_t)x;
    if ((k = get_int(r, o, "best_of", 1, r->lim->max_n, &x)) < 0) return -1;
    if (k && x != q->n)
        return BAD("best_of", "'best_of' other than n is not supported");
    /* min_tokens (vLLM's name, OpenAI routes) / min_new_tokens (SGLang's);
     * checked against max_tokens by check_min_tokens */
    for (int i = 0; i < 2; i++) {
        const char *key = i ? "min_new_tokens" : "min_tokens";
        if ((k = get_int(r, o, key, 0, INT32_MAX, &x)) < 0) return -1;
        if (k) q->min_tokens = (int32_t)x;
    }
    if (read_stop(r, o, "stop") < 0 || read_stop_ids(r, o) < 0) return -1;
    /* stop_regex (SGLang): patterns compiled by trellis_submit, whose
     * refusals (syntax, budgets, the empty match) come back as 400s */
    if (read_strings(r, o, "stop_regex", &r->g->stop_regex, &r->g->req.n_stop_regex) < 0)
        return -1;
    r->g->req.stop_regex = r->g->stop_regex;
    return 0;
}

/* min_tokens above max_tokens names the field the client sent. */
static int check_min_tokens(rd *r, json_t *o) {
    const trellis_request *q = &r->g->req;
    if (q->min_tokens == 0 || q->max_tokens < 0 || q->min_tokens <= q->max_tokens) return 0;
    tr_srv_error *err = r->err;
    char p[96];
    pname(r, json_object_get(o, "min_new_tokens") ? "min_new_tokens" : "min_tokens", p,
          sizeof p);
    return BAD(p, "'%s' is %d, more than the %d tokens the request may generate", p,
               q->min_tokens, q->max_tokens);
}

/* lo: 1, or 0 where the API allows a prefill-only request (SGLang's
 * max_new_tokens, OpenAI completions' max_tokens) */
static int read_max_tokens(rd *r, json_t *o, const char *key, int64_t lo) {
    int64_t x;
    int32_t cap = r->lim->max_tokens > 0 ? r->lim->max_tokens : INT32_MAX;
    int k = get_int(r, o, key, lo, cap, &x);
    if (k == 1) r->g->req.max_tokens = (int32_t)x;
    return k;
}

/* ---- constraints ---- */

static int set_con(rd *r, tr_srv_con kind, const char *text, size_t len, const char *param) {
    tr_srv_error *err = r->err;
    tr_srv_gen *g = r->g;
    if (g->con != TR_CON_NONE)
        return BAD(param, "give at most one constraint (regex, choices, ebnf, json_schema or "
                          "response_format); '%s' is a second one",
                   param);
    if (len > r->lim->max_constraint_bytes)
        return BAD(param, "'%s' is %zu bytes, at most %zu are allowed", param, len,
                   r->lim->max_constraint_bytes);
    if (text && strlen(text) != len) return BAD(param, "'%s' contains a NUL byte", param);
    g->con = kind;
    g->con_text = text;
    g->con_len = len;
    return 1;
}

static int read_con_str(rd *r, json_t *o, const char *key, tr_srv_con kind) {
    const char *s = NULL;
    size_t len = 0;
    int k = get_str(r, o, key, &s, &len);
    if (k <= 0) return k;
    char p[96];
    pname(r, key, p, sizeof p);
    tr_srv_error *err = r->err;
    if (len == 0) return BAD(p, "'%s' is empty", p);
    return set_con(r, kind, s, len, p);
}

static int set_schema(rd *r, json_t *schema, const char *param) {
    tr_srv_error *err = r->err;
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return BAD(param, "'%s' must be a JSON Schema (an object)", param);
    char *text = keep(r->g, json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY));
    if (!text) return nomem(err);
    return set_con(r, TR_CON_JSON_SCHEMA, text, strlen(text), param);
}

static int read_choices(rd *r, json_t *o) {
    json_t *v = json_object_get(o, "choices");
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    if (!json_is_array(v) || json_array_size(v) == 0)
        return BAD("choices", "'choices' must be a non-empty array of strings");
    size_t n = json_array_size(v);
    if (n > 4096) return BAD("choices", "'choices' has %zu strings, at most 4096", n);
    const char **c = calloc(n, sizeof *c);
    if (!c || !keep(r->g, (char *)c)) return nomem(err);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0 ||
            strlen(json_string_value(s)) != json_string_length(s))
            return BAD("choices", "'choices[%zu]' must be a non-empty string", i);
        c[i] = json_string_value(s);
        total += json_string_length(s);
    }
    r->g->choices = c;
    r->g->n_choices = (int32_t)n;
    return set_con(r, TR_CON_CHOICE, NULL, total, "choices");
}

static int read_response_format(rd *r, json_t *o) {
    json_t *v = json_object_get(o, "response_format");
    if (!v || json_is_null(v)) return 0;
    tr_srv_error *err = r->err;
    if (!json_is_object(v))
        return BAD("response_format", "'response_format' must be an object with a 'type'");
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!type) return BAD("response_format.type", "'response_format.type' must be a string");
    if (strcmp(type, "text") == 0) return 0;
    if (strcmp(type, "json_object") == 0)
        return set_con(r, TR_CON_JSON_OBJECT, NULL, 0, "response_format");
    if (strcmp(type, "json_schema") == 0) {
        json_t *js = json_object_get(v, "json_schema");
        if (!json_is_object(js))
            return BAD("response_format.json_schema",
                       "'response_format.json_schema' must be an object with 'name' and "
                       "'schema'");
        json_t *name = json_object_get(js, "name");
        if (name && !json_is_string(name))
            return BAD("response_format.json_schema.name",
                       "'response_format.json_schema.name' must be a string");
        json_t *strict = json_object_get(js, "strict");
        if (strict && !json_is_boolean(strict) && !json_is_null(strict))
            return BAD("response_format.json_schema.strict",
                       "'response_format.json_schema.strict' must be true or false");
        r->g->con_strict = json_is_true(strict);
        json_t *schema = json_object_get(js, "schema");
        if (!schema) /* some clients put the schema under its older key */
            schema = json_object_get(js, "schema_");
        if (!schema)
            return BAD("response_format.json_schema.schema",
                       "'response_format.json_schema.schema' is missing");
        return set_schema(r, schema, "response_format.json_schema.schema");
    }
    return BAD("response_format.type",
               "'response_format.type' is '%.40s'; expected text, json_object or json_schema",
               type);
}

/* regex, ebnf, choices, json_schema (object or string), response_format */
static int read_constraint(rd *r, json_t *o) {
    if (read_con_str(r, o, "regex", TR_CON_REGEX) < 0) return -1;
    if (read_con_str(r, o, "ebnf", TR_CON_EBNF) < 0) return -1;
    if (read_choices(r, o) < 0) return -1;
    json_t *js = json_object_get(o, "json_schema");
    if (js && !json_is_null(js)) {
        char p[96];
        pname(r, "json_schema", p, sizeof p);
        if (json_is_string(js)) { /* SGLang passes the schema as a JSON string */
            if (set_con(r, TR_CON_JSON_SCHEMA, json_string_value(js), json_string_length(js),
                        p) < 0)
                return -1;
        } else if (set_schema(r, js, p) < 0) {
            return -1;
        }
    }
    return read_response_format(r, o);
}

/* ---- prompts ---- */

static int add_tokens(rd *r, json_t *arr, const char *param, const int32_t **out, int32_t *n) {
    tr_srv_error *err = r->err;
    size_t k = json_array_size(arr);
    if (k == 0) return BAD(param, "'%s' is an empty token list", param);
    if (k > (size_t)r->lim->max_input_ids)
        return BAD(param, "'%s' has %zu token ids, at most %d are allowed", param, k,
                   r->lim->max_input_ids);
    int32_t *t = malloc(k * sizeof *t);
    if (!t || !keep(r->g, (char *)t)) return nomem(err);
    for (size_t i = 0; i < k; i++) {
        json_t *x = json_array_get(arr, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return BAD(param, "'%s[%zu]' must be a token id (an integer >= 0)", param, i);
        t[i] = (int32_t)json_integer_value(x);
    }
    *out = t;
    *n = (int32_t)k;
    return 0;
}

static bool is_token_list(json_t *v) {
    return json_is_array(v) && json_array_size(v) > 0 && json_is_integer(json_array_get(v, 0));
}

/* A string, a token list, or an array of either (a batch). */
static int read_prompts(rd *r, json_t *v, const char *param, bool *batch) {
    tr_srv_error *err = r->err;
    tr_srv_gen *g = r->g;
    size_t n = 1;
    *batch = false;
    if (json_is_array(v) && !is_token_list(v)) {
        n = json_array_size(v);
        *batch = true;
        if (n == 0) return BAD(param, "'%s' is an empty list", param);
        if (n > (size_t)r->lim->max_prompts)
            return BAD(param, "'%s' has %zu prompts, at most %d are allowed", param, n,
                       r->lim->max_prompts);
    } else if (!json_is_string(v) && !json_is_array(v)) {
        return BAD(param, "'%s' must be a string, a list of token ids, or a list of those",
                   param);
    }
    g->prompts = calloc(n, sizeof *g->prompts);
    if (!g->prompts) return nomem(err);
    g->n_prompts = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *p = *batch ? json_array_get(v, i) : v;
        char pp[96];
        snprintf(pp, sizeof pp, *batch ? "%s[%zu]" : "%s", param, i);
        tr_srv_prompt *t = &g->prompts[i];
        if (json_is_string(p)) {
            t->text = json_string_value(p);
            t->len = json_string_length(p);
            if (t->len == 0) return BAD(pp, "'%s' is empty", pp);
        } else if (json_is_array(p)) {
            if (add_tokens(r, p, pp, &t->tokens, &t->n_tokens)) return -1;
        } else {
            return BAD(pp, "'%s' must be a string or a list of token ids", pp);
        }
    }
    return 0;
}

static int check_total(rd *r) {
    tr_srv_error *err = r->err;
    int64_t total = (int64_t)(r->g->n_prompts ? r->g->n_prompts : 1) * r->g->req.n;
    if (total > r->lim->max_choices_total)
        return BAD("n", "%d prompts x n=%d = %lld choices, at most %d are allowed",
                   r->g->n_prompts, r->g->req.n, (long long)total, r->lim->max_choices_total);
    return 0;
}

/* ---- chat ---- */

static int read_content(rd *r, json_t *c, const char *param, const char **out, size_t *bytes) {
    tr_srv_error *err = r->err;
    if (json_is_string(c)) {
        *out = json_string_value(c);
        *bytes += json_string_length(c);
        if (strlen(*out) != json_string_length(c))
            return BAD(param, "'%s' contains a NUL character", param);
        return 0;
    }
    if (json_is_null(c) || !c) {
        *out = "";
        return 0;
    }
    if (!json_is_array(c))
        return BAD(param, "'%s' must be a string or an array of content parts", param);
    tr_srv_gen *g = r->g;
    size_t total = 0, n = json_array_size(c);
    for (size_t i = 0; i < n; i++) {
        json_t *part = json_array_get(c, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") != 0 || !json_is_string(text))
            return BAD(param, "'%s[%zu]' must be a text part ({\"type\": \"text\", \"text\": "
                              "...}); other part types are not supported",
                       param, i);
        if (strlen(json_string_value(text)) != json_string_length(text))
            return BAD(param, "'%s[%zu].text' contains a NUL character", param, i);
        total += json_string_length(text) + 1;
    }
    char *s = keep(g, malloc(total + 1));
    if (!s) return nomem(err);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) { /* parts joined by newlines */
        json_t *text = json_object_get(json_array_get(c, i), "text");
        if (i) s[at++] = '\n';
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = '\0';
    *bytes += at;
    *out = s;
    return 0;
}

static int read_messages(rd *r, json_t *o) {
    tr_srv_error *err = r->err;
    tr_srv_gen *g = r->g;
    json_t *v = json_object_get(o, "messages");
    if (!v) return BAD("messages", "'messages' is required");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return BAD("messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(v);
    if (n > (size_t)r->lim->max_messages)
        return BAD("messages", "'messages' has %zu entries, at most %d are allowed", n,
                   r->lim->max_messages);
    g->messages = calloc(n, sizeof *g->messages);
    if (!g->messages) return nomem(err);
    g->n_messages = (int32_t)n;
    size_t bytes = 0;
    int32_t out = 0;       /* consecutive tool results make one user turn */
    bool last_tool = false;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        char p[96];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(m)) return BAD(p, "'%s' must be an object", p);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) return BAD(p, "'%s.role' must be a string", p);
        if (strcmp(role, "developer") == 0) role = "system"; /* OpenAI's newer name */
        bool tool = strcmp(role, "tool") == 0;
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && !tool)
            return BAD(p, "'%s.role' is '%.32s'; expected system, user, assistant or tool", p,
                       role);
        char pc[112];
        snprintf(pc, sizeof pc, "%s.content", p);
        const char *content;
        if (read_content(r, json_object_get(m, "content"), pc, &content, &bytes)) return -1;
        json_t *tc = json_object_get(m, "tool_calls");
        bool calls = tc && !json_is_null(tc) && !(json_is_array(tc) && !json_array_size(tc));
        if (calls && strcmp(role, "assistant") != 0)
            return BAD(p, "'%s.tool_calls' belongs to assistant messages only", p);
        if (calls && tr_srv_tools_assistant(g, tc, p, &content, err) < 0) return -1;
        if (tool) {
            const char *prev = last_tool ? g->messages[out - 1].content : NULL;
            if (tr_srv_tools_result(g, prev, content, &content, err) < 0) return -1;
            if (last_tool) out--;
            role = "user";
        }
        g->messages[out].role = role;
        g->messages[out++].content = content;
        last_tool = tool;
        if (bytes > r->lim->max_message_bytes)
            return BAD("messages", "the messages hold more than %zu bytes of text",
                       r->lim->max_message_bytes);
    }
    g->n_messages = out;
    g->req.messages = g->messages;
    g->req.n_messages = g->n_messages;
    return 0;
}

static int read_openai_common(rd *r, json_t *o) {
    tr_srv_gen *g = r->g;
    tr_srv_error *err = r->err;
    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m) && !json_is_string(m))
        return BAD("model", "'model' must be a string");
    g->model = json_string_value(m);
    if (get_bool(r, o, "stream", &g->stream) < 0) return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return BAD("stream_options", "'stream_options' must be an object");
        rd sub = *r;
        sub.prefix = "stream_options.";
        if (get_bool(&sub, so, "include_usage", &g->include_usage) < 0) return -1;
    }
    if (read_sampling(r, o) < 0 || read_logit_bias(r, o) < 0) return -1;
    if (read_constraint(r, o) < 0) return -1;
    if (tr_srv_tools_read(g, o, err) < 0) return -1; /* after the constraint: it joins */
    return tr_srv_tools_system(g, err);
}

/* How the rendered chat ends. A final assistant message is continued
 * (assistant prefill, as llama-server does) unless the client asks for
 * a new turn: continue_final_message false, or add_generation_prompt
 * true; continue_final_message true needs an assistant message last.
 * add_generation_prompt false without one: the prompt ends with the last
 * closed turn. Both true is refused, as vLLM refuses it. */
static int read_chat_end(rd *r, json_t *o) {
    tr_srv_gen *g = r->g;
    tr_srv_error *err = r->err;
    bool cont = false, gen = true;
    int kc = get_bool(r, o, "continue_final_message", &cont);
    int kg = get_bool(r, o, "add_generation_prompt", &gen);
    if (kc < 0 || kg < 0) return -1;
    if (kc && kg && cont && gen)
        return BAD("continue_final_message", "'continue_final_message' and "
                                             "'add_generation_prompt' cannot both be true");
    const char *last = g->messages[g->n_messages - 1].role;
    bool assistant_last = strcmp(last, "assistant") == 0;
    if (kc && cont && !assistant_last)
        return BAD("continue_final_message",
                   "'continue_final_message' needs an assistant message last (the last "
                   "message's role is '%s')",
                   last);
    g->req.continue_final_message = kc ? cont : assistant_last && !(kg && gen);
    g->req.no_generation_prompt = !gen;
    return 0;
}

static int parse_chat(rd *r, json_t *o) {
    tr_srv_gen *g = r->g;
    g->req.max_tokens = -1; /* OpenAI: up to the context */
    if (read_messages(r, o) < 0 || read_openai_common(r, o) < 0) return -1;
    int k1 = read_max_tokens(r, o, "max_completion_tokens", 1);
    if (k1 < 0 || (k1 == 0 && read_max_tokens(r, o, "max_tokens", 1) < 0)) return -1;
    if (check_min_tokens(r, o) < 0 || read_chat_end(r, o) < 0) return -1;
    int64_t x;
    int k = get_int(r, o, "top_logprobs", 0, TRELLIS_MAX_TOP_LOGPROBS, &x);
    if (k < 0 || get_bool(r, o, "logprobs", &g->logprobs) < 0) return -1;
    tr_srv_error *err = r->err;
    if (k && x > 0 && !g->logprobs)
        return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    g->top_logprobs = k ? (int32_t)x : 0;
    return check_total(r);
}

static int parse_completion(rd *r, json_t *o) {
    tr_srv_gen *g = r->g;
    tr_srv_error *err = r->err;
    g->req.max_tokens = 16; /* OpenAI's default for completions */
    /* A raw prompt is the text the model sees: `<|im_start|>` in it is the
     * control token, as llama-server (tokenize with parse_special) and
     * vLLM (Hugging Face tokenizers split added tokens out) read it. */
    g->req.parse_special = true;
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p)) return BAD("prompt", "'prompt' is required");
    bool batch;
    if (read_prompts(r, p, "prompt", &batch) < 0) return -1;
    if (read_openai_common(r, o) < 0 || read_max_tokens(r, o, "max_tokens", 0) < 0 ||
        check_min_tokens(r, o) < 0)
        return -1;
    const char *suffix = NULL;
    if (get_bool(r, o, "echo", &g->echo) < 0) return -1;
    if (get_str(r, o, "suffix", &suffix, NULL) < 0) return -1;
    if (suffix && *suffix) return BAD("suffix", "'suffix' is not supported");
    int64_t x;
    int k = get_int(r, o, "logprobs", 0, TRELLIS_MAX_TOP_LOGPROBS, &x);
    if (k < 0) return -1;
    g->logprobs = k == 1;
    g->top_logprobs = k ? (int32_t)x : 0;
    /* echo with logprobs: the prompt's tokens first (app/server/echo.c) */
    g->req.prompt_logprobs = g->echo && g->logprobs;
    g->req.prompt_top_logprobs = g->req.prompt_logprobs ? g->top_logprobs : 0;
    if (g->echo && g->logprobs && g->stream && g->req.n > 1)
        return BAD("echo", "'echo' with 'logprobs' and 'stream' takes n = 1 only");
    return check_total(r);
}

static int parse_generate(rd *r, json_t *o) {
    tr_srv_gen *g = r->g;
    tr_srv_error *err = r->err;
    g->req.max_tokens = 128; /* SGLang's default max_new_tokens */
    /* SGLang tokenizes `text` with special tokens recognised: a client
     * that renders its own chat template sends `<|im_start|>` meaning the
     * control token (the DSL does). */
    g->req.parse_special = true;
    json_t *text = json_object_get(o, "text");
    json_t *ids = json_object_get(o, "input_ids");
    if (json_is_null(text)) text = NULL;
    if (json_is_null(ids)) ids = NULL;
    if (!text == !ids) return BAD("text", "give exactly one of 'text' and 'input_ids'");
    if (text && !json_is_string(text) &&
        !(json_is_array(text) && json_array_size(text) && json_is_string(json_array_get(text, 0))))
        return BAD("text", "'text' must be a string or a list of strings");
    if (ids && !is_token_list(ids) &&
        !(json_is_array(ids) && json_array_size(ids) && json_is_array(json_array_get(ids, 0))))
        return BAD("input_ids", "'input_ids' must be a list of token ids or a list of those");
    if (read_prompts(r, text ? text : ids, text ? "text" : "input_ids", &g->batch) < 0) return -1;
    json_t *sp = json_object_get(o, "sampling_params");
    if (sp && json_is_null(sp)) sp = NULL;
    if (sp && !json_is_object(sp))
        return BAD("sampling_params", "'sampling_params' must be an object (one for every "
                                      "prompt)");
    if (sp) {
        rd sub = *r;
        sub.prefix = "sampling_params.";
        if (read_sampling(&sub, sp) < 0 || read_constraint(&sub, sp) < 0) return -1;
        if (read_max_tokens(&sub, sp, "max_new_tokens", 0) < 0) return -1;
        if (check_min_tokens(&sub, sp) < 0) return -1;
        if (read_logit_bias(&sub, sp) < 0) return -1;
    }
    if (get_bool(r, o, "stream", &g->stream) < 0) return -1;
    if (get_bool(r, o, "return_logprob", &g->logprobs) < 0) return -1;
    int64_t x;
    int k = get_int(r, o, "top_logprobs_num", 0, TRELLIS_MAX_TOP_LOGPROBS, &x);
    if (k < 0) return -1;
    g->top_logprobs = k ? (int32_t)x : 0;
    if (g->top_logprobs && !g->logprobs)
        return BAD("top_logprobs_num", "'top_logprobs_num' needs 'return_logprob': true");
    /* SGLang returns input_token_logprobs whenever return_logprob is set,
     * from logprob_start_len (default -1: the last prompt token alone) */
    int64_t ls = -1;
    if (get_int(r, o, "logprob_start_len", -1, INT32_MAX, &ls) < 0 ||
        get_bool(r, o, "return_text_in_logprobs", &g->lp_text) < 0)
        return -1;
    g->req.prompt_logprobs = g->logprobs;
    g->req.prompt_logprobs_start = g->logprobs ? (int32_t)ls : 0;
    g->req.prompt_top_logprobs = g->top_logprobs;
    json_t *rid = json_object_get(o, "rid");
    if (rid && json_is_string(rid)) g->rid = json_string_value(rid);
    return check_total(r);
}

int tr_srv_gen_parse(tr_srv_api api, const char *body, size_t len,
                     const tr_srv_limits *lim, tr_srv_gen *g, tr_srv_error *err) {
    memset(g, 0, sizeof *g);
    g->api = api;
    g->con_ws = -1;
    g->con_numbers = -1;
    g->con_order = -1;
    trellis_request_default(&g->req);
    json_error_t je;
    /* integers beyond 64 bits travel as exact-number strings (grammar.h):
     * a JSON Schema takes them as written, a field with a smaller range
     * refuses them by name (get_int) */
    char *exact = NULL;
    size_t exact_len = 0;
    if (!trellis_json_exact_numbers(body, len, true, &exact, &exact_len))
        return tr_srv_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    g->root = json_loadb(exact ? exact : body, exact ? exact_len : len,
                         JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    free(exact);
    if (!g->root) {
        return tr_srv_fail(err, 400, "invalid_request_error", NULL, NULL,
                           "the body is not valid JSON: %s (line %d, column %d, byte %d)",
                           je.text, je.line, je.column, je.position);
    }
    if (!json_is_object(g->root))
        return tr_srv_fail(err, 400, "invalid_request_error", NULL, NULL,
                           "the body must be a JSON object");
    rd r = {.g = g, .err = err, .lim = lim, .prefix = ""};
    int rc = api == TR_API_CHAT         ? parse_chat(&r, g->root)
             : api == TR_API_COMPLETION ? parse_completion(&r, g->root)
                                        : parse_generate(&r, g->root);
    if (rc < 0) return -1;
    g->req.logprobs = g->logprobs;
    g->req.top_logprobs = g->top_logprobs;
    g->req.stream = g->stream;
    return 0;
}

void tr_srv_gen_free(tr_srv_gen *g) {
    if (!g) return;
    json_decref(g->root);
    for (int32_t i = 0; i < g->n_owned; i++) free(g->owned[i]);
    free(g->owned);
    free(g->messages);
    free(g->prompts);
    free(g->stop);
    free(g->stop_regex);
    free(g->stop_tokens);
    free(g->bias);
    memset(g, 0, sizeof *g);
}
