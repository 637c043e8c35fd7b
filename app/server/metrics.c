/* metrics.c — see metrics_internal.h. Series names follow Prometheus conventions
 * (base units: seconds; counters end in _total). */
#include "app/server/metrics_internal.h"

#include <string.h>

static const int codes[TR_M_CODES] = {200, 400, 401, 404, 405, 408, 413, 429, 500, 503, 0, 0};

static void hist_init(tr_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->le, le, (size_t)n * sizeof *le);
}

void tr_hist_observe(tr_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->total++;
}

void tr_srv_metrics_init(tr_srv_metrics *m) {
    memset(m, 0, sizeof *m);
    static const double lat[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                 1, 2.5, 5, 10, 30, 60};
    static const double tok[] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025,
                                 0.05, 0.1, 0.25, 0.5, 1};
    static const double e2e[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300};
    hist_init(&m->ttft, lat, (int)(sizeof lat / sizeof *lat));
    hist_init(&m->queue, lat, (int)(sizeof lat / sizeof *lat));
    hist_init(&m->tpot, tok, (int)(sizeof tok / sizeof *tok));
    hist_init(&m->e2e, e2e, (int)(sizeof e2e / sizeof *e2e));
}

void tr_srv_metrics_http(tr_srv_metrics *m, int status) {
    for (int i = 0; i < TR_M_CODES; i++)
        if (codes[i] == status) {
            m->http_by_code[i]++;
            return;
        }
    m->http_by_code[TR_M_CODES - 1]++; /* other */
}

void tr_srv_metrics_sample(tr_srv_metrics *m, const trellis_event *ev) {
    const trellis_metrics *x = &ev->metrics;
    if ((unsigned)ev->finish < 5) m->requests_finished[ev->finish]++;
    m->generation_tokens += (uint64_t)(x->completion_tokens > 0 ? x->completion_tokens : 0);
    if (x->completion_tokens > 0) {
        tr_hist_observe(&m->ttft, x->ttft_ms / 1000.0);
        tr_hist_observe(&m->queue, x->queue_ms / 1000.0);
    }
    if (x->completion_tokens > 1) tr_hist_observe(&m->tpot, x->tpot_ms / 1000.0);
    tr_hist_observe(&m->e2e, x->e2e_ms / 1000.0);
}

static int hist_write(tr_sbuf *o, const char *name, const char *help, const tr_hist *h) {
    int rc = tr_sbuf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        rc |= tr_sbuf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i],
                             (unsigned long long)cum);
    }
    cum += h->count[h->n];
    rc |= tr_sbuf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                         (unsigned long long)cum, name, h->sum, name,
                         (unsigned long long)h->total);
    return rc;
}

static int one(tr_sbuf *o, const char *type, const char *name, const char *help, double v) {
    return tr_sbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
                          name, v);
}

