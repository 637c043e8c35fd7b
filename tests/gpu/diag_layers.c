/* diag_layers.c — a diagnostic, not a test: where two backends part on a
 * whole model, op by op and layer by layer. It tells a bug (a jump at one
 * op) from the model carrying last-bit differences up to the size of its
 * 8-bit activation rounding (a smooth growth that a one-ulp change of the
 * CPU's own input reproduces): the argument behind test_gpu_parity's
 * bounds, and the figures quoted there, come from it.
 *
 * It writes the synthetic model of tests/gpu/synth_shapes.h, loads it on
 * the CPU (the reference: its default kernel set) and on each variant,
 * runs test_gpu_parity's prompts, and records every matmul's input and
 * outputs, every rope output and the residual stream after each
 * sub-layer (downloaded as the ops run, through hooks in a copy of each
 * backend's op table). For each record it prints the variant's RMS
 * difference from the reference, in % of the reference's RMS, and at
 * every matmul input the share of 8-bit activations (the CPU's rule,
 * 32-blocks) that round to another integer; then the first-step logits'
 * difference and, with DIAG_GREEDY=N, N teacher-forced greedy steps.
 *
 * Variants: cpu:portable (the other CPU kernel set: exp and sums differ
 * in the last bits), cpu+ulp (the reference with the last mantissa bit of
 * every embedding value flipped: one ulp at the input, nothing else),
 * cpu+ulp@7 (every 7th value only), and, where a device is usable, cuda
 * and cuda+ulp.
 *
 * Environment: DIAG_MODEL=smollm2|gemma3 (smollm2), DIAG_PROMPTS=digits
 * (which of the test's prompts: 0 = 7 tokens, 1 = 48, 2 = 130, 3 = 300 or
 * Gemma's 600; default 02), DIAG_GREEDY=N (0), DIAG_VERBOSE=1 (each
 * differing greedy pick). $TMPDIR as the test (~100-250 MB, removed).
 *
 * Not a ctest target (it checks nothing). Build against a core build
 * tree B (cmake -DTRELLIS_CORE_ONLY=ON -DTRELLIS_CUDA=ON; without CUDA
 * drop the cuda library, -lcudart and TRELLIS_HAVE_CUDA):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -ffp-contract=off -I. -Iinclude \
 *     -DTRELLIS_SOURCE_DIR=\"$PWD\" -DTRELLIS_HAVE_CUDA=1 \
 *     tests/gpu/diag_layers.c -o diag_layers B/libtr_model.a \
 *     B/libtr_kernels.a B/libtr_kernels_cuda.a B/libtr_gguf.a \
 *     B/libtr_dtype.a B/libtr_base.a \
 *     -L/usr/local/cuda/targets/x86_64-linux/lib -lcudart -lstdc++ -lm -lpthread
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/gpu/synth_shapes.h"
#include "tests/unit/model_ref.h"
#pragma GCC diagnostic pop

#define MAX_VAR 6
#define MAX_REC 4096

typedef struct rec {
    char tag[40];
    int layer, sub; /* sub: 0 attention, 1 feed-forward */
    int64_t count, cols; /* cols: a matmul input's row width, else 0 */
    float *ref;          /* the reference's values */
    double rel[MAX_VAR], flips[MAX_VAR];
} rec;

/* The hook's state (one model runs at a time). */
static struct {
    bool recording; /* the reference: store; else compare into var */
    bool off;       /* record nothing (the greedy steps) */
    int var, perturb, n_acc, idx;
    int n_rec;
    rec r[MAX_REC];
    tr_backend *be[MAX_VAR];
    const tr_backend_ops *orig[MAX_VAR];
    tr_backend_ops tab[MAX_VAR];
    int n_be;
    float *tmp;
    size_t tmp_cap;
} g;

static const tr_backend_ops *orig_of(tr_stream *s) {
    for (int i = 0; i < g.n_be; i++)
        if (g.be[i] == s->be) return g.orig[i];
    fprintf(stderr, "diag: stream of an unhooked backend\n");
    exit(2);
}

