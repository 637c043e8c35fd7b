/* args.c — the flag parser of every command (see args.h). */
#include "app/common/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "a|b|c" as "a, b or c" */
static void choices_text(const char *choices, char *out, size_t cap) {
    size_t n = 0, bars = 0;
    for (const char *p = choices; *p; p++) bars += *p == '|';
    out[0] = 0;
    for (const char *p = choices; *p && n + 8 < cap;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        const char *sep = bars == 0 ? "" : bars == 1 ? " or " : ", ";
        n += (size_t)snprintf(out + n, cap - n, "%.*s%s", (int)len, p, bar ? sep : "");
        if (bar) bars--;
        p = bar ? bar + 1 : p + len;
    }
}

static const char *meta_of(const cli_opt *o) {
    if (o->meta) return o->meta;
    switch (o->kind) {
    case CLI_INT:
    case CLI_INT32: return "N";
    case CLI_FLOAT: return "X";
    case CLI_ENUM: return o->choices;
    default: return "TEXT";
    }
}

/* Prints text from column `col` on, wrapped at 100 columns. */
static void print_wrapped(const char *text, int col) {
    int at = col;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (at > col && at + 1 + (int)w > 100) {
            printf("\n%*s", col, "");
            at = col;
        } else if (at > col) {
            putchar(' ');
            at++;
        }
        printf("%.*s", (int)w, p);
        at += (int)w;
        p += w;
    }
    printf("\n");
}

/* One flag's line(s): "  -t, --threads N   help (default: D)". */
static void print_opt(const cli_opt *o) {
    char left[96], help[1024];
    if (o) {
        snprintf(left, sizeof left, "%s%s%s%s%s", o->alias ? o->alias : "",
                 o->alias ? ", " : "", o->name, o->kind == CLI_FLAG ? "" : " ",
                 o->kind == CLI_FLAG ? "" : meta_of(o));
        snprintf(help, sizeof help, "%s%s%s%s%s", o->help,
                 o->kind == CLI_STRS ? " (repeatable)" : "", o->def ? " (default: " : "",
                 o->def ? o->def : "", o->def ? ")" : "");
    } else {
        snprintf(left, sizeof left, "-h, --help");
        snprintf(help, sizeof help, "print this help");
    }
    if (strlen(left) > 28) printf("  %s\n%*s", left, 31, "");
    else printf("  %-28s ", left);
    print_wrapped(help, 31);
}

void tr_cli_print_usage(const cli_cmd *c) {
    int col = printf("usage: trellis %s ", c->name);
    print_wrapped(c->usage, col > 40 ? 8 : col);
    if (c->about) printf("\n%s", c->about);
    printf("\noptions:\n");
    print_opt(NULL);
    for (size_t i = 0; i < c->n_opts; i++) {
        if (c->opts[i].kind == CLI_SECTION) printf("\n%s:\n", c->opts[i].name);
        else print_opt(&c->opts[i]);
    }
    if (c->n_engine) {
        printf("\nengine options (the same flags and bounds in every command that runs a "
               "model):\n");
        for (size_t i = 0; i < c->n_engine; i++) print_opt(&c->engine[i]);
    }
    if (c->epilog) fputs(c->epilog, stdout);
}

static const cli_opt *find(const cli_opt *opts, size_t n, const char *a) {
    for (size_t i = 0; i < n; i++)
        if (opts[i].kind != CLI_SECTION &&
            (strcmp(opts[i].name, a) == 0 || (opts[i].alias && strcmp(opts[i].alias, a) == 0)))
            return &opts[i];
    return NULL;
}

static bool out_of_range(const char *cmd, const char *flag, const cli_opt *o,
                         const char *got) {
    if (o->range)
        fprintf(stderr, "trellis %s: %s: must be in %s, got %s\n", cmd, flag, o->range,
                got);
    else
        fprintf(stderr, "trellis %s: %s: must be between %.15g and %.15g, got %s\n", cmd,
                flag, o->min, o->max, got);
    return false;
}

/* v as a decimal integer within o's bounds (CLI_INT32: within int32_t
 * too); false with the error printed. */
static bool take_int(const char *cmd, const char *flag, const cli_opt *o, const char *v,
                     long long *out) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    bool bounded = o->min <= o->max || o->kind == CLI_INT32;
    if (end == v || *end || (errno && (errno != ERANGE || !bounded))) {
        fprintf(stderr, "trellis %s: %s: expects an integer, got '%s'\n", cmd, flag, v);
        return false;
    }
    double lo = o->min, hi = o->max;
    if (o->kind == CLI_INT32) {
        lo = o->min <= o->max ? fmax(lo, INT32_MIN) : INT32_MIN;
        hi = o->min <= o->max ? fmin(hi, INT32_MAX) : INT32_MAX;
    }
    if (bounded && (errno == ERANGE || (double)x < lo || (double)x > hi))
        return out_of_range(cmd, flag, o, v);
    *out = x;
    return true;
}

