/* embed.c — embedding Trellis through its C API (include/trellis.h).
 *
 *   sample_embed [MODEL.gguf] ["question"]
 *
 * Starts an engine, streams one chat answer to stdout, then asks for three
 * samples at once that must match a regex (they fork from one prefilled
 * prompt), and prints the engine's statistics. A real program would drain
 * events from its event loop after the engine's wake-up callback instead
 * of blocking in trellis_wait.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <trellis.h>

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : NULL; /* NULL: default model */
    const char *question = argc > 2 ? argv[2] : "What is a radix tree? Answer briefly.";

    trellis_engine_options opt;
    trellis_engine_options_default(&opt);
    opt.threads = 2;
    opt.kv_mb = 128;
    trellis_engine *e;
    char err[512];
    if (trellis_engine_new(model, &opt, &e, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "sample_embed: %s\n", err);
        return 1;
    }

    /* 1. one streamed chat answer */
    trellis_message msgs[] = {{"user", question}};
    trellis_request req;
    trellis_request_default(&req);
    req.messages = msgs;
    req.n_messages = 1;
    req.temperature = 0; /* greedy */
    req.max_tokens = 96;
    req.stream = true;
    uint64_t id;
    if (trellis_submit(e, &req, &id, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "sample_embed: %s\n", err);
        trellis_engine_free(e);
        return 1;
    }
    printf("Q: %s\nA: ", question);
    for (;;) {
        trellis_event *ev;
        trellis_wait(e, -1, &ev);
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        if (ev->kind == TRELLIS_EVENT_DONE) {
            printf("\n[%s; %d prompt tokens, %d generated; TTFT %.0f ms, %.1f ms/token]\n\n",
                   trellis_finish_name(ev->finish), ev->metrics.prompt_tokens,
                   ev->metrics.completion_tokens, ev->metrics.ttft_ms,
                   ev->metrics.tpot_ms);
            trellis_event_free(ev);
            break;
        }
        trellis_event_free(ev);
    }

    /* 2. three constrained samples forked from one prompt */
    trellis_message msgs2[] = {{"user", "Give me a time of day."}};
    trellis_request_default(&req);
    req.messages = msgs2;
    req.n_messages = 1;
    req.n = 3;
    req.seed = 7;
    req.temperature = 0.8f;
    req.regex = "([01][0-9]|2[0-3]):[0-5][0-9]";
    req.max_tokens = 16;
    if (trellis_submit(e, &req, &id, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "sample_embed: %s\n", err);
        trellis_engine_free(e);
        return 1;
    }
    for (bool done = false; !done;) {
        trellis_event *ev;
        trellis_wait(e, -1, &ev);
        if (ev->kind == TRELLIS_EVENT_DONE) {
            printf("sample %d: %s (%s)\n", ev->index, ev->text,
                   ev->finish == TRELLIS_FINISH_ERROR ? ev->error
                                                      : trellis_finish_name(ev->finish));
            done = ev->request_done;
        }
        trellis_event_free(ev);
    }

    trellis_stats st;
    trellis_get_stats(e, &st);
    printf("\nengine: %" PRIu64 " steps, %" PRIu64 " prompt tokens computed, "
           "%" PRIu64 " cached, %" PRIu64 " generated; pages used %d, cached %d, "
           "free %d of %d\n",
           st.steps, st.prefill_tokens, st.cached_prompt_tokens,
           st.generated_tokens, st.pages_used, st.pages_cached, st.pages_free,
           st.pages_total);
    trellis_engine_free(e);
    return 0;
}
