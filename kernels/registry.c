/* registry.c — the backend registry of backend.h: the compiled-in
 * backends by name, tr_backend_new choosing among them, and the check of
 * what a backend's table provides.
 *
 * Layering: kernels/ (the one file that knows every backend's entry).
 * Thread-safe: a constant table; `available` calls only ask the system.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#if defined(TRELLIS_HAVE_CUDA)
#include "kernels/cuda/cuda.h"
#endif

static const tr_backend_reg *const k_regs[] = {
    &tr_backend_cpu_reg,
#if defined(TRELLIS_HAVE_CUDA)
    &tr_backend_cuda_reg,
#endif
};

int tr_backend_reg_count(void) { return (int)TR_ARRAY_LEN(k_regs); }

const tr_backend_reg *tr_backend_reg_get(int i) {
    return i >= 0 && i < tr_backend_reg_count() ? k_regs[i] : NULL;
}

const tr_backend_reg *tr_backend_reg_find(const char *name) {
    for (int i = 0; name && i < tr_backend_reg_count(); i++)
        if (strcmp(k_regs[i]->name, name) == 0) return k_regs[i];
    return NULL;
}

/* "cpu, cuda": the entries (only the available ones if `usable`). */
static const char *list(char *buf, size_t cap, bool usable) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < tr_backend_reg_count(); i++) {
        char why[256];
        if (usable && !k_regs[i]->available(why, sizeof why)) continue;
        int w = snprintf(buf + at, cap - at, "%s%s", at ? ", " : "",
                         k_regs[i]->name);
        if (w < 0 || (size_t)w >= cap - at) break;
        at += (size_t)w;
    }
    if (!buf[0]) snprintf(buf, cap, "none");
    return buf;
}

/* "cuda:1" -> base "cuda" in base[cap], *device 1; true if name had a
 * ":N" suffix. false with *bad set for a suffix that is not a device
 * ordinal (0..9999). */
static bool split_device(const char *name, char *base, size_t cap,
                         int32_t *device, bool *bad) {
    *bad = false;
    const char *colon = strchr(name, ':');
    if (!colon) return false;
    size_t n = (size_t)(colon - name);
    const char *d = colon + 1;
    size_t nd = strlen(d);
    if (n >= cap || nd == 0 || nd > 4 || strspn(d, "0123456789") != nd) {
        *bad = true;
        return false;
    }
    memcpy(base, name, n);
    base[n] = 0;
    *device = (int32_t)atoi(d);
    return true;
}

tr_status tr_backend_new(const char *name, const tr_backend_config *cfg,
                         tr_backend **out, tr_diag *diag) {
    static const tr_backend_config k_default;
    if (!out)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "tr_backend_new: out is NULL");
    if (!name) name = "cpu";
    if (!cfg) cfg = &k_default;
    char names[128], why[256], base[32];
    tr_backend_config with_device;
    bool bad = false;
    if (split_device(name, base, sizeof base, &with_device.device, &bad)) {
        int32_t device = with_device.device;
        with_device = *cfg;
        with_device.device = device;
        cfg = &with_device;
        name = base;
    } else if (bad) {
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "backend '%.40s': expected NAME or NAME:DEVICE "
                           "(e.g. cuda:1)",
                           name);
    }
    const tr_backend_reg *r = tr_backend_reg_find(name);
    if (!r)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0,
                           "unknown backend '%.32s' (built in: %s)", name,
                           list(names, sizeof names, false));
    if (!r->available(why, sizeof why))
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "backend '%s' is not available: %s (available: "
                           "%s)",
                           r->name, why, list(names, sizeof names, true));
    return r->create(cfg, out, diag);
}

const char *tr_backend_missing_op(const tr_backend *be) {
    const tr_backend_ops *o = be->ops;
    /* every member but the OPTIONAL ones (get_rows) */
#define REQUIRE(member) \
    if (!o->member) return #member;
    REQUIRE(destroy) REQUIRE(get_info) REQUIRE(supports) REQUIRE(supports_kv)
    REQUIRE(stream_new) REQUIRE(stream_free) REQUIRE(stream_synchronize)
    REQUIRE(event_new) REQUIRE(event_free) REQUIRE(event_record)
    REQUIRE(stream_wait) REQUIRE(event_synchronize) REQUIRE(synchronize)
    REQUIRE(alloc) REQUIRE(free) REQUIRE(host_alloc) REQUIRE(host_free)
    REQUIRE(import_weights) REQUIRE(upload) REQUIRE(download) REQUIRE(copy)
    REQUIRE(embed) REQUIRE(rmsnorm) REQUIRE(matmul) REQUIRE(rope)
    REQUIRE(kv_store) REQUIRE(attention) REQUIRE(swiglu) REQUIRE(add)
    REQUIRE(rope_neox) REQUIRE(geglu) REQUIRE(add_bias) REQUIRE(scale)
    REQUIRE(softcap) REQUIRE(mul_cols)
#undef REQUIRE
    return NULL;
}
