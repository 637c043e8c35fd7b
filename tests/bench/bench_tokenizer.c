/* bench_tokenizer.c — encode / decode throughput of the default model's
 * tokenizer on about 1 MB of text.
 *
 * Usage: bench_tokenizer [model.gguf] [text-file]
 * Without a text file, the input is this repository's own sources and docs
 * (C, Markdown, Python: a mix of code and English prose) plus the license
 * texts under /usr/share/common-licenses when present, concatenated and
 * repeated up to 1 MiB. Prints MB/s and tokens/s (median of 5 runs).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/paths.h"
#include "base/util.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"

#define TARGET (1u << 20)

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void append(buf *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) exit(1);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void add_file(buf *b, const char *path) {
    char *s;
    size_t n;
    if (tr_read_file(path, &s, &n) == 0) {
        append(b, s, n);
        free(s);
    }
}

static void add_dir(buf *b, const char *dir, const char *const *exts) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (strncmp(e->d_name, "build", 5) != 0 && strcmp(e->d_name, "data") != 0)
                add_dir(b, path, exts);
            continue;
        }
        for (const char *const *x = exts; *x; x++) {
            size_t l = strlen(e->d_name), xl = strlen(*x);
            if (l > xl && strcmp(e->d_name + l - xl, *x) == 0) add_file(b, path);
        }
    }
    closedir(d);
}

/* Thread CPU time: on a loaded machine wall time mostly measures the
 * scheduler; the encoder is single-threaded, so CPU time is its cost. */
static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    char mpath[4096];
    const char *model = argc > 1 ? argv[1] : tr_default_model_path(mpath, sizeof mpath);
    gguf_file *f;
    tokenizer *t;
    tr_diag d = {0};
    if (!model || tr_gguf_open(model, &f, &d) || tr_tokenizer_from_gguf(f, &t, &d)) {
        fprintf(stderr, "bench_tokenizer: cannot load %s: %s\n", model ? model : "?", d.message);
        return 1;
    }
    buf src = {0};
    if (argc > 2) {
        add_file(&src, argv[2]);
    } else {
        static const char *const exts[] = {".c", ".h", ".md", ".py", ".txt", NULL};
        add_dir(&src, TRELLIS_SOURCE_DIR, exts);
        add_dir(&src, "/usr/share/common-licenses", (const char *const[]){"", NULL});
    }
    if (src.n == 0) {
        fprintf(stderr, "bench_tokenizer: no input text\n");
        return 1;
    }
    buf text = {0};
    if (argc > 2) {
        text = src;
    } else {
        while (text.n < TARGET) append(&text, src.p, TR_MIN(src.n, TARGET - text.n));
        free(src.p);
    }

    double enc[5], dec[5], encw[5];
    size_t n_ids = 0;
    for (int r = 0; r < 5; r++) {
        int32_t *ids;
        uint64_t w0 = tr_now_ns(), t0 = cpu_ns();
        if (tr_tokenizer_encode(t, text.p, text.n, false, &ids, &n_ids)) return 1;
        uint64_t t1 = cpu_ns(), w1 = tr_now_ns();
        char *out;
        size_t out_len;
        if (tr_tokenizer_decode(t, ids, n_ids, true, &out, &out_len)) return 1;
        uint64_t t2 = cpu_ns();
        enc[r] = (double)(t1 - t0) / 1e9;
        encw[r] = (double)(w1 - w0) / 1e9;
        dec[r] = (double)(t2 - t1) / 1e9;
        free(out);
        free(ids);
    }
    qsort(enc, 5, sizeof enc[0], cmp_d);
    qsort(dec, 5, sizeof dec[0], cmp_d);
    qsort(encw, 5, sizeof encw[0], cmp_d);
    double mb = (double)text.n / 1e6;
    printf("input: %zu bytes -> %zu tokens (%.2f bytes/token)\n", text.n, n_ids,
           (double)text.n / (double)n_ids);
    printf("encode: %.1f ms CPU  %.2f MB/s  %.2f M tokens/s (median of 5; wall %.1f ms)\n",
           enc[2] * 1e3, mb / enc[2], (double)n_ids / enc[2] / 1e6, encw[2] * 1e3);
    printf("decode: %.2f ms CPU  %.0f MB/s\n", dec[2] * 1e3, mb / dec[2]);
    free(text.p);
    tr_tokenizer_free(t);
    tr_gguf_close(f);
    return 0;
}
