/* options.c — the one table of engine option defaults and bounds.
 * trellis_engine_options_default fills an options struct from it, and
 * tr_engine_options_resolve (trellis_engine_new, then tr_engine_new_custom)
 * turns what an embedder passed into the values in force, which
 * trellis_engine_get_info then reports; trellis_engine_option_at/_find
 * describe it to programs that take the options as flags (app/common's
 * engine flags): a default or a bound is written once, here.
 *
 * Layering: runtime/engine; pure functions, any thread.
 *
 * Each integer option has a default, a range, and a rule for values that
 * mean "unset": UNSET_NONPOS (0 or less: the default; the API has always
 * read 0 as "the default" and negative values the same way), UNSET_NEG
 * (negative: the lowest value), or STRICT (anything outside the range is
 * an error naming the option). Above the range is always an error. The
 * bounds that depend on the model or the compute side (ctx, the batch the
 * forward pass takes) are applied by tr_engine_new_custom.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/engine/engine_internal.h"

enum { UNSET_NONPOS, UNSET_NEG, STRICT };

/* d: what trellis_engine_option_at shows (name, default, bounds, and the
 * note appended to a range error) */
typedef struct opt_spec {
    trellis_engine_option_desc d;
    size_t off;      /* of an int32_t in trellis_engine_options */
    int unset;
} opt_spec;

#define OPT(f, def, lo, hi, u, note) \
    {{#f, def, lo, hi, note}, offsetof(trellis_engine_options, f), u}

/* threads: the public bound (trellis.h), the one the CLI and embedders
 * see; a larger count would only fail later, in the backend (its pool has
 * the same limit), with a message that does not name the option. */
static const opt_spec k_opts[] = {
    OPT(threads, 0, 0, TRELLIS_MAX_THREADS, UNSET_NONPOS, "0 = one per core"),
    OPT(max_batch_tokens, 512, 1, 65536, UNSET_NONPOS, ""),
    OPT(max_running, 64, 1, INT32_MAX, UNSET_NONPOS, ""),
    OPT(chunk_size, 256, 1, INT32_MAX, UNSET_NONPOS, ""),
    OPT(page_size, 16, 1, 4096, UNSET_NONPOS, ""),
    OPT(kv_pages, 0, 0, INT32_MAX / 2, STRICT, "0 = from kv_mb"),
    OPT(kv_mb, 512, 1, INT32_MAX, UNSET_NONPOS, ""),
    OPT(ctx, 0, 0, INT32_MAX, STRICT, "0 = the model's"),
    OPT(lpm_max_waiting, 128, 0, INT32_MAX, UNSET_NEG, ""),
    OPT(grammar_cache_mb, 256, 1, INT32_MAX, UNSET_NONPOS, ""),
    OPT(spec_ngram, 0, 0, 32, STRICT, "0 = off"),
    OPT(load, TRELLIS_LOAD_AUTO, TRELLIS_LOAD_AUTO, TRELLIS_LOAD_READ, STRICT,
        "a TRELLIS_LOAD_* mode"),
    OPT(kv_type_k, TRELLIS_KV_F16, TRELLIS_KV_F16, TRELLIS_KV_Q4, STRICT,
        "a TRELLIS_KV_* type"),
    OPT(kv_type_v, TRELLIS_KV_F16, TRELLIS_KV_F16, TRELLIS_KV_Q4, STRICT,
        "a TRELLIS_KV_* type"),
    OPT(kv_cache_disk_mb, 4096, 1, INT32_MAX, UNSET_NONPOS, "with kv_cache_dir"),
    OPT(spec_draft, 4, 1, 16, UNSET_NONPOS, "with draft_model"),
};

static int32_t *field(trellis_engine_options *o, const opt_spec *s) {
    return (int32_t *)((char *)o + s->off);
}

#define N_OPTS (sizeof k_opts / sizeof *k_opts)

void trellis_engine_options_default(trellis_engine_options *o) {
    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < N_OPTS; i++) *field(o, &k_opts[i]) = k_opts[i].d.def;
}

const trellis_engine_option_desc *trellis_engine_option_at(int32_t i) {
    return i >= 0 && (size_t)i < N_OPTS ? &k_opts[i].d : NULL;
}

const trellis_engine_option_desc *trellis_engine_option_find(const char *name) {
    for (size_t i = 0; name && i < N_OPTS; i++)
        if (strcmp(k_opts[i].d.name, name) == 0) return &k_opts[i].d;
    return NULL;
}

tr_status tr_engine_options_resolve(const trellis_engine_options *in,
                                    trellis_engine_options *out, char *err,
                                    size_t cap) {
    trellis_engine_options o;
    if (in) o = *in;
    else trellis_engine_options_default(&o);
    for (size_t i = 0; i < N_OPTS; i++) {
        const opt_spec *s = &k_opts[i];
        const trellis_engine_option_desc *d = &s->d;
        int32_t *v = field(&o, s);
        if (s->unset == UNSET_NONPOS && *v <= 0) *v = d->def;
        if (s->unset == UNSET_NEG && *v < d->min) *v = d->min;
        if (*v < d->min || *v > d->max) {
            if (err && cap)
                snprintf(err, cap, "options.%s is %d, expected %d..%d%s%s%s", d->name, *v,
                         d->min, d->max, d->note[0] ? " (" : "", d->note,
                         d->note[0] ? ")" : "");
            return TR_ERR_INVALID_ARG;
        }
    }
    *out = o;
    return TR_OK;
}

const char *trellis_kv_type_name(int32_t kv_type) {
    static const char *const names[] = {"f16", "q8", "q4"};
    return kv_type >= 0 && kv_type <= TRELLIS_KV_Q4 ? names[kv_type] : "?";
}
