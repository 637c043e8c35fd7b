/* common.c — model loading and error reporting shared by the commands. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/paths.h"
#include "base/util.h"
#include "runtime/cli/cli.h"

void cli_report(const char *cmd, const char *what, tr_status s,
                const tr_diag *d) {
    if (d && d->code == s && d->message[0]) {
        if (d->line > 0)
            fprintf(stderr, "trellis %s: %s: %s (line %d, column %d)\n", cmd,
                    what, d->message, d->line, d->column);
        else if (d->offset > 0 && !strstr(d->message, "at byte"))
            fprintf(stderr, "trellis %s: %s: %s (at byte %llu)\n", cmd, what,
                    d->message, (unsigned long long)d->offset);
        else
            fprintf(stderr, "trellis %s: %s: %s\n", cmd, what, d->message);
    } else {
        fprintf(stderr, "trellis %s: %s: %s (%s)\n", cmd, what,
                tr_status_message(s), tr_status_name(s));
    }
}

static void progress(bool tty, const char *step) {
    if (tty) fprintf(stderr, "\r\033[Kloading: %s", step);
}

bool cli_parse_load(const char *cmd, const char *value, gguf_load *out) {
    if (!value) {
        *out = GGUF_LOAD_AUTO;
        return true;
    }
    if (tr_gguf_load_parse(value, out)) return true;
    fprintf(stderr, "trellis %s: --load: unknown mode '%s' (auto, mmap or read)\n", cmd,
            value);
    return false;
}

bool cli_load(const char *cmd, const char *path, gguf_load load, bool with_model,
              int threads, int32_t max_batch, cli_loaded *out) {
    memset(out, 0, sizeof *out);
    char def[4096];
    if (!path) {
        path = tr_default_model_path(def, sizeof def);
        if (!path) {
            fprintf(stderr, "trellis %s: default model path too long\n", cmd);
            return false;
        }
        if (access(path, R_OK) != 0) {
            fprintf(stderr,
                    "trellis %s: default model not found at %s (run "
                    "scripts/setup.sh, or pass -m MODEL)\n",
                    cmd, path);
            return false;
        }
    }
    bool tty = isatty(2);
    uint64_t t0 = tr_now_ns();
    tr_diag d = {0};
    char what[4200];
    snprintf(what, sizeof what, "cannot load model '%s'", path);
    progress(tty, "reading GGUF");
    tr_status s = tr_gguf_open_ex(path, load, &out->file, &d);
    if (s) goto fail;
    progress(tty, "building tokenizer");
    s = tr_tokenizer_from_gguf(out->file, &out->tok, &d);
    if (s) goto fail;
    if (with_model) {
        progress(tty, "starting CPU workers");
        s = tr_backend_new("cpu", &(tr_backend_config){.threads = threads},
                           &out->be, &d);
        if (s) goto fail;
        progress(tty, "binding weights");
        s = tr_model_load(out->file, out->be, max_batch, &out->model, &d);
        if (s) goto fail;
    }
    if (tty) fprintf(stderr, "\r\033[K");
    out->load_ms = (double)(tr_now_ns() - t0) / 1e6;
    return true;
fail:
    if (tty) fprintf(stderr, "\r\033[K");
    cli_report(cmd, what, s, &d);
    cli_loaded_free(out);
    return false;
}

void cli_loaded_free(cli_loaded *l) {
    tr_model_free(l->model);
    tr_backend_free(l->be);
    tr_tokenizer_free(l->tok);
    tr_gguf_close(l->file);
    memset(l, 0, sizeof *l);
}