static float *fetch(tr_stream *s, const float *dev, int64_t count) {
    size_t need = (size_t)count * sizeof(float);
    if (need > g.tmp_cap) {
        free(g.tmp);
        g.tmp = malloc(need);
        g.tmp_cap = need;
    }
    const tr_backend_ops *o = orig_of(s);
    if (o->download(s, g.tmp, dev, need) || o->stream_synchronize(s)) {
        fprintf(stderr, "diag: download failed\n");
        exit(2);
    }
    return g.tmp;
}

/* The CPU's activation rule for one 32-block (quant_ref.c quant_block). */
static void q32(const float *x, int8_t *q) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    if (amax < 1e-30f) {
        memset(q, 0, 32);
        return;
    }
    float id = 127.0f / amax;
    for (int i = 0; i < 32; i++) {
        float v = nearbyintf(x[i] * id);
        q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
}

static void record(tr_stream *s, const char *tag, const float *dev, int64_t count,
                   int64_t cols) {
    if (g.off) return;
    const float *x = fetch(s, dev, count);
    int layer = g.n_acc / 2; /* two residual adds a layer */
    if (g.recording) {
        if (g.n_rec >= MAX_REC) return;
        rec *r = &g.r[g.n_rec++];
        snprintf(r->tag, sizeof r->tag, "%s", tag);
        r->layer = layer;
        r->sub = g.n_acc % 2;
        r->count = count;
        r->cols = cols;
        r->ref = malloc((size_t)count * sizeof(float));
        memcpy(r->ref, x, (size_t)count * sizeof(float));
        return;
    }
    if (g.idx >= g.n_rec) return;
    rec *r = &g.r[g.idx++];
    if (r->count != count || strcmp(r->tag, tag) != 0) {
        fprintf(stderr, "diag: record %d is %s[%lld] here, %s[%lld] in the reference\n",
                g.idx - 1, tag, (long long)count, r->tag, (long long)r->count);
        exit(2);
    }
    double sa = 0, sd = 0;
    for (int64_t i = 0; i < count; i++) {
        double d = (double)x[i] - r->ref[i];
        sa += (double)r->ref[i] * r->ref[i];
        sd += d * d;
    }
    r->rel[g.var] = sa > 0 ? sqrt(sd / sa) : sqrt(sd);
    if (cols > 0 && cols % 32 == 0) {
        int64_t diff = 0;
        int8_t qa[32], qb[32];
        for (int64_t b = 0; b < count / 32; b++) {
            q32(r->ref + b * 32, qa);
            q32(x + b * 32, qb);
            for (int i = 0; i < 32; i++) diff += qa[i] != qb[i];
        }
        r->flips[g.var] = (double)diff / (double)count;
    }
}

/* ---- the hooks: the original op, then what it wrote ---- */

static void h_embed(tr_stream *s, float *out, const tr_weight *t, const int32_t *ids, int32_t n) {
    const tr_backend_ops *o = orig_of(s);
    o->embed(s, out, t, ids, n);
    int64_t count = (int64_t)n * t->cols;
    if (g.perturb) { /* flip the last mantissa bit of every perturb-th value */
        float *x = fetch(s, out, count);
        for (int64_t i = 0; i < count; i += g.perturb) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            u ^= 1u;
            memcpy(&x[i], &u, 4);
        }
        o->upload(s, out, x, (size_t)count * sizeof(float));
        o->stream_synchronize(s);
    }
    record(s, "embed", out, count, 0);
}

static void h_matmul(tr_stream *s, int32_t n_mats, float *const *out, const tr_weight *const *w,
                     const float *x, int32_t n, bool accumulate) {
    char tag[40];
    snprintf(tag, sizeof tag, "in  %lld -> %lld%s", (long long)w[0]->cols,
             (long long)w[0]->rows, n_mats > 1 ? "+" : "");
    record(s, tag, x, (int64_t)n * w[0]->cols, w[0]->cols);
    orig_of(s)->matmul(s, n_mats, out, w, x, n, accumulate);
    for (int32_t i = 0; i < n_mats; i++) {
        snprintf(tag, sizeof tag, "%s %lld -> %lld", accumulate ? "res" : "out",
                 (long long)w[i]->cols, (long long)w[i]->rows);
        record(s, tag, out[i], (int64_t)n * w[i]->rows, 0);
    }
    if (accumulate) g.n_acc++; /* the residual above: still this layer's */
}

