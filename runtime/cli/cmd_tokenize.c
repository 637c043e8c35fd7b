/* cmd_tokenize.c — `trellis tokenize`: the token ids of a text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/util.h"
#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    bool json = false, special = false, help = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model_path, 1, 0, "GGUF file"},
        {"--prompt", "-p", CLI_STR, &prompt, 1, 0, "text to tokenize"},
        {"--file", "-f", CLI_STR, &file, 1, 0, "read the text from a file"},
        {"--special", NULL, CLI_FLAG, &special, 1, 0, "parse special tokens such as <|im_start|>"},
        {"--json", NULL, CLI_FLAG, &json, 1, 0, "print a JSON object"},
    };
    if (!cli_parse("tokenize", "[-m MODEL] (-p TEXT | -f FILE) [--special] [--json]",
                   opts, TR_ARRAY_LEN(opts), argc, argv, &help))
        return 2;
    if (help) return 0;
    if (!!prompt == !!file) {
        fprintf(stderr, "trellis tokenize: give exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    char *text = NULL;
    size_t len;
    if (file) {
        if (tr_read_file(file, &text, &len) != 0) {
            fprintf(stderr, "trellis tokenize: cannot read '%s'\n", file);
            return 1;
        }
    } else {
        text = strdup(prompt);
        len = strlen(prompt);
    }
    cli_loaded L;
    if (!cli_load("tokenize", model_path, GGUF_LOAD_MMAP, false, 1, 1, &L)) {
        free(text);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    tr_status s = tr_tokenizer_encode(L.tok, text, len, special, &ids, &n);
    int rc = 0;
    if (s) {
        cli_report("tokenize", "cannot tokenize", s, NULL);
        rc = 1;
    } else if (json) {
        json_t *o = json_object(), *arr = json_array(), *pieces = json_array();
        for (size_t i = 0; i < n; i++) {
            size_t bl;
            const uint8_t *b = tr_tokenizer_token_bytes(L.tok, ids[i], &bl);
            json_array_append_new(arr, json_integer(ids[i]));
            json_array_append_new(pieces, json_stringn_nocheck((const char *)b, bl));
        }
        json_object_set_new(o, "ids", arr);
        json_object_set_new(o, "pieces", pieces);
        json_object_set_new(o, "count", json_integer((json_int_t)n));
        char *out = json_dumps(o, JSON_COMPACT);
        printf("%s\n", out);
        free(out);
        json_decref(o);
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t bl;
            const uint8_t *b = tr_tokenizer_token_bytes(L.tok, ids[i], &bl);
            printf("%6d  '", ids[i]);
            for (size_t k = 0; k < bl; k++) {
                unsigned char c = b[k];
                if (c == '\n') printf("\\n");
                else if (c == '\t') printf("\\t");
                else if (c < 0x20) printf("\\x%02x", c);
                else putchar(c);
            }
            printf("'\n");
        }
        printf("%zu tokens\n", n);
    }
    free(ids);
    free(text);
    cli_loaded_free(&L);
    return rc;
}
