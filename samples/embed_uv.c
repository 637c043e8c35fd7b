/* embed_uv.c — Trellis inside a libuv event loop, the way a server embeds
 * it: the engine's wake-up callback (which runs on the engine thread) only
 * calls uv_async_send; the loop thread then drains every queued event with
 * trellis_poll. Nothing blocks the loop, and no engine call runs in the
 * callback.
 *
 *   sample_embed_uv [MODEL.gguf]
 *
 * Submits three streamed chat questions at once plus a long story that a
 * uv_timer cancels after 300 ms, prints each answer as it completes (the
 * streamed pieces concatenated), then how many wake-ups and drains it took.
 *
 * Shutdown order matters: the engine is freed (its thread joined, so wake
 * can no longer run) before the async handle is closed.
 */
/* uv.h needs the POSIX thread types (pthread_rwlock_t) that -std=c11 hides */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <trellis.h>

enum { N_REQ = 4 };

typedef struct answer {
    const char *question;
    uint64_t id;
    char *text; /* the DELTA and DONE texts, concatenated */
    size_t len;
    int deltas;
} answer;

typedef struct app {
    uv_loop_t *loop;
    uv_async_t wake_up;
    uv_timer_t cancel_timer;
    trellis_engine *engine;
    answer answers[N_REQ];
    int pending;       /* requests without their last DONE yet */
    uint64_t wakes;    /* wake callbacks (engine thread) */
    uint64_t drains;   /* async callbacks (loop thread): libuv coalesces
                          sends made before the loop gets to run it */
    int failed;
} app;

/* Engine thread: the only thing it may do is poke the loop. */
static void on_engine_wake(void *user) {
    app *a = user;
    __atomic_add_fetch(&a->wakes, 1, __ATOMIC_RELAXED);
    uv_async_send(&a->wake_up);
}

static void append(answer *ans, const trellis_event *ev) {
    char *grown = realloc(ans->text, ans->len + ev->text_len + 1);
    if (!grown) return; /* a sample: keep what we have */
    memcpy(grown + ans->len, ev->text, ev->text_len);
    ans->len += ev->text_len;
    grown[ans->len] = '\0';
    ans->text = grown;
}

static void shut_down(app *a) {
    trellis_engine_free(a->engine); /* joins the engine thread: no more wakes */
    a->engine = NULL;
    uv_close((uv_handle_t *)&a->wake_up, NULL);
    uv_close((uv_handle_t *)&a->cancel_timer, NULL);
}

/* Loop thread: take everything queued so far. */
static void on_wake_up(uv_async_t *h) {
    app *a = h->data;
    a->drains++;
    trellis_event *ev;
    while (a->engine && trellis_poll(a->engine, &ev) == 1) {
        answer *ans = ev->user;
        append(ans, ev);
        if (ev->kind == TRELLIS_EVENT_DELTA) ans->deltas++;
        if (ev->kind == TRELLIS_EVENT_DONE) {
            printf("Q: %s\nA: %s\n   [%s; %d tokens in %d pieces; TTFT %.0f ms]\n\n",
                   ans->question, ans->text ? ans->text : "",
                   ev->finish == TRELLIS_FINISH_ERROR ? ev->error
                                                      : trellis_finish_name(ev->finish),
                   ev->metrics.completion_tokens, ans->deltas + 1, ev->metrics.ttft_ms);
            if (ev->finish == TRELLIS_FINISH_ERROR) a->failed = 1;
            if (ev->request_done) a->pending--;
        }
        trellis_event_free(ev);
    }
    if (a->engine && a->pending == 0) shut_down(a);
}

static void on_cancel_timer(uv_timer_t *t) {
    app *a = t->data;
    if (a->engine) trellis_cancel(a->engine, a->answers[N_REQ - 1].id);
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : NULL; /* NULL: default model */
    static const char *questions[N_REQ] = {
        "What is a radix tree? Answer in one sentence.",
        "Name three primary colors.",
        "What does a compiler do? Answer briefly.",
        "Write a very long story about a lighthouse keeper.",
    };
    app a = {.loop = uv_default_loop(), .pending = N_REQ};
    uv_async_init(a.loop, &a.wake_up, on_wake_up);
    uv_timer_init(a.loop, &a.cancel_timer);
    a.wake_up.data = a.cancel_timer.data = &a;

    trellis_engine_options opt;
    trellis_engine_options_default(&opt);
    opt.threads = 2;
    opt.kv_mb = 128;
    opt.wake = on_engine_wake; /* set before the engine starts */
    opt.wake_user = &a;
    char err[512];
    if (trellis_engine_new(model, &opt, &a.engine, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "sample_embed_uv: %s\n", err);
        return 1;
    }
    for (int i = 0; i < N_REQ; i++) {
        answer *ans = &a.answers[i];
        ans->question = questions[i];
        trellis_message msg = {"user", questions[i]};
        trellis_request req;
        trellis_request_default(&req);
        req.messages = &msg;
        req.n_messages = 1;
        req.temperature = 0; /* greedy */
        req.max_tokens = i == N_REQ - 1 ? 2000 : 64;
        req.stream = true;
        req.user = ans;
        if (trellis_submit(a.engine, &req, &ans->id, err, sizeof err) != TRELLIS_OK) {
            fprintf(stderr, "sample_embed_uv: %s\n", err);
            a.pending--; /* never queued: no events will come for it */
            a.failed = 1;
        }
    }
    if (a.pending == 0) shut_down(&a);
    else {
        uv_update_time(a.loop); /* the loop's clock still reads the time before loading */
        uv_timer_start(&a.cancel_timer, on_cancel_timer, 300, 0);
    }

    uv_run(a.loop, UV_RUN_DEFAULT); /* returns once both handles are closed */

    printf("%" PRIu64 " wake-ups from the engine, drained in %" PRIu64 " loop callbacks\n",
           a.wakes, a.drains);
    for (int i = 0; i < N_REQ; i++) free(a.answers[i].text);
    uv_loop_close(a.loop);
    return a.failed;
}
