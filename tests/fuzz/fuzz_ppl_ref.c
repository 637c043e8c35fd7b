/* fuzz_ppl_ref.c — libFuzzer target for the reference file of `trellis
 * bench ppl` (app/bench/ppl_ref.h), which the command reads from any
 * path it is given.
 *
 * Checked: no crash or sanitizer report; a refusal says why (a non-empty
 * sentence); a file that parses has the sizes the format promises, and
 * encoding what was parsed gives back the input byte for byte (so the
 * reader and the writer agree on every field).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/bench/ppl_ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_ppl_ref r;
    char why[200] = "";
    if (!tr_ppl_ref_parse(data, size, &r, why, sizeof why)) {
        if (!why[0]) abort();
        return 0;
    }
    uint64_t n = r.h.n_scored;
    if (size != TR_PPL_REF_HEADER + n * TR_PPL_REF_RECORD) abort();
    if (n != (uint64_t)(r.h.ctx - r.h.ctx / 2) * r.h.windows) abort();
    unsigned char *again = malloc(size);
    if (!again) abort();
    tr_ppl_ref_put_head(again, &r.h);
    for (uint64_t i = 0; i < n; i++)
        tr_ppl_ref_put_record(again + TR_PPL_REF_HEADER + i * TR_PPL_REF_RECORD, r.top1[i],
                              r.gap[i]);
    if (memcmp(again, data, size) != 0) abort();
    free(again);
    tr_ppl_ref_free(&r);
    return 0;
}
