/* ppl_ref.c — the reference file of `trellis bench ppl` (format and
 * contract in ppl_ref.h). */
#include "app/bench/ppl_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n (4 or 8) bytes of the value at v (a 32- or 64-bit integer or float),
 * little-endian whatever the host's order. */
static void put_le(unsigned char *p, const void *v, size_t n) {
    uint64_t u = 0;
    if (n == 4) {
        uint32_t x;
        memcpy(&x, v, 4);
        u = x;
    } else {
        memcpy(&u, v, 8);
    }
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(u >> (8 * i));
}

/* The inverse of put_le: n (4 or 8) bytes at p into the value at v. */
static void get_le(const unsigned char *p, void *v, size_t n) {
    uint64_t u = 0;
    for (size_t i = 0; i < n; i++) u |= (uint64_t)p[i] << (8 * i);
    if (n == 4) {
        uint32_t x = (uint32_t)u;
        memcpy(v, &x, 4);
    } else {
        memcpy(v, &u, 8);
    }
}

void tr_ppl_ref_put_head(unsigned char out[TR_PPL_REF_HEADER], const tr_ppl_ref_head *h) {
    const uint32_t version = TR_PPL_REF_VERSION;
    memset(out, 0, TR_PPL_REF_HEADER);
    memcpy(out, TR_PPL_REF_MAGIC, 8);
    put_le(out + 8, &version, 4);
    put_le(out + 12, &h->ctx, 4);
    put_le(out + 16, &h->windows, 4);
    put_le(out + 20, &h->n_vocab, 4);
    put_le(out + 24, &h->text_tokens, 8);
    put_le(out + 32, &h->hash, 8);
    put_le(out + 40, &h->n_scored, 8);
    put_le(out + 48, &h->mean_nll, 8);
    put_le(out + 56, &h->flags, 4);
}

void tr_ppl_ref_put_record(unsigned char out[TR_PPL_REF_RECORD], int32_t top1, float gap) {
    put_le(out, &top1, 4);
    put_le(out + 4, &gap, 4);
}

void tr_ppl_ref_free(tr_ppl_ref *r) {
    free(r->top1);
    free(r->gap);
    memset(r, 0, sizeof *r);
}

static void read_head(const unsigned char *p, tr_ppl_ref_head *h) {
    get_le(p + 12, &h->ctx, 4);
    get_le(p + 16, &h->windows, 4);
    get_le(p + 20, &h->n_vocab, 4);
    get_le(p + 24, &h->text_tokens, 8);
    get_le(p + 32, &h->hash, 8);
    get_le(p + 40, &h->n_scored, 8);
    get_le(p + 48, &h->mean_nll, 8);
    get_le(p + 56, &h->flags, 4);
}

/* Whether the header's sizes agree with each other and with len. */
static bool sizes_agree(const tr_ppl_ref_head *h, size_t len) {
    uint64_t per = h->ctx - h->ctx / 2;
    if (h->ctx < 2 || h->windows == 0 || per * h->windows != h->n_scored) return false;
    /* (per < 2^32 and windows < 2^32: the product cannot overflow) */
    return h->n_scored <= (len - TR_PPL_REF_HEADER) / TR_PPL_REF_RECORD &&
           len == TR_PPL_REF_HEADER + h->n_scored * TR_PPL_REF_RECORD;
}

bool tr_ppl_ref_parse(const unsigned char *buf, size_t len, tr_ppl_ref *out, char *why,
                      size_t cap) {
    memset(out, 0, sizeof *out);
    uint32_t version = 0, reserved = 0;
    if (len < TR_PPL_REF_HEADER || memcmp(buf, TR_PPL_REF_MAGIC, 8) != 0) {
        snprintf(why, cap, "not a reference file");
        return false;
    }
    get_le(buf + 8, &version, 4);
    if (version != TR_PPL_REF_VERSION) {
        snprintf(why, cap, "of format version %u, this trellis reads %u", version,
                 TR_PPL_REF_VERSION);
        return false;
    }
    tr_ppl_ref_head h;
    read_head(buf, &h);
    get_le(buf + 60, &reserved, 4);
    if (!sizes_agree(&h, len) || reserved != 0 || (h.flags & ~TR_PPL_REF_FLAG_BOS)) {
        snprintf(why, cap, "damaged: %zu bytes for %llu positions of %u windows of %u tokens%s",
                 len, (unsigned long long)h.n_scored, h.windows, h.ctx,
                 reserved || (h.flags & ~TR_PPL_REF_FLAG_BOS) ? " (unknown flags)" : "");
        return false;
    }
    size_t n = (size_t)h.n_scored;
    out->top1 = malloc(n * sizeof *out->top1);
    out->gap = malloc(n * sizeof *out->gap);
    if (!out->top1 || !out->gap) {
        tr_ppl_ref_free(out);
        snprintf(why, cap, "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *q = buf + TR_PPL_REF_HEADER + i * TR_PPL_REF_RECORD;
        get_le(q, &out->top1[i], 4);
        get_le(q + 4, &out->gap[i], 4);
    }
    out->h = h;
    return true;
}
