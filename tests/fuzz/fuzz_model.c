/* fuzz_model.c — libFuzzer target for binding a model: any GGUF that opens
 * must either load (architecture table, hyper-parameters, every tensor's
 * shape and type) or fail with a diagnostic saying why; a model that loads
 * must run a two-token forward pass without touching memory it does not
 * own, whatever its hyper-parameters claim. Replayed over
 * tests/fuzz/corpus/model/ by ctest (replay_model); the seeds are tiny
 * llama files (tests/unit/tiny_gguf.h) and broken variants. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/model.h"

/* KV memory a fuzzed model may ask for in its forward pass. */
#define FUZZ_KV_BUDGET (64u << 20)

static void run_forward(model *m) {
    const int32_t page = 4;
    if (tr_model_kv_page_bytes(m, page, TR_KV_F16, TR_KV_F16) > FUZZ_KV_BUDGET) return;
    tr_kv_layout kv;
    if (tr_model_kv_alloc(m, 1, page, TR_KV_F16, TR_KV_F16, &kv, NULL) != TR_OK) return;
    const model_hparams *hp = tr_model_get_hparams(m);
    int32_t tokens[2] = {0, hp->n_vocab - 1}, pos[2] = {0, 1}, seq[2] = {0, 0};
    int32_t table[1] = {0}, n_pages = 1, row = 1;
    const int32_t *tables[1] = {table};
    tr_batch b = {2, pos, seq, 1, tables, &n_pages};
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    if (logits && tr_model_forward(m, &kv, &b, tokens, &row, 1, logits) != TR_OK)
        abort(); /* a well-formed batch on a loaded model must run */
    free(logits);
    tr_model_kv_free(m, &kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tr_backend *be;
    if (!be && tr_backend_new("cpu", &(tr_backend_config){.threads = 1}, &be, NULL))
        abort();
    /* an exact-size copy, so that a read past the end is caught */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    gguf_file *f = NULL;
    if (tr_gguf_open_memory(copy, size, &f, NULL) == TR_OK) {
        model *m = NULL;
        tr_diag d = {0};
        tr_status s = tr_model_load(f, be, 2, &m, &d);
        if (s == TR_OK) {
            run_forward(m);
            tr_model_free(m);
        } else if (s != TR_ERR_NOMEM && !d.message[0]) {
            abort(); /* every refusal says why */
        }
        tr_gguf_close(f);
    }
    free(copy);
    return 0;
}
