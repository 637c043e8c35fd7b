/* cmd_info.c — `trellis info`: what a GGUF file holds. */
#include <stdio.h>
#include <string.h>

#include "kernels/dtype.h"
#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"

static void print_token(const tokenizer *t, const char *label, int32_t id) {
    if (id < 0) {
        printf("  %-14s none\n", label);
        return;
    }
    size_t len = 0;
    const uint8_t *b = tr_tokenizer_token_bytes(t, id, &len);
    printf("  %-14s %d '%.*s'\n", label, id, (int)len, (const char *)b);
}

int cmd_info(int argc, char **argv) {
    const char *model_path = NULL;
    bool all_kv = false, help = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_path, 1, 0, "GGUF file (default: the cached default model)"},
        {"--kv", NULL, CLI_FLAG, &all_kv, 1, 0, "also print every metadata key/value"},
    };
    if (!cli_parse("info", "[-m MODEL] [--kv]", opts, 2, argc, argv, &help))
        return 2;
    if (help) return 0;
    cli_loaded L;
    if (!cli_load("info", model_path, GGUF_LOAD_MMAP, false, 1, 1, &L)) return 1;

    /* hyper-parameters come from binding the model on a 1-thread backend:
     * binding validates every tensor, so info also says whether Trellis can
     * run this file */
    tr_backend *be = NULL;
    model *m = NULL;
    tr_diag d = {0};
    tr_status s = tr_backend_new("cpu", &(tr_backend_config){.threads = 1}, &be, &d);
    if (s == TR_OK) s = tr_model_load(L.file, be, 1, &m, &d);

    gguf_str name = {0};
    tr_gguf_get_str(L.file, "general.name", &name);
    printf("file:           GGUF v%u, %.1f MiB, %llu tensors, %llu metadata keys\n",
           tr_gguf_version(L.file), (double)tr_gguf_file_size(L.file) / (1 << 20),
           (unsigned long long)tr_gguf_tensor_count(L.file),
           (unsigned long long)tr_gguf_kv_count(L.file));
    printf("name:           %.*s\n", (int)name.len, name.ptr ? name.ptr : "");
    if (m) {
        const model_hparams *hp = tr_model_get_hparams(m);
        printf("architecture:   %s\n", hp->arch);
        printf("layers:         %d\n", hp->n_layers);
        printf("embedding:      %d\n", hp->dim);
        printf("heads:          %d query, %d key/value (head dim %d)\n",
               hp->n_heads, hp->n_kv_heads, hp->head_dim);
        printf("feed-forward:   %d\n", hp->ffn_dim);
        printf("context:        %d (trained)\n", hp->n_ctx_train);
        printf("rope base:      %g", hp->rope_base);
        if (hp->rope_freq_scale != 1.0f) printf(" (linear scaling x%g)", 1.0 / hp->rope_freq_scale);
        if (hp->n_local_layers) printf(", local layers %g", hp->rope_base_local);
        printf("\n");
        /* per layer: G = global attention, L = sliding-window (local) */
        printf("attention:      ");
        if (hp->n_local_layers)
            printf("%d local (window %d), %d global: ", hp->n_local_layers,
                   hp->sliding_window, hp->n_layers - hp->n_local_layers);
        else
            printf("global in every layer: ");
        for (int32_t l = 0; l < hp->n_layers; l++)
            putchar(tr_model_layer_window(m, l) ? 'L' : 'G');
        printf("\n");
        printf("query scale:    %g\n", hp->attn_scale);
        if (hp->embd_scale != 1.0f) printf("embed scale:    %g\n", hp->embd_scale);
        if (hp->final_softcap > 0.0f) printf("logit softcap:  %g\n", hp->final_softcap);
        printf("rms epsilon:    %g\n", hp->rms_eps);
        printf("output:         %s\n", hp->tied_output ? "tied to token embedding" : "separate");
        printf("weights:        %.1f MiB\n", (double)tr_model_weight_bytes(m) / (1 << 20));
        printf("runnable:       yes\n");
    } else {
        gguf_str arch = {0};
        tr_gguf_get_str(L.file, "general.architecture", &arch);
        printf("architecture:   %.*s\n", (int)arch.len, arch.ptr ? arch.ptr : "?");
        printf("runnable:       no: %s\n", d.message[0] ? d.message : tr_status_message(s));
    }
    unsigned long long hist[TR_DTYPE_COUNT_] = {0};
    for (uint64_t i = 0; i < tr_gguf_tensor_count(L.file); i++)
        hist[tr_gguf_tensor_at(L.file, i)->type]++;
    printf("tensor types:  ");
    for (int t = 0; t < TR_DTYPE_COUNT_; t++)
        if (hist[t]) printf(" %s x%llu", tr_dtype_name((uint32_t)t), hist[t]);
    printf("\n");
    printf("vocabulary:     %d tokens (%s", tr_tokenizer_n_vocab(L.tok),
           tr_tokenizer_kind_name(L.tok));
    if (!tr_tokenizer_is_spm(L.tok))
        printf(", pre-tokenizer '%s')\n", tr_tokenizer_pre_name(L.tok));
    else
        printf(", add_space_prefix %s)\n", tr_tokenizer_add_space_prefix(L.tok) ? "yes" : "no");
    printf("special tokens:\n");
    print_token(L.tok, "bos", tr_tokenizer_bos(L.tok));
    print_token(L.tok, "eos", tr_tokenizer_eos(L.tok));
    printf("  %-14s", "end of turn");
    for (int32_t i = 0; i < tr_tokenizer_n_vocab(L.tok); i++)
        if (tr_tokenizer_is_eog(L.tok, i)) {
            size_t len;
            const uint8_t *b = tr_tokenizer_token_bytes(L.tok, i, &len);
            printf(" %d '%.*s'", i, (int)len, (const char *)b);
        }
    printf("\n  %-14s %s\n", "add bos", tr_tokenizer_add_bos(L.tok) ? "yes" : "no");
    gguf_str tmpl = {0};
    if (tr_gguf_get_str(L.file, "tokenizer.chat_template", &tmpl) == TR_OK) {
        printf("chat template:  %llu bytes:\n", (unsigned long long)tmpl.len);
        printf("%.*s\n", (int)tmpl.len, tmpl.ptr);
    } else {
        printf("chat template:  none\n");
    }
    if (all_kv) {
        printf("metadata:\n");
        char buf[512];
        for (uint64_t i = 0; i < tr_gguf_kv_count(L.file); i++) {
            gguf_str k = tr_gguf_kv_key(L.file, i);
            printf("  %.*s = %s\n", (int)k.len, k.ptr,
                   tr_gguf_kv_format(L.file, i, buf, sizeof buf));
        }
    }
    tr_model_free(m);
    tr_backend_free(be);
    cli_loaded_free(&L);
    return 0;
}
