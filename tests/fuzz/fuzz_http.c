/* fuzz_http.c — HTTP request handling: bytes from a client through the
 * server's own connection code (app/server/http.c: http-parser,
 * limits, pipelining, responses) over a real loopback socket, and each
 * complete request's body through the request validator
 * (app/server/validate.c: JSON to a checked generation request).
 *
 * Input: byte 0 picks the path. Even: the rest is what a client sends on
 * one connection (then it half-closes and reads until the server closes).
 * Odd: the rest is a body given straight to the validator for the API
 * (byte 0 >> 1) % 3 (fast: no socket).
 *
 * Invariants checked: no crash, leak or sanitizer report; every
 * connection ends; every request gets one response whose status is one
 * the server documents; a validator failure always fills a 400/413/503
 * error with a message.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app/server/http_internal.h"
#include "app/server/validate_internal.h"

static uv_loop_t loop;
static tr_http_server *server;
static int port;

static void check_validate(tr_srv_api api, const char *body, size_t len) {
    tr_srv_limits lim;
    tr_srv_limits_default(&lim);
    lim.max_input_ids = 4096;
    tr_srv_gen g;
    tr_srv_error e;
    memset(&e, 0, sizeof e);
    if (tr_srv_gen_parse(api, body, len, &lim, &g, &e) != 0) {
        if ((e.status != 400 && e.status != 413 && e.status != 503) || !e.message[0]) abort();
    } else {
        /* a validated request is consistent with itself */
        if (g.req.n < 1 || g.req.n > lim.max_n) abort();
        if (api != TR_API_CHAT && g.n_prompts < 1) abort();
        if (api == TR_API_CHAT && g.req.n_messages < 1) abort();
        /* 0 = prefill only, which chat completions refuse (OpenAI's rule) */
        if (g.req.max_tokens < -1 || (api == TR_API_CHAT && g.req.max_tokens == 0)) abort();
        if (g.req.min_tokens < 0 || (g.req.max_tokens >= 0 && g.req.min_tokens > g.req.max_tokens))
            abort();
        if (g.req.n_stop > TRELLIS_MAX_STOP) abort();
        if (g.req.n_stop_regex < 0 || g.req.n_stop_regex > TRELLIS_MAX_STOP ||
            (g.req.n_stop_regex > 0 && !g.req.stop_regex))
            abort();
        for (int32_t k = 0; k < g.req.n_stop_regex; k++)
            if (!g.req.stop_regex[k] || !g.req.stop_regex[k][0] ||
                strlen(g.req.stop_regex[k]) > TRELLIS_MAX_STOP_LEN)
                abort();
        if (g.con == TR_CON_CHOICE && (g.n_choices < 1 || !g.choices)) abort();
    }
    tr_srv_gen_free(&g);
}

static void handler(void *app, tr_http_conn *c, const tr_http_request *r) {
    (void)app;
    tr_srv_api api = strcmp(r->path, "/v1/chat/completions") == 0 ? TR_API_CHAT
                     : strcmp(r->path, "/v1/completions") == 0    ? TR_API_COMPLETION
                                                                  : TR_API_GENERATE;
    if (r->method == TR_HTTP_POST) check_validate(api, r->body, r->body_len);
    if (strlen(r->body) > r->body_len) abort();
    /* alternate plain and streamed answers to cover both writers */
    if (r->body_len & 1) {
        tr_http_stream_begin(c, 200, "text/event-stream", NULL);
        tr_http_stream_write(c, "data: x\n\n", 9);
        tr_http_stream_end(c);
    } else {
        tr_http_respond(c, 200, "text/plain", NULL, r->path, strlen(r->path), false);
    }
}

static void gone(void *app, void *ctx) {
    (void)app;
    (void)ctx;
}

static void init(void) {
    uv_loop_init(&loop);
    tr_http_limits lim;
    tr_http_limits_default(&lim);
    lim.max_body = 64 * 1024;
    lim.max_header = 4096;
    lim.max_url = 1024;
    lim.read_timeout_ms = 2000;
    char err[256];
    if (tr_http_server_new(&loop, "127.0.0.1", 0, &lim, handler, gone, NULL, &server, err,
                           sizeof err) != 0) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        abort();
    }
    port = tr_http_server_port(server);
}

static void over_socket(const uint8_t *data, size_t size) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) abort();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) abort();
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t sent = 0;
    bool eof = false, shut = false;
    char buf[65536];
    uint64_t t0 = uv_hrtime();
    while (!eof) {
        if (sent < size) {
            ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
            if (n > 0) sent += (size_t)n;
            else if (n < 0 && errno != EAGAIN) sent = size; /* reset: stop sending */
        } else if (!shut) {
            shutdown(fd, SHUT_WR);
            shut = true;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
        if (uv_hrtime() - t0 > 10ull * 1000000000ull) abort(); /* a connection that never ends */
    }
    close(fd);
    /* let the server side finish closing the connection */
    for (int i = 0; i < 100 && tr_http_server_open_connections(server) > 0; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!server) init();
    if (size == 0) return 0;
    if (data[0] & 1) {
        check_validate((tr_srv_api)(1 + (data[0] >> 1) % 3), (const char *)data + 1, size - 1);
        return 0;
    }
    if (size > 256 * 1024) return 0;
    over_socket(data + 1, size - 1);
    return 0;
}
