/* cmd_tokenize.c — `trellis tokenize`: the token ids of a text, with each
 * token's bytes (the model's tokenizer only: no weights are loaded). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "app/common/args.h"
#include "app/cli/cli.h"
#include "app/cli/cli_json_internal.h"

static const char *piece(const void *tok, int32_t id, size_t *len) {
    return (const char *)tr_tokenizer_token_bytes(tok, id, len);
}

int tr_cli_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    bool json = false, special = false, help = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_path, 1, 0, "GGUF file", "the cached default model",
         .meta = "FILE"},
        {"--prompt", "-p", CLI_STR, &prompt, 1, 0, "text to tokenize"},
        {"--file", "-f", CLI_STR, &file, 1, 0, "read the text from a file", .meta = "FILE"},
        {"--special", NULL, CLI_FLAG, &special, 1, 0,
         "parse special tokens such as <|im_start|> in the text", "off"},
        {"--json", NULL, CLI_FLAG, &json, 1, 0,
         "print {\"ids\": [...], \"pieces\": [...], \"count\": N}; a piece is a "
         "string, or an array of byte values when its bytes are not valid UTF-8",
         "off"},
    };
    const cli_cmd c = {.name = "tokenize",
                       .usage = "[-m MODEL] (-p TEXT | -f FILE) [--special] [--json]",
                       .opts = opts, .n_opts = TR_ARRAY_LEN(opts)};
    if (!tr_cli_parse(&c, argc, argv, &help)) return 2;
    if (help) return 0;
    if (!!prompt == !!file) {
        fprintf(stderr, "trellis tokenize: give exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    if (file) {
        if (!tr_cli_read_file("tokenize", "-f", file, &text, &len)) return 1;
    } else {
        len = strlen(prompt);
        text = malloc(len + 1);
        if (!text) return 1;
        memcpy(text, prompt, len + 1);
    }
    cli_vocab v;
    if (!tr_cli_vocab_open("tokenize", model_path, &v)) {
        free(text);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    tr_status s = tr_tokenizer_encode(v.tok, text, len, special, &ids, &n);
    int rc = 0;
    if (s) {
        tr_cli_report("tokenize", "cannot tokenize", s, NULL);
        rc = 1;
    } else if (json) {
        char *out = tr_cli_json_tokenize(ids, n, piece, v.tok);
        if (out) printf("%s\n", out);
        else fprintf(stderr, "trellis tokenize: out of memory\n"), rc = 1;
        free(out);
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t bl;
            const uint8_t *b = tr_tokenizer_token_bytes(v.tok, ids[i], &bl);
            printf("%6d  '", ids[i]);
            tr_cli_print_bytes(stdout, b, bl);
            printf("'\n");
        }
        printf("%zu tokens\n", n);
    }
    free(ids);
    free(text);
    tr_cli_vocab_close(&v);
    return rc;
}