int tr_srv_metrics_write(const tr_srv_metrics *m, trellis_engine *e, const tr_srv_gauges *g,
                         tr_sbuf *o) {
    int rc = 0;
    trellis_stats st;
    memset(&st, 0, sizeof st);
    if (e) trellis_get_stats(e, &st);
    rc |= one(o, "gauge", "trellis_ready", "1 once the model is loaded and the engine runs",
              g->ready);
    rc |= one(o, "gauge", "trellis_requests_running", "sequences the engine is running",
              st.running);
    rc |= one(o, "gauge", "trellis_requests_waiting", "sequences waiting for admission",
              st.waiting);
    rc |= one(o, "gauge", "trellis_requests_in_flight",
              "generation requests accepted by the server and not finished", g->in_flight);
    rc |= one(o, "gauge", "trellis_http_connections", "open HTTP connections", g->connections);
    rc |= one(o, "counter", "trellis_prompt_tokens_total", "prompt tokens of finished requests",
              (double)m->prompt_tokens);
    rc |= one(o, "counter", "trellis_cached_prompt_tokens_total",
              "prompt tokens found in the radix cache", (double)m->cached_tokens);
    rc |= one(o, "counter", "trellis_generation_tokens_total", "tokens generated",
              (double)m->generation_tokens);
    rc |= hist_write(o, "trellis_time_to_first_token_seconds", "submit to first token", &m->ttft);
    rc |= hist_write(o, "trellis_time_per_output_token_seconds",
                     "mean time per output token after the first", &m->tpot);
    rc |= hist_write(o, "trellis_e2e_request_latency_seconds", "submit to done", &m->e2e);
    rc |= hist_write(o, "trellis_queue_time_seconds", "submit to first scheduled", &m->queue);
    rc |= tr_sbuf_puts(o, "# HELP trellis_request_finished_total samples finished, by reason\n"
                          "# TYPE trellis_request_finished_total counter\n");
    static const char *reasons[5] = {"none", "stop", "length", "cancelled", "error"};
    for (int i = 1; i < 5; i++)
        rc |= tr_sbuf_printf(o, "trellis_request_finished_total{reason=\"%s\"} %llu\n",
                             reasons[i], (unsigned long long)m->requests_finished[i]);
    rc |= tr_sbuf_puts(o, "# HELP trellis_http_responses_total HTTP responses, by status\n"
                          "# TYPE trellis_http_responses_total counter\n");
    for (int i = 0; i < TR_M_CODES; i++) {
        if (codes[i] == 0 && i != TR_M_CODES - 1) continue;
        if (codes[i])
            rc |= tr_sbuf_printf(o, "trellis_http_responses_total{code=\"%d\"} %llu\n", codes[i],
                                 (unsigned long long)m->http_by_code[i]);
        else
            rc |= tr_sbuf_printf(o, "trellis_http_responses_total{code=\"other\"} %llu\n",
                                 (unsigned long long)m->http_by_code[i]);
    }
    rc |= one(o, "counter", "trellis_requests_rejected_queue_full_total",
              "generation requests answered 429 (--max-queue)", (double)m->rejected_queue_full);
    rc |= one(o, "counter", "trellis_client_disconnects_total",
              "generation requests cancelled because the client went away",
              (double)m->client_disconnects);
    rc |= one(o, "counter", "trellis_constrained_requests_total",
              "generation requests with a grammar constraint", (double)m->constrained_requests);
    rc |= one(o, "gauge", "trellis_radix_cache_hit_rate",
              "cached / prompt tokens of admitted sequences", st.cache_hit_rate);
    rc |= one(o, "gauge", "trellis_kv_pages_total", "KV pages in the pool", st.pages_total);
    rc |= one(o, "gauge", "trellis_kv_pages_used", "KV pages held by running sequences",
              st.pages_used);
    rc |= one(o, "gauge", "trellis_kv_pages_cached", "KV pages held only by the radix cache",
              st.pages_cached);
    rc |= one(o, "gauge", "trellis_kv_pages_free", "KV pages free", st.pages_free);
    rc |= one(o, "counter", "trellis_engine_steps_total", "engine steps", (double)st.steps);
    rc |= one(o, "counter", "trellis_preemptions_total", "sequences preempted",
              (double)st.preemptions);
    rc |= one(o, "gauge", "trellis_generation_tokens_per_second",
              "tokens generated per second over the last second", st.tokens_per_s);
    rc |= one(o, "counter", "trellis_jump_forward_tokens_total",
              "output tokens placed by grammar jump-forward", (double)st.forced_tokens);
    /* Per sequence, not per step: in a batch a row saved is not a step
     * saved (trellis_stats.forward_passes_saved). */
    rc |= one(o, "counter", "trellis_forward_passes_saved_total",
              "sequence forward passes jump-forward and speculation made unnecessary",
              (double)st.forward_passes_saved);
    rc |= one(o, "counter", "trellis_spec_draft_tokens_total",
              "draft tokens proposed by speculative decoding", (double)st.spec_drafted_tokens);
    rc |= one(o, "counter", "trellis_spec_accepted_tokens_total",
              "draft tokens verified and kept", (double)st.spec_accepted_tokens);
    rc |= one(o, "gauge", "trellis_spec_acceptance_rate",
              "kept / proposed draft tokens so far (0 before any)",
              st.spec_drafted_tokens
                  ? (double)st.spec_accepted_tokens / (double)st.spec_drafted_tokens
                  : 0.0);
    rc |= one(o, "counter", "trellis_spec_draft_model_passes_total",
              "forward passes of the draft model (--draft-model)", (double)st.draft_passes);
    rc |= one(o, "counter", "trellis_spec_draft_model_tokens_total",
              "draft tokens the draft model proposed", (double)st.draft_proposed_tokens);
    rc |= one(o, "counter", "trellis_spec_draft_model_seconds_total",
              "seconds the engine waited for the draft model", st.draft_s);
    /* hits by tier: what admission found cached, less what the disk tier
     * had put back first */
    rc |= one(o, "counter", "trellis_kv_memory_hit_tokens_total",
              "prompt tokens found in the memory tier of the radix cache",
              st.cached_prompt_tokens > st.disk_restored_tokens
                  ? (double)(st.cached_prompt_tokens - st.disk_restored_tokens)
                  : 0.0);
    rc |= one(o, "counter", "trellis_kv_window_released_total",
              "windowed KV pages let go as positions left a sliding window",
              (double)st.kv_window_released);
    rc |= one(o, "counter", "trellis_kv_window_stripped_total",
              "cached windowed KV pages freed from prefixes in use when memory ran short",
              (double)st.kv_window_stripped);
    /* the prefix cache's disk tier (all 0 without --kv-cache-dir) */
    rc |= one(o, "gauge", "trellis_kv_disk_pages", "KV pages kept in the disk tier",
              (double)st.disk_records);
    rc |= one(o, "gauge", "trellis_kv_disk_bytes", "bytes of the disk tier's page files",
              (double)st.disk_bytes);
    rc |= one(o, "counter", "trellis_kv_disk_pages_written_total",
              "KV pages written to the disk tier", (double)st.disk_pages_written);
    rc |= one(o, "counter", "trellis_kv_disk_pages_read_total",
              "KV pages read back from the disk tier into the cache", (double)st.disk_pages_read);
    rc |= one(o, "counter", "trellis_kv_disk_reads_total",
              "reads asked of the disk tier (one per prefix, shared by requests waiting on it)",
              (double)st.disk_reads);
    rc |= one(o, "counter", "trellis_kv_disk_hit_tokens_total",
              "prompt tokens the disk tier spared computing", (double)st.disk_restored_tokens);
    rc |= one(o, "counter", "trellis_kv_disk_write_errors_total",
              "disk tier writes that failed (disk full, I/O errors)", (double)st.disk_write_errors);
    rc |= one(o, "counter", "trellis_kv_disk_dropped_writes_total",
              "KV pages not saved because the write queue was full",
              (double)st.disk_dropped_writes);
    rc |= one(o, "counter", "trellis_kv_disk_corrupt_total",
              "disk tier records that failed a check (deleted, recomputed)",
              (double)st.disk_corrupt);
    rc |= one(o, "counter", "trellis_kv_disk_evicted_total",
              "disk tier records deleted by its size bound", (double)st.disk_evicted);
    {
        trellis_grammar_cache_stats gs;
        memset(&gs, 0, sizeof gs);
        if (e) trellis_grammar_cache_get_stats(e, &gs);
        rc |= one(o, "counter", "trellis_grammar_cache_hits_total",
                  "grammar compiles answered from the cache", (double)gs.hits);
        rc |= one(o, "counter", "trellis_grammar_cache_misses_total",
                  "grammar compiles that missed the cache", (double)gs.misses);
        rc |= one(o, "gauge", "trellis_grammar_cache_bytes", "bytes held by cached grammars",
                  (double)gs.bytes);
        rc |= one(o, "counter", "trellis_grammar_masks_reused_total",
                  "token masks taken from a grammar's memo", (double)gs.masks_reused);
        rc |= one(o, "counter", "trellis_grammar_cache_exhausted_total",
                  "grammars recompiled because their automaton reached its state budget",
                  (double)gs.exhausted);
    }
    return rc;
}
