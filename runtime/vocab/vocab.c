/* vocab.c — the grammar vocabulary of a tokenizer (see vocab.h). */
#include "runtime/vocab/vocab.h"

#include <stdlib.h>

#include "base/util.h"

tr_status tr_vocab_from_tokenizer(const tokenizer *tok, grammar_vocab **out,
                                  tr_diag *diag) {
    int32_t n = tr_tokenizer_n_vocab(tok);
    const uint8_t **bytes = calloc((size_t)n, sizeof *bytes);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *special = calloc((size_t)n, 1);
    int32_t *eog = calloc((size_t)n, sizeof *eog);
    size_t n_eog = 0;
    tr_status s = TR_ERR_NOMEM;
    if (bytes && lens && special && eog) {
        for (int32_t i = 0; i < n; i++) {
            size_t len = 0;
            bytes[i] = tr_tokenizer_token_bytes(tok, i, &len);
            /* a longer token is rejected by tr_grammar_vocab_new (LIMIT) */
            lens[i] = (uint32_t)TR_MIN(len, 65536u);
            special[i] = tr_tokenizer_is_special(tok, i);
            if (tr_tokenizer_is_eog(tok, i)) eog[n_eog++] = i;
        }
        grammar_vocab_desc d = {.n_vocab = n, .token_bytes = bytes,
                                .token_lens = lens, .is_special = special,
                                .eog_ids = eog, .n_eog = n_eog};
        s = tr_grammar_vocab_new(&d, out, diag);
    }
    free(bytes);
    free(lens);
    free(special);
    free(eog);
    return s;
}
