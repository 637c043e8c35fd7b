/* cmd_info.c — `trellis info`: what a GGUF file holds and whether Trellis
 * can run it.
 *
 * Everything described comes from the file's metadata and tensor table
 * (gguf.h) and its tokenizer: the standard GGUF hyper-parameter keys
 * (<arch>.block_count, .embedding_length, ...) get a line each, the
 * architecture's other keys are listed as they are, so that a new
 * architecture needs no change here. "runnable" asks the engine itself
 * (trellis.h): it opens the model the way `generate` does, which checks
 * the architecture, every tensor's presence, shape and type.
 */
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "kernels/dtype.h"
#include "app/common/args.h"
#include "app/cli/cli.h"
#include "trellis.h"

static void print_token(const tokenizer *t, const char *label, int32_t id) {
    if (id < 0) {
        printf("  %-14s none\n", label);
        return;
    }
    size_t len = 0;
    const uint8_t *b = tr_tokenizer_token_bytes(t, id, &len);
    printf("  %-14s %d '", label, id);
    tr_cli_print_bytes(stdout, b, len);
    printf("'\n");
}

/* <arch>.<suffix> as an integer, or -1 when absent or not an integer. */
static int64_t arch_int(const gguf_file *f, const char *arch, const char *suffix) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    return tr_gguf_get_i64(f, key, &v) == TR_OK ? v : -1;
}

static bool arch_float(const gguf_file *f, const char *arch, const char *suffix,
                       float *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return tr_gguf_get_f32(f, key, out) == TR_OK;
}

/* The standard hyper-parameters, then the architecture's other keys. */
static void print_hparams(const gguf_file *f, const char *arch) {
    int64_t layers = arch_int(f, arch, "block_count");
    int64_t dim = arch_int(f, arch, "embedding_length");
    int64_t heads = arch_int(f, arch, "attention.head_count");
    int64_t kv = arch_int(f, arch, "attention.head_count_kv");
    int64_t hd = arch_int(f, arch, "attention.key_length");
    if (kv < 0) kv = heads;
    if (hd < 0 && heads > 0 && dim > 0) hd = dim / heads;
    printf("layers:         %lld\n", (long long)layers);
    printf("embedding:      %lld\n", (long long)dim);
    printf("heads:          %lld query, %lld key/value (head dim %lld)\n",
           (long long)heads, (long long)kv, (long long)hd);
    printf("feed-forward:   %lld\n", (long long)arch_int(f, arch, "feed_forward_length"));
    printf("context:        %lld (trained)\n", (long long)arch_int(f, arch, "context_length"));
    float x;
    if (arch_float(f, arch, "rope.freq_base", &x)) printf("rope base:      %g\n", x);
    if (arch_float(f, arch, "attention.layer_norm_rms_epsilon", &x))
        printf("rms epsilon:    %g\n", x);
    static const char *const shown[] = {
        "block_count", "embedding_length", "attention.head_count",
        "attention.head_count_kv", "attention.key_length", "feed_forward_length",
        "context_length", "rope.freq_base", "attention.layer_norm_rms_epsilon"};
    size_t al = strlen(arch);
    bool header = false;
    char buf[512];
    for (uint64_t i = 0; i < tr_gguf_kv_count(f); i++) {
        gguf_str k = tr_gguf_kv_key(f, i);
        if (k.len <= al + 1 || memcmp(k.ptr, arch, al) != 0 || k.ptr[al] != '.') continue;
        bool dup = false;
        for (size_t s = 0; s < TR_ARRAY_LEN(shown); s++)
            dup |= k.len - al - 1 == strlen(shown[s]) &&
                   memcmp(k.ptr + al + 1, shown[s], k.len - al - 1) == 0;
        if (dup) continue;
        if (!header) printf("other %s keys:\n", arch);
        header = true;
        printf("  %.*s = %s\n", (int)(k.len - al - 1), k.ptr + al + 1,
               tr_gguf_kv_format(f, i, buf, sizeof buf));
    }
}

static void print_tensors(const gguf_file *f) {
    unsigned long long hist[TR_DTYPE_COUNT_] = {0};
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < tr_gguf_tensor_count(f); i++) {
        const gguf_tensor *t = tr_gguf_tensor_at(f, i);
        if (t->type < TR_DTYPE_COUNT_) hist[t->type]++;
        bytes += t->size;
    }
    printf("output:         %s\n", tr_gguf_tensor_find(f, "output.weight")
                                       ? "separate"
                                       : "tied to token embedding");
    printf("weights:        %.1f MiB\n", (double)bytes / (1 << 20));
    printf("tensor types:  ");
    for (int t = 0; t < TR_DTYPE_COUNT_; t++)
        if (hist[t]) printf(" %s x%llu", tr_dtype_name((uint32_t)t), hist[t]);
    printf("\n");
}

/* Per layer, as the model runs it: G = global attention, L = a
 * sliding window (local). */