static void h_rope(tr_stream *s, float *x, int32_t n, int32_t nh, int32_t hd, const int32_t *pos,
                   float base) {
    orig_of(s)->rope(s, x, n, nh, hd, pos, base);
    char tag[40];
    snprintf(tag, sizeof tag, "rope %d heads", (int)nh);
    record(s, tag, x, (int64_t)n * nh * hd, 0);
}

static void h_rope_neox(tr_stream *s, float *x, int32_t n, int32_t nh, int32_t hd,
                        const int32_t *pos, float base, float fs) {
    orig_of(s)->rope_neox(s, x, n, nh, hd, pos, base, fs);
    char tag[40];
    snprintf(tag, sizeof tag, "rope_neox %d heads", (int)nh);
    record(s, tag, x, (int64_t)n * nh * hd, 0);
}

static void h_add(tr_stream *s, float *out, const float *x, int64_t n) {
    orig_of(s)->add(s, out, x, n);
    record(s, "res add", out, n, 0);
    g.n_acc++;
}

static void hook(tr_backend *be) {
    int i = g.n_be++;
    g.be[i] = be;
    g.orig[i] = be->ops;
    g.tab[i] = *be->ops;
    g.tab[i].embed = h_embed;
    g.tab[i].matmul = h_matmul;
    g.tab[i].rope = h_rope;
    g.tab[i].rope_neox = h_rope_neox;
    g.tab[i].add = h_add;
    g.tab[i].matmul_rows = NULL; /* every logit through matmul */
    be->ops = &g.tab[i];
}

/* ---- driving ---- */

/* test_gpu_parity's seed: its SmolLM2 prompts exactly (it draws Gemma's after
 * those, so Gemma's differ here) */
static uint64_t g_rng = 0x5851f42d4c957f2dull;

static char g_dir[4096], g_path[4200];

static void run(model *m, const int32_t *tok, int32_t n, float *logits) {
    mseq s;
    mseq_init(m, &s, n + 1);
    g.n_acc = 0;
    g.idx = 0;
    mrun(m, &s, tok, n, 0, n, logits);
    mseq_free(m, &s);
}

/* Teacher-forced greedy as test_gpu_parity: each variant fed the
 * reference's picks for n_gen steps; every differing pick is printed
 * with the reference's top-two gap in % of its first-step logits' RMS. */
static void greedy(model *mref, model *const *models, const int *perturb,
                   const char *const *names, int nv, const int32_t *tok, int32_t n, int n_gen) {
    const int32_t V = tr_model_get_hparams(mref)->n_vocab;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    g.off = true;
    for (int v = 0; v < nv; v++) {
        mseq sa, sb;
        mseq_init(mref, &sa, n + n_gen + 1);
        mseq_init(models[v], &sb, n + n_gen + 1);
        g.perturb = 0;
        mrun(mref, &sa, tok, n, 0, n, a);
        g.perturb = perturb[v];
        mrun(models[v], &sb, tok, n, 0, n, b);
        double rms = 0;
        for (int32_t i = 0; i < V; i++) rms += (double)a[i] * a[i];
        rms = sqrt(rms / V);
        int bad = 0;
        double worst_gap = 0, min_gap = INFINITY;
        for (int k = 0; k < n_gen; k++) {
            int32_t tc = mref_argmax(a, V), tg = mref_argmax(b, V);
            float second = -INFINITY;
            for (int32_t i = 0; i < V; i++)
                if (i != tc && a[i] > second) second = a[i];
            min_gap = fmin(min_gap, (a[tc] - second) / rms);
            if (tc != tg) {
                if (getenv("DIAG_VERBOSE"))
                    printf("    %s step %d: ref %d, got %d, gap %.2f%%\n", names[v], k, tc, tg,
                           100 * (a[tc] - a[tg]) / rms);
                bad++;
                worst_gap = fmax(worst_gap, (a[tc] - a[tg]) / rms);
            }
            g.perturb = 0;
            mrun(mref, &sa, &tc, 1, n + k, 1, a);
            g.perturb = perturb[v];
            mrun(models[v], &sb, &tc, 1, n + k, 1, b);
        }
        printf("  greedy %-13s %d of %d picks differ, widest gap among them %.2f%% of the "
               "RMS (narrowest top-two gap met: %.2f%%)\n",
               names[v], bad, n_gen, 100 * worst_gap, 100 * min_gap);
        mseq_free(mref, &sa);
        mseq_free(models[v], &sb);
    }
    g.off = false;
    g.perturb = 0;
    free(a);
    free(b);
}

