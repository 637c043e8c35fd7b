/* util.c — see util.h. */
#define _POSIX_C_SOURCE 200809L
#include "base/util.h"

#include <time.h>

#include "base/status.h"

void *tr_aligned_alloc(size_t size, size_t align) {
    void *p = NULL;
    if (size == 0) size = align;
    if (posix_memalign(&p, align, size) != 0) return NULL;
    return p;
}

void tr_aligned_free(void *p) { free(p); }

uint64_t tr_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int tr_read_file(const char *path, char **out, size_t *out_len) {
    FILE *f = fopen(path, "rb");
    if (!f) return TR_ERR_IO;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return TR_ERR_NOMEM;
    }
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return TR_ERR_NOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return TR_ERR_IO;
    }
    buf[len] = 0;
    *out = buf;
    if (out_len) *out_len = len;
    return TR_OK;
}
