/* serve.c — the server's life: start listening at once (so /health can
 * say 503 while the model loads on the thread pool), run, and on
 * SIGINT/SIGTERM stop accepting, give in-flight requests
 * shutdown_timeout_s to finish, cancel the rest, free the engine and
 * exit 0. A second signal cancels at once.
 *
 * Layering: app/server; loop thread, except the load job (thread
 * pool) and on_engine_wake (engine thread: it only calls uv_async_send).
 *
 * Shutdown order (libuv and trellis.h rules): no submission job may be
 * running when the engine is freed, and the engine (whose thread calls
 * wake) is freed before the async handle closes.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/paths.h"
#include "app/server/server_internal.h"

uint64_t tr_srv_now_ms(void) { return uv_hrtime() / 1000000u; }

void tr_srv_config_default(tr_srv_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    trellis_engine_options_default(&c->engine);
    c->max_queue = 256;
    c->stuck_after_s = 60;
    c->shutdown_timeout_s = 30;
    tr_http_limits_default(&c->http);
    tr_srv_limits_default(&c->limits);
}

/* ---- engine wake-ups ---- */

static void on_engine_wake(void *user) {
    tr_srv *s = user;
    uv_async_send(&s->wake);
}

static void on_wake(uv_async_t *h) { tr_srv_drain_events(h->data); }

/* ---- loading ---- */

static void load_job(uv_work_t *w) {
    tr_srv *s = w->data;
    trellis_engine_options o = s->cfg.engine;
    o.wake = on_engine_wake;
    o.wake_user = s;
    uint64_t t0 = uv_hrtime();
    trellis_engine *e = NULL;
    if (trellis_engine_new(s->cfg.model_path, &o, &e, s->load_error, sizeof s->load_error) ==
        TRELLIS_OK)
        s->engine = e;
    s->load_ms = (uv_hrtime() - t0) / 1000000u;
}

static void stop_loop(tr_srv *s);

static void load_done(uv_work_t *w, int status) {
    tr_srv *s = w->data;
    s->jobs--;
    if (!s->engine) {
        tr_srv_logf(s, 0, "cannot load the model: %s",
                    s->load_error[0] ? s->load_error : "cancelled");
        s->exit_code = 1;
        stop_loop(s);
        return;
    }
    trellis_engine_get_info(s->engine, &s->info);
    if (s->state == SRV_LOADING) s->state = SRV_READY;
    s->last_progress_ms = tr_srv_now_ms();
    tr_srv_logf(s, 2, "model '%s' loaded in %llu ms: context %d, %d KV pages of %d tokens "
                      "and 1/%d of the layers (K %s, V %s, %lld MiB), %d threads, max %d "
                      "running + %d queued; listening on http://%s:%d",
                s->model_id, (unsigned long long)s->load_ms, s->info.n_ctx, s->info.kv_pages,
                s->info.page_size, s->info.kv_units, trellis_kv_type_name(s->info.kv_type_k),
                trellis_kv_type_name(s->info.kv_type_v),
                (long long)(s->info.kv_bytes >> 20), s->info.threads, s->info.max_running,
                s->cfg.max_queue, s->cfg.host, tr_http_server_port(s->http));
    if (s->state != SRV_READY) stop_loop(s); /* a signal came while loading */
    (void)status;
}

/* ---- stopping ---- */

static void on_handle_closed(uv_handle_t *h) { (void)h; }

static void stop_loop(tr_srv *s) {
    s->state = SRV_STOPPING;
    if (s->jobs > 0 || !s->handles_ready) return; /* the tick comes back */
    if (s->http) {
        tr_http_server_close(s->http); /* requests still open get `gone` */
        s->http = NULL;
    }
    tr_srv_cancel_all(s);
    if (s->engine) {
        /* the requests left are cancelled: take their last events so that
         * each is freed (the engine ends cancelled work at its next step) */
        uint64_t t0 = tr_srv_now_ms();
        trellis_event *ev;
        while (s->reqs && tr_srv_now_ms() - t0 < 10000)
            if (trellis_wait(s->engine, 100, &ev) == 1) tr_srv_handle_event(s, ev);
        trellis_engine_free(s->engine);
        s->engine = NULL;
    }
    s->handles_ready = false;
    uv_close((uv_handle_t *)&s->wake, on_handle_closed);
    uv_close((uv_handle_t *)&s->tick, on_handle_closed);
    uv_close((uv_handle_t *)&s->sigint, on_handle_closed);
    uv_close((uv_handle_t *)&s->sigterm, on_handle_closed);
}

static void begin_drain(tr_srv *s) {
    if (s->state == SRV_DRAINING || s->state == SRV_STOPPING) return;
    bool loading = s->state == SRV_LOADING;
    s->state = SRV_DRAINING;
    s->drain_started_ms = tr_srv_now_ms();
    tr_srv_logf(s, 2, "shutting down: %d requests in flight get %u s to finish", s->in_flight,
                s->cfg.shutdown_timeout_s);
    if (s->http) tr_http_server_drain(s->http);
    if (loading) return; /* load_done stops */
}