static double rel_rms(const float *a, const float *b, int32_t n, double *worst) {
    double sa = 0, sd = 0;
    *worst = 0;
    for (int32_t i = 0; i < n; i++) {
        double d = (double)b[i] - a[i];
        sa += (double)a[i] * a[i];
        sd += d * d;
        *worst = fmax(*worst, fabs(d));
    }
    *worst /= sqrt(sa / n);
    return sqrt(sd / sa);
}

static void diag(void **state) {
    (void)state;
    const char *which = getenv("DIAG_MODEL");
    const shape_model *sm = &k_shape_models[which && strcmp(which, "gemma3") == 0 ? 1 : 0];
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/trellis-diag-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(g_path, sizeof g_path, "%s/%s.gguf", g_dir, sm->name);
    if (!shape_write(sm, g_path)) fail_msg("cannot write %s", g_path);
    gguf_file *f = NULL;
    tr_diag d = {0};
    if (tr_gguf_open(g_path, &f, &d)) fail_msg("open: %s", d.message);

    const char *names[MAX_VAR];
    int perturb[MAX_VAR];
    model *models[MAX_VAR];
    tr_backend *bes[MAX_VAR];
    int nv = 0, nbe = 0;
    tr_backend_config cp = {.kernels = "portable"};
    tr_backend *b;
    /* 0: the reference; its model also serves the perturbed variants */
    assert_int_equal(tr_backend_new("cpu", NULL, &b, &d), TR_OK);
    hook(b);
    bes[nbe++] = b;
    model *mref = NULL;
    if (tr_model_load(f, b, 640, &mref, &d)) fail_msg("cpu load: %s", d.message);
    printf("reference: cpu, kernels %s\n", tr_backend_get_info(b).kernels);
    names[nv] = "cpu:portable";
    assert_int_equal(tr_backend_new("cpu", &cp, &b, &d), TR_OK);
    hook(b);
    bes[nbe++] = b;
    if (tr_model_load(f, b, 640, &models[nv], &d)) fail_msg("cpu load: %s", d.message);
    perturb[nv++] = 0;
    names[nv] = "cpu+ulp";
    models[nv] = mref;
    perturb[nv++] = 1;
    names[nv] = "cpu+ulp@7";
    models[nv] = mref;
    perturb[nv++] = 7;
    const tr_backend_reg *rc = tr_backend_reg_find("cuda");
    char why[256] = "";
    if (rc && rc->available(why, sizeof why)) {
        if (tr_backend_new("cuda", NULL, &b, &d)) fail_msg("cuda: %s", d.message);
        hook(b);
        bes[nbe++] = b;
        if (tr_model_load(f, b, 640, &models[nv], &d)) fail_msg("cuda load: %s", d.message);
        names[nv] = "cuda";
        perturb[nv++] = 0;
        names[nv] = "cuda+ulp";
        models[nv] = models[nv - 1];
        perturb[nv++] = 1;
    } else {
        printf("cuda: not usable here (%s)\n", rc ? why : "not built");
    }

    const int32_t V = tr_model_get_hparams(mref)->n_vocab;
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    /* the test's prompts: 7, 48, 130, then 300 (smollm2) / 600 tokens */
    static int32_t prompts[4][640];
    const int32_t lens[4] = {7, 48, 130, sm->window > 0 ? 600 : 300};
    for (int p = 0; p < 4; p++)
        for (int32_t i = 0; i < lens[p]; i++) {
            g_rng = synth_sm64(g_rng);
            prompts[p][i] = (int32_t)(g_rng % (uint64_t)V);
        }
    const char *lst = getenv("DIAG_PROMPTS"); /* indices, e.g. "02" */
    if (!lst || !*lst) lst = "02";
    for (const char *c = lst; *c; c++) {
        int p = *c - '0';
        if (p < 0 || p > 3) continue;
        const int32_t n = lens[p];
        for (int i = 0; i < g.n_rec; i++) free(g.r[i].ref);
        memset(g.r, 0, sizeof g.r);
        g.n_rec = 0;
        g.recording = true;
        g.perturb = 0;
        run(mref, prompts[p], n, la);
        g.recording = false;
        printf("\n==== %s, %d tokens (%d records) ====\nfirst-step logits vs the reference: "
               "RMS and worst element, %% of the reference logits' RMS\n",
               sm->name, n, g.n_rec);
        for (int v = 0; v < nv; v++) {
            g.var = v;
            g.perturb = perturb[v];
            run(models[v], prompts[p], n, lb);
            double worst, rr = rel_rms(la, lb, V, &worst);
            printf("  %-13s rms %6.3f%%  worst %6.3f%%  (top-1 %s)\n", names[v], 100 * rr,
                   100 * worst, mref_argmax(la, V) == mref_argmax(lb, V) ? "same" : "differs");
        }
        g.perturb = 0;
        printf("\nresidual stream after each sub-layer, RMS difference %% of its RMS "
               "(all tokens):\n  %-7s", "layer");
        for (int v = 0; v < nv; v++) printf(" %13s", names[v]);
        printf("\n");
        for (int i = 0; i < g.n_rec; i++) {
            rec *r = &g.r[i];
            if (strncmp(r->tag, "res", 3) != 0) continue;
            printf("  %-2d %-4s", r->layer, r->sub ? "ffn" : "attn");
            for (int v = 0; v < nv; v++) printf(" %12.2e%%", 100 * r->rel[v]);
            printf("\n");
        }
        printf("\nevery record of layers 0 and 1, and the last layer's: RMS difference %% "
               "[share of 8-bit activations rounded differently]\n");
        for (int i = 0; i < g.n_rec; i++) {
            rec *r = &g.r[i];
            int last = tr_model_get_hparams(mref)->n_layers - 1;
            if (r->layer > 1 && r->layer < last) continue;
            printf("  L%-3d %-26s", r->layer, r->tag);
            for (int v = 0; v < nv; v++) {
                printf(" %9.2e%%", 100 * r->rel[v]);
                if (r->cols) printf(" [%7.4f%%]", 100 * r->flips[v]);
            }
            printf("\n");
        }
        printf("\nshare of 8-bit activations rounded differently, mean over each layer's "
               "matmul inputs:\n  %-5s", "layer");
        for (int v = 0; v < nv; v++) printf(" %13s", names[v]);
        printf("\n");
        int nl = tr_model_get_hparams(mref)->n_layers;
        for (int l = 0; l <= nl; l++) {
            double sum[MAX_VAR] = {0};
            int cnt = 0;
            for (int i = 0; i < g.n_rec; i++)
                if (g.r[i].layer == l && g.r[i].cols) {
                    cnt++;
                    for (int v = 0; v < nv; v++) sum[v] += g.r[i].flips[v];
                }
            if (!cnt) continue;
            printf("  %-5d", l);
            for (int v = 0; v < nv; v++) printf(" %12.4f%%", 100 * sum[v] / cnt);
            printf("\n");
        }
        fflush(stdout);
        const char *ge = getenv("DIAG_GREEDY");
        int n_gen = ge ? atoi(ge) : 0;
        if (n_gen > 0) greedy(mref, models, perturb, names, nv, prompts[p], n, n_gen);
    }
    free(la);
    free(lb);
    for (int v = 0; v < nv; v++)
        if (models[v] != mref && (v == 0 || models[v] != models[v - 1])) tr_model_free(models[v]);
    tr_model_free(mref);
    for (int i = 0; i < nbe; i++) tr_backend_free(bes[i]);
    tr_gguf_close(f);
    unlink(g_path);
    rmdir(g_dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(diag)};
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_path[0]) unlink(g_path);
    if (g_dir[0]) rmdir(g_dir);
    return failed;
}