static void print_attention(const trellis_engine *e) {
    trellis_engine_info in;
    trellis_engine_get_info(e, &in);
    if (in.n_layers <= 0) return;
    int32_t n_local = 0, window = 0;
    for (int32_t l = 0; l < in.n_layers; l++) {
        int32_t w = trellis_engine_layer_window(e, l);
        if (w > 0) n_local++, window = w;
    }
    printf("attention:      ");
    if (n_local)
        printf("%d local (window %d), %d global: ", n_local, window, in.n_layers - n_local);
    else
        printf("global in every layer: ");
    for (int32_t l = 0; l < in.n_layers; l++)
        putchar(trellis_engine_layer_window(e, l) > 0 ? 'L' : 'G');
    printf("\n");
}

/* Opens the model through the engine, as small as it goes: "yes", or
 * "no: why" (the engine's own sentence). */
static void print_runnable(const char *path) {
    trellis_engine_options eo;
    trellis_engine_options_default(&eo);
    eo.threads = 1;
    eo.max_batch_tokens = 1;
    eo.kv_pages = 1;
    eo.no_overlap = true;
    eo.load = TRELLIS_LOAD_MMAP;
    trellis_engine *e = NULL;
    char err[1024];
    if (trellis_engine_new(path, &eo, &e, err, sizeof err) == TRELLIS_OK) {
        print_attention(e);
        printf("runnable:       yes\n");
        trellis_engine_free(e);
    } else {
        printf("runnable:       no: %s\n", err);
    }
}

static void print_vocab(const tokenizer *tok, const gguf_file *f) {
    printf("vocabulary:     %d tokens (%s", tr_tokenizer_n_vocab(tok), tr_tokenizer_kind_name(tok));
    if (tr_tokenizer_is_spm(tok))
        printf(", add_space_prefix %s)\n", tr_tokenizer_add_space_prefix(tok) ? "yes" : "no");
    else
        printf(", pre-tokenizer '%s')\n", tr_tokenizer_pre_name(tok));
    printf("special tokens:\n");
    print_token(tok, "bos", tr_tokenizer_bos(tok));
    print_token(tok, "eos", tr_tokenizer_eos(tok));
    printf("  %-14s", "end of turn");
    for (int32_t i = 0; i < tr_tokenizer_n_vocab(tok); i++) {
        if (!tr_tokenizer_is_eog(tok, i)) continue;
        size_t len;
        const uint8_t *b = tr_tokenizer_token_bytes(tok, i, &len);
        printf(" %d '", i);
        tr_cli_print_bytes(stdout, b, len);
        printf("'");
    }
    printf("\n  %-14s %s\n", "add bos", tr_tokenizer_add_bos(tok) ? "yes" : "no");
    gguf_str tmpl = {0};
    if (tr_gguf_get_str(f, "tokenizer.chat_template", &tmpl) == TR_OK) {
        printf("chat template:  %llu bytes:\n", (unsigned long long)tmpl.len);
        printf("%.*s\n", (int)tmpl.len, tmpl.ptr);
    } else {
        printf("chat template:  none\n");
    }
}

int tr_cli_info(int argc, char **argv) {
    const char *model_path = NULL;
    bool all_kv = false, help = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_path, 1, 0, "GGUF file",
         "the cached default model", .meta = "FILE"},
        {"--kv", NULL, CLI_FLAG, &all_kv, 1, 0, "also print every metadata key/value", "off"},
    };
    const cli_cmd c = {.name = "info", .usage = "[-m MODEL] [--kv]", .opts = opts,
                       .n_opts = TR_ARRAY_LEN(opts)};
    if (!tr_cli_parse(&c, argc, argv, &help)) return 2;
    if (help) return 0;
    char def[4096];
    const char *path = tr_cli_model_path("info", model_path, def, sizeof def);
    cli_vocab v;
    if (!path || !tr_cli_vocab_open("info", path, &v)) return 1;
    const gguf_file *f = v.file;
    gguf_str name = {0}, arch = {0};
    tr_gguf_get_str(f, "general.name", &name);
    tr_gguf_get_str(f, "general.architecture", &arch);
    char arch_z[64];
    snprintf(arch_z, sizeof arch_z, "%.*s", (int)arch.len, arch.ptr ? arch.ptr : "?");
    printf("file:           GGUF v%u, %.1f MiB, %llu tensors, %llu metadata keys\n",
           tr_gguf_version(f), (double)tr_gguf_file_size(f) / (1 << 20),
           (unsigned long long)tr_gguf_tensor_count(f),
           (unsigned long long)tr_gguf_kv_count(f));
    printf("name:           ");
    tr_cli_print_bytes(stdout, name.ptr ? name.ptr : "", name.len);
    printf("\narchitecture:   ");
    tr_cli_print_bytes(stdout, arch_z, strlen(arch_z));
    printf("\n");
    print_hparams(f, arch_z);
    print_tensors(f);
    print_runnable(path);
    print_vocab(v.tok, f);
    if (all_kv) {
        printf("metadata:\n");
        char buf[512];
        for (uint64_t i = 0; i < tr_gguf_kv_count(f); i++) {
            gguf_str k = tr_gguf_kv_key(f, i);
            printf("  ");
            tr_cli_print_bytes(stdout, k.ptr, k.len);
            printf(" = %s\n", tr_gguf_kv_format(f, i, buf, sizeof buf));
        }
    }
    tr_cli_vocab_close(&v);
    return 0;
}
