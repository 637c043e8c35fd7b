/* server.h — `trellis serve`: an OpenAI-compatible HTTP server (chat and
 * completions, SGLang's native /generate, structured outputs, streaming,
 * metrics, API keys, backpressure) over one Trellis engine.
 *
 * Layering: an application of include/trellis.h (the engine's public API
 * and nothing else of the core) plus base/, libuv, http-parser and
 * jansson. app/cli calls tr_serve_main for the `serve` command.
 *
 * Threads: the libuv loop thread owns sockets, parsing, validation and
 * responses and never computes; tokenization, chat templates and grammar
 * compilation run on libuv's thread pool (one submission job per request);
 * the engine runs on its own threads and wakes the loop with
 * uv_async_send. See app/server/README.md for endpoints, fields,
 * limits, errors and metrics.
 */
#ifndef TR_SERVER_H
#define TR_SERVER_H

/* `trellis serve ARGS...`: parses the flags (usage on error: 2) and runs. */
int tr_serve_main(int argc, char **argv);

#endif
