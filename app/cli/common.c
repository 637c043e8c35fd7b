/* common.c — what the commands share (see cli.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/paths.h"
#include "base/utf8.h"
#include "base/util.h"
#include "app/cli/cli.h"

void tr_cli_report(const char *cmd, const char *what, tr_status s, const tr_diag *d) {
    if (d && d->code == s && d->message[0]) {
        if (d->line > 0)
            fprintf(stderr, "trellis %s: %s: %s (line %d, column %d)\n", cmd, what,
                    d->message, d->line, d->column);
        else if (d->offset > 0 && !strstr(d->message, "at byte"))
            fprintf(stderr, "trellis %s: %s: %s (at byte %llu)\n", cmd, what, d->message,
                    (unsigned long long)d->offset);
        else
            fprintf(stderr, "trellis %s: %s: %s\n", cmd, what, d->message);
    } else {
        fprintf(stderr, "trellis %s: %s: %s (%s)\n", cmd, what, tr_status_message(s),
                tr_status_name(s));
    }
}

const char *tr_cli_model_path(const char *cmd, const char *path, char *buf, size_t cap) {
    if (path) return path;
    path = tr_default_model_path(buf, cap);
    if (!path) {
        fprintf(stderr, "trellis %s: the default model path is too long; pass -m MODEL\n",
                cmd);
        return NULL;
    }
    if (access(path, R_OK) != 0) {
        fprintf(stderr,
                "trellis %s: default model not found at %s (run scripts/setup.sh, or "
                "pass -m MODEL)\n",
                cmd, path);
        return NULL;
    }
    return path;
}

bool tr_cli_read_file(const char *cmd, const char *flag, const char *path, char **out,
                      size_t *len) {
    int s = tr_read_file(path, out, len);
    if (s == 0) return true;
    const char *why = s == TR_ERR_NOMEM           ? "out of memory"
                      : access(path, R_OK) != 0 ? strerror(errno)
                                                : "not a readable file";
    fprintf(stderr, "trellis %s: %s: cannot read '%s': %s\n", cmd, flag, path, why);
    return false;
}

bool tr_cli_check_text(const char *cmd, const char *what, const char *s, size_t len) {
    size_t bad = tr_utf8_invalid_at(s, len);
    const char *nul = memchr(s, 0, len);
    if (nul && (size_t)(nul - s) < bad) {
        fprintf(stderr, "trellis %s: %s: contains a NUL byte (at byte %zu)\n", cmd, what,
                (size_t)(nul - s));
        return false;
    }
    if (bad != len) {
        fprintf(stderr, "trellis %s: %s: not valid UTF-8 (at byte %zu)\n", cmd, what, bad);
        return false;
    }
    return true;
}

bool tr_cli_vocab_open(const char *cmd, const char *path, cli_vocab *out) {
    memset(out, 0, sizeof *out);
    char def[4096];
    if (!(path = tr_cli_model_path(cmd, path, def, sizeof def))) return false;
    char what[4200];
    snprintf(what, sizeof what, "cannot load model '%s'", path);
    tr_diag d = {0};
    tr_status s = tr_gguf_open_ex(path, GGUF_LOAD_MMAP, &out->file, &d);
    if (s == TR_OK) s = tr_tokenizer_from_gguf(out->file, &out->tok, &d);
    if (s == TR_OK) return true;
    tr_cli_report(cmd, what, s, &d);
    tr_cli_vocab_close(out);
    return false;
}

void tr_cli_vocab_close(cli_vocab *v) {
    tr_tokenizer_free(v->tok);
    tr_gguf_close(v->file);
    memset(v, 0, sizeof *v);
}

void tr_cli_print_bytes(FILE *f, const void *bytes, size_t n) {
    const uint8_t *b = bytes;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = tr_utf8_decode(b + i, n - i, &cp);
        if (k > 1 || (k == 1 && cp >= 0x20 && cp != 0x7f && cp != '\\' && cp != '\'')) {
            fwrite(b + i, 1, (size_t)k, f);
            i += (size_t)k;
            continue;
        }
        unsigned c = b[i++];
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\\' || c == '\'') fprintf(f, "\\%c", c);
        else fprintf(f, "\\x%02x", c);
    }
}
