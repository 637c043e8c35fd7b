/* http_internal.h — HTTP/1.1 connections for the server: a libuv TCP listener,
 * http-parser on every connection, requests assembled under limits, and
 * responses written whole or streamed (chunked transfer encoding).
 *
 * Layering: app/server, above sbuf; knows nothing of the engine, JSON
 * or routes: it hands each complete request to one handler.
 *
 * Threads: everything runs on the loop thread.
 *
 * One request at a time per connection. A complete request is handed to
 * the handler; until its response is finished (tr_http_respond, or
 * tr_http_stream_end) the parser is paused, so pipelined requests wait in
 * the connection's buffer (bounded: past it, reading stops) and responses
 * leave in request order. Reading goes on meanwhile, so a client that goes
 * away is noticed at once: the `gone` callback fires for the request in
 * progress (its ctx), exactly once, and the connection is freed after its
 * handles close. An end of stream (the client shut its side: a full close
 * or a half-close, which TCP cannot tell apart) while a request is in
 * progress counts as gone, as in uvicorn (SGLang's server); requests
 * already complete in the buffer at that point are not started.
 *
 * Limits (all checked before any memory is committed to the request):
 * URL bytes (414), header bytes (431), body bytes (413; checked against
 * Content-Length before the body is read, and while a chunked body
 * arrives), read time of one request from its first byte (408: a client
 * trickling a byte a second cannot hold a connection), idle keep-alive
 * time, a write queue that does not drain (the client stopped reading: it
 * is closed as gone), and a connection count (past it, new connections are
 * answered 503 and closed). Malformed bytes get 400. Every one of these
 * closes the connection after its response.
 *
 * Ownership: a tr_http_conn belongs to this module; the handler may keep
 * its pointer until the request's response is finished or `gone` fires.
 */
#ifndef TR_SERVER_HTTP_H
#define TR_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct tr_http_limits {
    size_t max_url;          /* bytes of the request target */
    size_t max_header;       /* bytes of all header names and values */
    size_t max_body;         /* bytes of a body */
    size_t max_pipeline;     /* bytes buffered beyond the request in progress */
    size_t max_write_queue;  /* unsent response bytes before the client counts
                                as stalled */
    uint32_t read_timeout_ms;  /* first byte -> whole request */
    uint32_t idle_timeout_ms;  /* keep-alive wait between requests */
    uint32_t write_timeout_ms; /* a write queue that makes no progress */
    int32_t max_connections;
} tr_http_limits;

void tr_http_limits_default(tr_http_limits *l);

enum { TR_HTTP_GET = 1, TR_HTTP_POST, TR_HTTP_HEAD, TR_HTTP_OTHER };

typedef struct tr_http_request {
    int method;         /* TR_HTTP_* */
    const char *method_name;
    const char *path;   /* the target up to '?', NUL-terminated */
    const char *query;  /* after '?', or "" */
    const char *body;   /* NUL-terminated (body_len bytes before the NUL) */
    size_t body_len;
    const char *authorization; /* the header's value, or NULL */
    const char *content_type;  /* or NULL */
    const char *request_id;    /* X-Request-Id, or NULL */
    bool keep_alive;
} tr_http_request;

typedef struct tr_http_conn tr_http_conn;
typedef struct tr_http_server tr_http_server;

/* Called for each complete request; must lead, now or later, to exactly
 * one tr_http_respond or tr_http_stream_begin ... tr_http_stream_end. */
typedef void (*tr_http_handler_fn)(void *app, tr_http_conn *c, const tr_http_request *r);
/* Called once when the connection of a request in progress with a ctx
 * (tr_http_set_ctx) goes away; c is no longer usable. */
typedef void (*tr_http_gone_fn)(void *app, void *ctx);

typedef struct tr_http_stats {
    uint64_t connections_total, connections_open, requests_total;
    uint64_t rejected_connections; /* over max_connections */
    uint64_t protocol_errors;      /* 400/408/413/414/431 from this layer */
} tr_http_stats;

/* Listens on host:port (an IPv4 or IPv6 literal, or "localhost"). On
 * failure err says why and nothing is left open. */
int tr_http_server_new(uv_loop_t *loop, const char *host, int port,
                       const tr_http_limits *limits, tr_http_handler_fn handler,
                       tr_http_gone_fn gone, void *app, tr_http_server **out,
                       char *err, size_t err_cap);
/* The port actually bound (useful with port 0). */
int tr_http_server_port(const tr_http_server *s);
/* Stops accepting; idle connections are closed, the others after their
 * request in progress (responses then say Connection: close). */
void tr_http_server_drain(tr_http_server *s);
/* Closes every connection (requests in progress get `gone`) and the
 * listener; the object is freed once every handle has closed. */
void tr_http_server_close(tr_http_server *s);
int32_t tr_http_server_open_connections(const tr_http_server *s);
void tr_http_server_stats(const tr_http_server *s, tr_http_stats *out);

void tr_http_set_ctx(tr_http_conn *c, void *ctx);

/* A whole response. extra_headers (may be NULL) are complete lines, each
 * ending in "\r\n". The connection is closed afterwards when the request
 * asked for it, the server is draining, or status >= 400 comes from a
 * framing problem (the caller sets close). */
int tr_http_respond(tr_http_conn *c, int status, const char *content_type,
                    const char *extra_headers, const char *body, size_t len, bool close);
/* Streaming: headers now, then chunks, then the end. A failed write (the
 * client is gone or stalled) closes the connection and fires `gone`
 * (later, from the loop, never inside these calls); the return is then
 * -1 and further calls are no-ops. */
int tr_http_stream_begin(tr_http_conn *c, int status, const char *content_type,
                         const char *extra_headers);
int tr_http_stream_write(tr_http_conn *c, const char *data, size_t len);
int tr_http_stream_end(tr_http_conn *c);

const char *tr_http_status_text(int status);

#endif