/* Stores value v of flag `flag` (as typed) into o->dest. */
static bool take_value(const char *cmd, const char *flag, const cli_opt *o,
                       const char *v) {
    char *end = NULL;
    long long x;
    switch (o->kind) {
    case CLI_STR:
        *(const char **)o->dest = v;
        return true;
    case CLI_STRS: {
        cli_strs *s = o->dest;
        if (s->n >= CLI_STRS_MAX) {
            fprintf(stderr, "trellis %s: %s: given more than %d times\n", cmd, flag,
                    CLI_STRS_MAX);
            return false;
        }
        s->flags[s->n] = o->name;
        s->items[s->n++] = v;
        return true;
    }
    case CLI_INT:
        if (!take_int(cmd, flag, o, v, &x)) return false;
        *(int64_t *)o->dest = x;
        return true;
    case CLI_INT32:
        if (!take_int(cmd, flag, o, v, &x)) return false;
        *(int32_t *)o->dest = (int32_t)x;
        return true;
    case CLI_FLOAT: {
        double d = strtod(v, &end);
        if (end == v || *end || !isfinite(d)) {
            fprintf(stderr, "trellis %s: %s: expects a finite number, got '%s'\n", cmd,
                    flag, v);
            return false;
        }
        if (o->min <= o->max && (d < o->min || d > o->max))
            return out_of_range(cmd, flag, o, v);
        *(double *)o->dest = d;
        return true;
    }
    case CLI_ENUM: {
        int idx = 0;
        size_t vl = strlen(v);
        for (const char *p = o->choices; *p; idx++) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            if (len == vl && strncmp(p, v, len) == 0) {
                *(int *)o->dest = idx;
                if (o->also) *(int *)o->also = idx;
                return true;
            }
            p = bar ? bar + 1 : p + len;
        }
        char list[256];
        choices_text(o->choices, list, sizeof list);
        fprintf(stderr, "trellis %s: %s: unknown value '%s' (%s)\n", cmd, flag, v, list);
        return false;
    }
    case CLI_FLAG:
    case CLI_SECTION:
        break;
    }
    return false;
}

/* An argument that is not a flag: to c->operands, if the command takes
 * any. */
static bool take_operand(const cli_cmd *c, const char *a) {
    cli_strs *s = c->operands;
    if (!s) {
        fprintf(stderr, "trellis %s: unexpected argument '%s' (see trellis %s --help)\n",
                c->name, a, c->name);
        return false;
    }
    if (s->n >= CLI_STRS_MAX) {
        fprintf(stderr, "trellis %s: more than %d arguments\n", c->name, CLI_STRS_MAX);
        return false;
    }
    s->flags[s->n] = NULL;
    s->items[s->n++] = a;
    return true;
}

bool tr_cli_parse(const cli_cmd *c, int argc, char **argv, bool *help) {
    *help = false;
    const char *cmd = c->name;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            tr_cli_print_usage(c);
            *help = true;
            return true;
        }
        if (a[0] != '-' || a[1] == 0) {
            if (!take_operand(c, a)) return false;
            continue;
        }
        const char *eq = NULL;
        char name[64];
        if (strncmp(a, "--", 2) == 0 && (eq = strchr(a, '=')) &&
            (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            a = name;
        } else {
            eq = NULL;
        }
        const cli_opt *o = find(c->opts, c->n_opts, a);
        if (!o) o = find(c->engine, c->n_engine, a);
        if (!o) {
            fprintf(stderr, "trellis %s: unknown option '%s' (see trellis %s --help)\n",
                    cmd, argv[i], cmd);
            return false;
        }
        if (o->given) *o->given = true;
        if (o->kind == CLI_FLAG) {
            if (eq) {
                fprintf(stderr, "trellis %s: %s: takes no value\n", cmd, a);
                return false;
            }
            *(bool *)o->dest = true;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(stderr, "trellis %s: %s: needs a value\n", cmd, a);
                return false;
            }
            v = argv[++i];
        }
        if (!take_value(cmd, a, o, v)) return false;
    }
    return !c->finish || c->finish(c->finish_ctx, cmd);
}
