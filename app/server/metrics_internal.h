/* metrics_internal.h — the server's Prometheus metrics: counters and histograms
 * kept on the loop thread, engine gauges read at scrape time, all written
 * out in the Prometheus text exposition format (version 0.0.4).
 *
 * Layering: app/server; reads trellis_get_stats and
 * trellis_grammar_cache_get_stats through the engine's public API.
 * Threads: loop thread only.
 */
#ifndef TR_SERVER_METRICS_H
#define TR_SERVER_METRICS_H

#include <stdint.h>

#include "app/server/sbuf_internal.h"
#include "trellis.h"

#define TR_HIST_MAX_BUCKETS 16

typedef struct tr_hist {
    int n;                                 /* bucket bounds in use */
    double le[TR_HIST_MAX_BUCKETS];        /* upper bounds, seconds */
    uint64_t count[TR_HIST_MAX_BUCKETS + 1]; /* per bucket (not cumulative);
                                              last: +Inf */
    double sum;
    uint64_t total;
} tr_hist;

void tr_hist_observe(tr_hist *h, double v);

enum { TR_M_CODES = 12 };

typedef struct tr_srv_metrics {
    tr_hist ttft, tpot, e2e, queue;
    uint64_t prompt_tokens, generation_tokens, cached_tokens;
    uint64_t requests_finished[5];   /* by trellis_finish */
    uint64_t http_by_code[TR_M_CODES]; /* see metrics.c's code table */
    uint64_t rejected_queue_full;
    uint64_t constrained_requests;
    uint64_t client_disconnects;
} tr_srv_metrics;

void tr_srv_metrics_init(tr_srv_metrics *m);
void tr_srv_metrics_http(tr_srv_metrics *m, int status);
/* One finished sample. */
void tr_srv_metrics_sample(tr_srv_metrics *m, const trellis_event *done);

typedef struct tr_srv_gauges {
    int32_t in_flight, connections;
    bool ready;
} tr_srv_gauges;

/* The whole exposition; engine may be NULL (loading). */
int tr_srv_metrics_write(const tr_srv_metrics *m, trellis_engine *engine,
                         const tr_srv_gauges *g, tr_sbuf *out);

#endif
