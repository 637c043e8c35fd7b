/* http.h — a small blocking HTTP/1.1 client for the remote backend: one
 * request per connection (Connection: close), plain TCP (no TLS), a
 * connect timeout and an idle timeout (no byte for that long fails the
 * request), the response parsed by http-parser (Content-Length, chunked
 * and close-delimited bodies alike), its body size bounded.
 *
 * Layering: frontend; used by backend_http.c and by app/bench's
 * `trellis bench stream` (a client light enough that the server's own
 * cost shows). Threads: reentrant; each call uses its own socket.
 * Errors: TR_ERR_INVALID_ARG (bad URL), TR_ERR_IO (cannot connect, the
 * connection broke, a malformed response; err says which, with the
 * host and port), TR_ERR_CANCELLED (timed out; err says after how long),
 * TR_ERR_LIMIT (a body over max_body). An HTTP error status is not an
 * error here: the caller reads resp->status.
 */
#ifndef TR_FRONTEND_HTTP_H
#define TR_FRONTEND_HTTP_H

#include <stddef.h>

#include "base/status.h"
#include "frontend/value.h"

typedef struct tr_dsl_url {
    char host[256];
    char port[8];
    char prefix[512]; /* path prefix without a trailing slash ("" for none) */
} tr_dsl_url;

/* http://HOST[:PORT][/PREFIX] (PORT defaults to 80; [v6] hosts allowed). */
tr_status tr_dsl_url_parse(const char *url, tr_dsl_url *out, char *err, size_t cap);

typedef struct tr_dsl_http_response {
    int status;
    tr_dsl_buf body; /* the whole body, unless on_body took it */
} tr_dsl_http_response;

typedef struct tr_dsl_http_request {
    const char *method;  /* "GET", "POST" */
    const char *path;    /* after the URL's prefix: "/generate" */
    const char *api_key; /* bearer token, or NULL */
    const char *body;    /* JSON, or NULL */
    size_t body_len;
    int connect_timeout_ms;
    int timeout_ms;      /* idle: the longest wait for the next byte */
    size_t max_body;
    /* When set, body bytes of a 2xx response go here as they arrive
     * instead of into resp->body; returning false stops the request. */
    bool (*on_body)(void *user, const char *data, size_t len);
    void *user;
} tr_dsl_http_request;

tr_status tr_dsl_http_do(const tr_dsl_url *u, const tr_dsl_http_request *r,
                         tr_dsl_http_response *resp, char *err, size_t cap);

#endif
