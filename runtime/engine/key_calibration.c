/* key_calibration.c — the fixed text a model's Q4 keys are centered on
 * (runtime/model/kv_center.c). See engine_compute_internal.h,
 * tr_engine_calibrate_keys.
 *
 * The text is this project's own, written for the purpose: a mix of the
 * kinds of input the engine serves (prose, a chat turn, JSON, code, a list)
 * so that the keys' mean is not that of one register. Changing it changes
 * the stored bytes of Q4 keys: the page fingerprint follows the
 * calibration itself (tr_model_kv_fingerprint), so old disk-tier pages
 * are simply not found again.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "runtime/engine/engine_compute_internal.h"

static const char k_calibration_text[] =
    "The river runs past the old mill and under the stone bridge, where the "
    "children stop each morning to count the boats. In winter the water "
    "rises, and the miller's daughter writes down how high it comes.\n"
    "User: Can you list three things to pack for a two-day hike?\n"
    "Assistant: Sure. Bring water, a warm layer, and a map of the trail.\n"
    "{\"name\": \"Ada Park\", \"age\": 41, \"city\": \"Lyon\", \"tags\": "
    "[\"engineer\", \"climber\"], \"active\": true}\n"
    "def mean(values):\n    return sum(values) / len(values)\n"
    "1. Preheat the oven to 200 degrees.\n2. Mix the flour, salt and butter.\n"
    "3. Bake for twenty-five minutes, until the crust is golden.\n"
    "Question: What is the capital of Portugal? Answer: Lisbon.\n";

tr_status tr_engine_calibrate_keys(model *m, const tokenizer *tok, tr_kv_type k,
                                char *err, size_t err_cap) {
    if (k != TR_KV_Q4) return TR_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    tr_status s = tr_tokenizer_encode(tok, k_calibration_text,
                                      strlen(k_calibration_text), false, &ids, &n);
    if (s != TR_OK)
        return tr_errf(err, err_cap, s, "cannot tokenize the Q4 key calibration text");
    int32_t bos = tr_tokenizer_bos(tok);
    bool with_bos = tr_tokenizer_add_bos(tok) && bos >= 0;
    int32_t *all = malloc(sizeof(int32_t) * (n + 1));
    if (!all) {
        free(ids);
        return tr_errf(err, err_cap, TR_ERR_NOMEM, "cannot tokenize the Q4 key calibration text");
    }
    if (with_bos) all[0] = bos;
    memcpy(all + with_bos, ids, sizeof(int32_t) * n);
    free(ids);
    tr_diag d = {0};
    uint64_t t0 = tr_now_ns();
    s = tr_model_calibrate_q4_keys(m, all, (int32_t)(n + with_bos), &d);
    free(all);
    if (s != TR_OK)
        return tr_errf(err, err_cap, s, "cannot calibrate the Q4 keys: %s",
                       d.message[0] ? d.message : tr_status_message(s));
    if (tr_model_kv_fingerprint(m))
        tr_log(TR_LOG_INFO, "Q4 keys calibrated on %zu tokens in %.0f ms", n + with_bos,
               (double)(tr_now_ns() - t0) / 1e6);
    return TR_OK;
}
