/* args.c — see args.h. */
#include "runtime/cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_print_usage(const char *cmd, const char *usage, const cli_opt *opts,
                     size_t n_opts) {
    fprintf(stderr, "usage: trellis %s %s\n\noptions:\n", cmd, usage);
    for (size_t i = 0; i < n_opts; i++) {
        char left[64];
        const char *val = opts[i].kind == CLI_FLAG    ? ""
                          : opts[i].kind == CLI_INT   ? " N"
                          : opts[i].kind == CLI_FLOAT ? " X"
                                                      : " TEXT";
        snprintf(left, sizeof left, "%s%s%s%s", opts[i].alias ? opts[i].alias : "",
                 opts[i].alias ? ", " : "", opts[i].name, val);
        fprintf(stderr, "  %-26s %s\n", left, opts[i].help);
    }
}

static const cli_opt *find(const cli_opt *opts, size_t n, const char *a) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(opts[i].name, a) == 0 ||
            (opts[i].alias && strcmp(opts[i].alias, a) == 0))
            return &opts[i];
    return NULL;
}

bool cli_parse(const char *cmd, const char *usage, const cli_opt *opts,
               size_t n_opts, int argc, char **argv, bool *help) {
    *help = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_print_usage(cmd, usage, opts, n_opts);
            *help = true;
            return true;
        }
        const char *eq = NULL;
        char name[64];
        if (strncmp(a, "--", 2) == 0 && (eq = strchr(a, '=')) &&
            (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            a = name;
        }
        const cli_opt *o = find(opts, n_opts, a);
        if (!o) {
            fprintf(stderr, "trellis %s: unknown option '%s' (see trellis %s --help)\n",
                    cmd, argv[i], cmd);
            return false;
        }
        if (o->kind == CLI_FLAG) {
            if (eq) {
                fprintf(stderr, "trellis %s: option '%s' takes no value\n", cmd, a);
                return false;
            }
            *(bool *)o->dest = true;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(stderr, "trellis %s: option '%s' needs a value\n", cmd, a);
                return false;
            }
            v = argv[++i];
        }
        char *end = NULL;
        errno = 0;
        switch (o->kind) {
        case CLI_STR:
            *(const char **)o->dest = v;
            break;
        case CLI_STRS: {
            cli_strs *s = o->dest;
            if (s->n >= (int)(sizeof s->items / sizeof s->items[0])) {
                fprintf(stderr, "trellis %s: too many '%s' options (max %zu)\n",
                        cmd, a, sizeof s->items / sizeof s->items[0]);
                return false;
            }
            s->items[s->n++] = v;
            break;
        }
        case CLI_INT: {
            long long x = strtoll(v, &end, 10);
            if (errno || end == v || *end) {
                fprintf(stderr, "trellis %s: option '%s' expects an integer, got '%s'\n",
                        cmd, a, v);
                return false;
            }
            if (o->min <= o->max && ((double)x < o->min || (double)x > o->max)) {
                fprintf(stderr, "trellis %s: option '%s' must be between %.0f and %.0f, got %lld\n",
                        cmd, a, o->min, o->max, x);
                return false;
            }
            *(int64_t *)o->dest = x;
            break;
        }
        case CLI_FLOAT: {
            double x = strtod(v, &end);
            if (errno || end == v || *end || !isfinite(x)) {
                fprintf(stderr, "trellis %s: option '%s' expects a number, got '%s'\n",
                        cmd, a, v);
                return false;
            }
            if (o->min <= o->max && (x < o->min || x > o->max)) {
                fprintf(stderr, "trellis %s: option '%s' must be between %g and %g, got %g\n",
                        cmd, a, o->min, o->max, x);
                return false;
            }
            *(double *)o->dest = x;
            break;
        }
        case CLI_FLAG:
            break;
        }
    }
    return true;
}