static void on_signal(uv_signal_t *h, int signum) {
    tr_srv *s = h->data;
    if (s->state == SRV_DRAINING) { /* a second signal: cancel now */
        tr_srv_logf(s, 1, "signal %d again: cancelling %d requests", signum, s->in_flight);
        s->cancelled_all = true;
        if (s->engine) tr_srv_cancel_all(s);
        return;
    }
    begin_drain(s);
}

/* ---- the 1 s tick: progress watch and shutdown deadline ---- */

static void on_tick(uv_timer_t *t) {
    tr_srv *s = t->data;
    uint64_t now = tr_srv_now_ms();
    if (s->engine) {
        trellis_stats st;
        trellis_get_stats(s->engine, &st);
        bool work = st.running + st.waiting > 0 || s->subs_live > 0;
        if (st.steps != s->last_steps || !work) {
            s->last_steps = st.steps;
            s->last_progress_ms = now;
            if (s->stuck) tr_srv_logf(s, 1, "the engine makes progress again");
            s->stuck = false;
        } else if (!s->stuck && now - s->last_progress_ms > (uint64_t)s->cfg.stuck_after_s * 1000) {
            s->stuck = true;
            tr_srv_logf(s, 0, "the engine has finished no step for %u s with %d requests "
                              "submitted: /health answers 503",
                        s->cfg.stuck_after_s, s->subs_live);
        }
    }
    if (s->state == SRV_DRAINING) {
        if (!s->cancelled_all && now - s->drain_started_ms > (uint64_t)s->cfg.shutdown_timeout_s * 1000) {
            tr_srv_logf(s, 1, "shutdown timeout: cancelling %d requests", s->in_flight);
            s->cancelled_all = true;
            if (s->engine) tr_srv_cancel_all(s);
        }
        if (s->in_flight == 0 && s->jobs == 0) stop_loop(s);
    } else if (s->state == SRV_STOPPING) {
        stop_loop(s);
    }
}

/* ---- run ---- */

static void model_name(tr_srv *s) {
    if (s->cfg.served_model_name) {
        snprintf(s->model_id, sizeof s->model_id, "%s", s->cfg.served_model_name);
        return;
    }
    char buf[4096];
    const char *path = s->cfg.model_path ? s->cfg.model_path : tr_default_model_path(buf, sizeof buf);
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path ? path : "model";
    snprintf(s->model_id, sizeof s->model_id, "%s", base);
    size_t n = strlen(s->model_id);
    if (n > 5 && strcmp(s->model_id + n - 5, ".gguf") == 0) s->model_id[n - 5] = '\0';
}

int tr_srv_run(const tr_srv_config *cfg) {
    /* A write to a connection whose client has gone (closed after an error
     * event, say, while the rest of the stream was still being written)
     * must fail with EPIPE on that connection, not kill the server: libuv
     * writes with write(2), which raises SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    tr_srv *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = *cfg;
    s->loop = uv_default_loop();
    s->state = SRV_LOADING;
    s->started_unix = (uint64_t)time(NULL);
    tr_srv_metrics_init(&s->metrics);
    model_name(s);
    char err[512];
    if (tr_http_server_new(s->loop, cfg->host, cfg->port, &cfg->http, tr_srv_on_request,
                           tr_srv_on_gone, s, &s->http, err, sizeof err) != 0) {
        tr_srv_logf(s, 0, "%s", err);
        uv_run(s->loop, UV_RUN_DEFAULT); /* lets the failed listener close */
        free(s);
        return 1;
    }
    if (cfg->port_file) {
        FILE *f = fopen(cfg->port_file, "w");
        if (f) {
            fprintf(f, "%d\n", tr_http_server_port(s->http));
            fclose(f);
        }
    }
    uv_async_init(s->loop, &s->wake, on_wake);
    uv_timer_init(s->loop, &s->tick);
    uv_signal_init(s->loop, &s->sigint);
    uv_signal_init(s->loop, &s->sigterm);
    s->wake.data = s->tick.data = s->sigint.data = s->sigterm.data = s;
    s->handles_ready = true;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_timer_start(&s->tick, on_tick, 1000, 1000);
    tr_srv_logf(s, 2, "listening on http://%s:%d (loading the model)", cfg->host,
                tr_http_server_port(s->http));
    s->load_work.data = s;
    s->jobs++;
    uv_queue_work(s->loop, &s->load_work, load_job, load_done);
    uv_run(s->loop, UV_RUN_DEFAULT);
    int code = s->exit_code;
    if (code == 0) tr_srv_logf(s, 2, "stopped");
    uv_loop_close(s->loop);
    free(s->cfg.api_key);
    free(s);
    return code;
}
