/* backend.c — what every backend shares: request defaults, result
 * cleanup, and the regex a list of choices becomes for servers and
 * engines that take a regex but no choice list. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/backend_internal.h"

void tr_dsl_gen_req_default(tr_dsl_gen_req *r) {
    memset(r, 0, sizeof *r);
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->repetition_penalty = 1.0f;
    r->max_tokens = 128;
}

void tr_dsl_gen_out_deinit(tr_dsl_gen_out *o) {
    free(o->text);
    o->text = NULL;
    o->len = 0;
    free(o->prompt_logprobs);
    o->prompt_logprobs = NULL;
    o->n_prompt_logprobs = 0;
}

char *tr_dsl_choices_regex(const char *const *choices, int32_t n) {
    size_t cap = 16;
    for (int32_t i = 0; i < n; i++) cap += 4 * strlen(choices[i]) + 1;
    char *re = malloc(cap), *w = re;
    if (!re) return NULL;
    w += sprintf(w, "(?:");
    for (int32_t i = 0; i < n; i++) {
        if (i) *w++ = '|';
        for (const unsigned char *c = (const unsigned char *)choices[i]; *c; c++) {
            if ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
                (*c >= 'A' && *c <= 'Z') || *c >= 0x80 || *c == ' ' || *c == '_') {
                *w++ = (char)*c;
            } else if (*c >= 0x21 && *c < 0x7f) {
                *w++ = '\\';
                *w++ = (char)*c;
            } else {
                w += sprintf(w, "\\x%02X", *c);
            }
        }
    }
    *w++ = ')';
    *w = 0;
    return re;
}
