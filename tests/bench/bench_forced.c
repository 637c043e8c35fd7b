/* bench_forced.c — the most any jump-forward could save on given outputs:
 * how much of each output its grammar forces, and how many of the
 * model's tokens hold at least one byte it does not (each of those is a
 * forward pass whatever jump-forward does). Not a test: never run by
 * ctest.
 *
 *   bench_forced OUTPUTS.jsonl [--whitespace compact|flexible|pretty] [-m MODEL]
 *
 * OUTPUTS: JSON lines {"schema": S, "text": T, "completion_tokens": N}, as
 * `tests/bench/schema_generate.py --parts jump --jump-outputs FILE` writes
 * the outputs it made without jump-forward (use the same --whitespace).
 *
 * Per output: the text is run byte by byte through a matcher of the
 * schema's grammar; wherever the grammar forces bytes (forced_bytes, as
 * the engine asks after each token) those are marked forced and taken at
 * once. The text is then split into the model's tokens (its tokenizer's
 * encoding of the text: what greedy decoding produced, up to the
 * tokenizer's own choices); a token all of whose bytes are forced could
 * have been skipped, any other needs a pass. Bound = 1 - (tokens with an
 * unforced byte) / tokens: no jump-forward cuts more passes on these
 * outputs (it can cut fewer: the engine asks only between tokens).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/paths.h"
#include "grammar/grammar.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/unit/test_json_util.h"

typedef struct totals {
    size_t outputs, skipped, bytes, forced, tokens, needed, completion;
} totals;

/* Marks forced[i] for the bytes of text the grammar forces; returns how
 * many bytes the grammar took (the whole text when it is a prefix of the
 * language). */
static size_t mark_forced(grammar *g, grammar_vocab *v, const uint8_t *text, size_t n,
                          uint8_t *forced) {
    grammar_matcher *m = NULL;
    if (tr_grammar_matcher_new(g, v, 0, &m) != TR_OK) return 0;
    uint8_t buf[4096];
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &k);
        size_t j = 0;
        while (j < k && i + j < n && buf[j] == text[i + j]) j++;
        size_t take = j ? j : 1;
        if (tr_grammar_matcher_accept_bytes(m, text + i, take) != TR_OK) break;
        if (j) memset(forced + i, 1, j);
        i += take;
    }
    tr_grammar_matcher_free(m);
    return i;
}

static void one(const json_t *row, const grammar_json_options *o, const tokenizer *tok,
                grammar_vocab *v, totals *t) {
    const json_t *sc = json_object_get(row, "schema"), *tx = json_object_get(row, "text");
    char *s = sc ? json_dumps(sc, JSON_COMPACT) : NULL;
    const char *text = json_string_value(tx);
    size_t n = json_string_length(tx);
    grammar *g = NULL;
    tr_diag d;
    if (!s || !text || tr_grammar_compile_json_schema(s, strlen(s), o, NULL, &g, &d) != TR_OK) {
        t->skipped++;
        free(s);
        return;
    }
    free(s);
    uint8_t *forced = calloc(n + 1, 1);
    int32_t *ids = NULL;
    size_t nid = 0;
    if (forced && tr_tokenizer_encode(tok, text, n, false, &ids, &nid) == TR_OK) {
        size_t took = mark_forced(g, v, (const uint8_t *)text, n, forced);
        if (took < n) fprintf(stderr, "bench_forced: an output leaves its grammar at byte %zu\n", took);
        size_t at = 0;
        for (size_t k = 0; k < nid; k++) {
            size_t len = 0;
            tr_tokenizer_token_bytes(tok, ids[k], &len);
            bool need = false;
            for (size_t b = at; b < at + len && b < n; b++) need |= !forced[b];
            t->needed += need;
            at += len;
        }
        for (size_t b = 0; b < n; b++) t->forced += forced[b];
        t->bytes += n;
        t->tokens += nid;
        t->completion += (size_t)json_integer_value(json_object_get(row, "completion_tokens"));
        t->outputs++;
    } else
        t->skipped++;
    free(ids);
    free(forced);
    tr_grammar_free(g);
}

int main(int argc, char **argv) {
    const char *file = NULL, *model = NULL, *ws = "compact";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--whitespace") && i + 1 < argc)
            ws = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc)
            model = argv[++i];
        else if (argv[i][0] != '-')
            file = argv[i];
        else {
            fprintf(stderr, "usage: bench_forced OUTPUTS.jsonl [--whitespace compact|flexible|pretty] [-m MODEL]\n");
            return 2;
        }
    }
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.whitespace = !strcmp(ws, "flexible") ? GRAMMAR_JSON_WS_FLEXIBLE
                   : !strcmp(ws, "pretty") ? GRAMMAR_JSON_WS_PRETTY
                                           : GRAMMAR_JSON_WS_COMPACT;
    char path[4096];
    if (!model && tr_default_model_path(path, sizeof path)) model = path;
    gguf_file *f = NULL;
    tokenizer *tok = NULL;
    tr_diag d;
    FILE *in = file ? fopen(file, "r") : NULL;
    grammar_vocab *v = tj_byte_vocab();
    if (!in || !model || !v || tr_gguf_open(model, &f, &d) != TR_OK ||
        tr_tokenizer_from_gguf(f, &tok, &d) != TR_OK) {
        fprintf(stderr, "bench_forced: cannot open %s or the model\n", file ? file : "(no file)");
        return 1;
    }
    totals t = {0};
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        json_error_t je;
        json_t *row = json_loads(line, 0, &je);
        if (row) one(row, &o, tok, v, &t);
        else t.skipped++;
        json_decref(row);
    }
    free(line);
    fclose(in);
    printf("%zu outputs (%zu skipped), %s whitespace: %zu bytes, %zu forced (%.1f%%); "
           "%zu tokens (the server counted %zu), %zu with an unforced byte: jump-forward "
           "can cut at most %.1f%% of the passes\n",
           t.outputs, t.skipped, ws, t.bytes, t.forced,
           t.bytes ? 100.0 * (double)t.forced / (double)t.bytes : 0.0, t.tokens, t.completion,
           t.needed, t.tokens ? 100.0 * (1.0 - (double)t.needed / (double)t.tokens) : 0.0);
    tr_tokenizer_free(tok);
    tr_gguf_close(f);
    tr_grammar_vocab_free(v);
    return 0;
}
