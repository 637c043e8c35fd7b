/* http.c — see http_internal.h for the contract.
 *
 * A connection's life:
 *
 *   accept -> IDLE --first byte--> READING --complete--> HANDLING --response
 *              ^                    (read timer)         (parser paused)  |
 *              +---------------- keep-alive --------------------------------+
 *   any state --limit / error / EOF / drain--> CLOSING (shutdown, linger) -> freed
 *
 * One uv_timer per connection serves every deadline of the state it is in
 * (idle, read, write progress, linger). Handles are freed only after both
 * close callbacks have run (libuv's rule); the connection counts them.
 */
#include "app/server/http_internal.h"

#include <http_parser.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "app/server/sbuf_internal.h"

enum { C_IDLE, C_READING, C_HANDLING, C_CLOSING };
enum { T_NONE, T_IDLE, T_READ, T_WRITE, T_LINGER, T_ABORT };
enum { H_NONE, H_AUTH, H_CTYPE, H_REQID, H_EXPECT };

#define LINGER_MS 2000u
#define CAPTURE_MAX 4096u /* bytes kept of one captured header value */

struct tr_http_conn {
    tr_http_server *srv;
    tr_http_conn *prev, *next;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shutdown;
    int handles_open;
    int state;
    int timer_mode;
    http_parser parser;

    /* the request being read */
    tr_sbuf url, body, hname, auth, ctype, reqid;
    size_t header_bytes;
    int capture;
    bool in_value;
    bool hname_long;
    bool expect_continue;
    int err_status; /* set by a callback that refused the request */
    tr_http_request req;

    tr_sbuf pending; /* bytes read but not parsed yet (pipelining) */
    size_t pending_off;
    bool reading;
    bool dispatching;  /* inside the handler, called from the parser */
    bool in_request;   /* a request is being handled */
    bool streaming;
    bool close_after;  /* close once the response is out */
    bool gone_fired;
    bool aborting;
    void *ctx;
};

struct tr_http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    bool listening;
    bool draining, closing;
    tr_http_limits lim;
    tr_http_handler_fn handler;
    tr_http_gone_fn gone;
    void *app;
    tr_http_conn *conns;
    int32_t n_conns;
    int port;
    tr_http_stats st;
    http_parser_settings settings;
    bool read_buf_busy;
    char read_buf[64 * 1024];
};

void tr_http_limits_default(tr_http_limits *l) {
    l->max_url = 8 * 1024;
    l->max_header = 16 * 1024;
    l->max_body = 8 * 1024 * 1024;
    l->max_pipeline = 1024 * 1024;
    l->max_write_queue = 8 * 1024 * 1024;
    l->read_timeout_ms = 30000;
    l->idle_timeout_ms = 60000;
    l->write_timeout_ms = 60000;
    l->max_connections = 1024;
}

const char *tr_http_status_text(int s) {
    switch (s) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* ---- closing ---- */

static void maybe_free_server(tr_http_server *s) {
    if (s->closing && !s->listening && s->n_conns == 0) free(s);
}

static void on_handle_closed(uv_handle_t *h) {
    tr_http_conn *c = h->data;
    if (--c->handles_open > 0) return;
    tr_http_server *s = c->srv;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    s->st.connections_open = (uint64_t)s->n_conns;
    tr_sbuf *bufs[] = {&c->url, &c->body, &c->hname, &c->auth, &c->ctype, &c->reqid, &c->pending};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) tr_sbuf_reset(bufs[i]);
    free(c);
    maybe_free_server(s);
}

static void fire_gone(tr_http_conn *c) {
    if (c->ctx && !c->gone_fired) {
        c->gone_fired = true;
        void *ctx = c->ctx;
        c->ctx = NULL;
        c->srv->gone(c->srv->app, ctx);
    }
}

/* Closes at once: pending writes are cancelled (their callbacks free
 * them). The request in progress, if any, is told. */
static void close_now(tr_http_conn *c) {
    if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
    c->state = C_CLOSING;
    c->in_request = false;
    fire_gone(c);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void arm(tr_http_conn *c, int mode, uint64_t ms);

static void on_shutdown(uv_shutdown_t *req, int status) {
    tr_http_conn *c = req->data;
    /* not reading: the client's EOF came already, nothing can be unread,
     * and lingering would only hold a --max-connections slot */
    if (status != 0 || uv_is_closing((uv_handle_t *)&c->tcp) || !c->reading) {
        close_now(c);
        return;
    }
    /* linger: read and drop what the client still sends, so that closing
     * with unread bytes does not reset the connection before it has read
     * our response */
    arm(c, T_LINGER, LINGER_MS);
}

/* Closes after the queued response bytes are out. */
static void close_gracefully(tr_http_conn *c) {
    if (c->state == C_CLOSING) return;
    c->state = C_CLOSING;
    c->in_request = false;
    fire_gone(c);
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0) close_now(c);
    else arm(c, T_LINGER, LINGER_MS + c->srv->lim.write_timeout_ms);
}

/* ---- timers ---- */

static void respond_error_and_close(tr_http_conn *c, int status, const char *msg);

static void on_timer(uv_timer_t *t) {
    tr_http_conn *c = t->data;
    switch (c->timer_mode) {
    case T_IDLE: close_gracefully(c); break;
    case T_READ:
        c->srv->st.protocol_errors++;
        respond_error_and_close(c, 408, "the request did not arrive in time");
        break;
    case T_WRITE:
        if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > 0) close_now(c);
        break;
    case T_LINGER:
    case T_ABORT: close_now(c); break;
    }
}

static void arm(tr_http_conn *c, int mode, uint64_t ms) {
    if (uv_is_closing((uv_handle_t *)&c->timer)) return;
    if (c->aborting && mode != T_ABORT) return; /* the abort comes first */
    c->timer_mode = mode;
    if (mode == T_NONE) uv_timer_stop(&c->timer);
    else uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* ---- writing ---- */

typedef struct wreq {
    uv_write_t req;
    tr_http_conn *c;
    size_t len;
    char data[];
} wreq;

static void on_write(uv_write_t *w, int status) {
    wreq *wr = (wreq *)w;
    tr_http_conn *c = wr->c;
    free(wr);
    if (status != 0) {
        if (status != UV_ECANCELED) close_now(c);
        return;
    }
    if (c->state == C_HANDLING && c->timer_mode == T_WRITE) {
        if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > 0)
            arm(c, T_WRITE, c->srv->lim.write_timeout_ms); /* progress: restart */
        else arm(c, T_NONE, 0);
    }
}

/* Queues bytes; on failure the connection is aborted from the loop (a
 * zero timer), never from inside the caller. */
static int conn_write(tr_http_conn *c, const char *data, size_t len) {
    if (c->state == C_CLOSING || c->aborting) return -1;
    uv_stream_t *st = (uv_stream_t *)&c->tcp;
    size_t queued = uv_stream_get_write_queue_size(st);
    if (queued == 0) {
        uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
        int n = uv_try_write(st, &b, 1);
        if (n == (int)len) return 0;
        if (n > 0) {
            data += n;
            len -= (size_t)n;
        } else if (n != UV_EAGAIN && n != UV_ENOSYS) {
            goto fail;
        }
    }
    if (queued + len > c->srv->lim.max_write_queue) goto fail; /* not reading */
    wreq *wr = malloc(sizeof *wr + len);
    if (!wr) goto fail;
    wr->c = c;
    wr->len = len;
    memcpy(wr->data, data, len);
    uv_buf_t b = uv_buf_init(wr->data, (unsigned)len);
    if (uv_write(&wr->req, st, &b, 1, on_write) != 0) {
        free(wr);
        goto fail;
    }
    if (c->state == C_HANDLING && c->timer_mode != T_WRITE)
        arm(c, T_WRITE, c->srv->lim.write_timeout_ms);
    return 0;
fail:
    c->aborting = true;
    arm(c, T_ABORT, 0);
    return -1;
}

static int head_lines(tr_sbuf *b, int status, const char *ctype, const char *extra,
                      bool close) {
    int rc = tr_sbuf_printf(b, "HTTP/1.1 %d %s\r\n", status, tr_http_status_text(status));
    if (ctype) rc |= tr_sbuf_printf(b, "Content-Type: %s\r\n", ctype);
    if (close) rc |= tr_sbuf_puts(b, "Connection: close\r\n");
    if (extra) rc |= tr_sbuf_puts(b, extra);
    return rc;
}

/* ---- the request in progress ---- */

static void reset_request(tr_http_conn *c) {
    c->url.len = c->body.len = c->hname.len = 0;
    c->auth.len = c->ctype.len = c->reqid.len = 0;
    /* big buffers are not kept between requests */
    if (c->body.cap > 64 * 1024) tr_sbuf_reset(&c->body);
    c->header_bytes = 0;
    c->capture = H_NONE;
    c->in_value = false;
    c->hname_long = false;
    c->expect_continue = false;
    c->err_status = 0;
    c->streaming = false;
    c->gone_fired = false;
    c->ctx = NULL;
}

static void process_pending(tr_http_conn *c);

static void request_finished(tr_http_conn *c) {
    c->in_request = false;
    c->ctx = NULL;
    tr_http_server *s = c->srv;
    if (c->close_after || s->draining || s->closing) {
        close_gracefully(c);
        return;
    }
    c->state = C_IDLE;
    arm(c, T_IDLE, s->lim.idle_timeout_ms);
    if (c->dispatching) return; /* the parser goes on by itself */
    http_parser_pause(&c->parser, 0);
    process_pending(c);
}

void tr_http_set_ctx(tr_http_conn *c, void *ctx) { c->ctx = ctx; }

int tr_http_respond(tr_http_conn *c, int status, const char *ctype, const char *extra,
                    const char *body, size_t len, bool close) {
    if (!c->in_request || c->streaming) return -1;
    if (close) c->close_after = true;
    tr_sbuf b = {0};
    bool head = c->req.method == TR_HTTP_HEAD;
    int rc = head_lines(&b, status, ctype, extra, c->close_after || c->srv->draining);
    rc |= tr_sbuf_printf(&b, "Content-Length: %zu\r\n\r\n", len);
    if (!head && len) rc |= tr_sbuf_append(&b, body, len);
    if (rc == 0) rc = conn_write(c, b.data, b.len);
    tr_sbuf_reset(&b);
    if (rc != 0) {
        c->in_request = false;
        c->ctx = NULL;
        return -1;
    }
    request_finished(c);
    return 0;
}

int tr_http_stream_begin(tr_http_conn *c, int status, const char *ctype, const char *extra) {
    if (!c->in_request || c->streaming) return -1;
    c->streaming = true;
    tr_sbuf b = {0};
    int rc = head_lines(&b, status, ctype, extra, c->close_after || c->srv->draining);
    rc |= tr_sbuf_puts(&b, "Transfer-Encoding: chunked\r\n\r\n");
    if (rc == 0) rc = conn_write(c, b.data, b.len);
    tr_sbuf_reset(&b);
    return rc;
}

int tr_http_stream_write(tr_http_conn *c, const char *data, size_t len) {
    if (!c->in_request || !c->streaming || c->aborting) return -1;
    if (len == 0) return 0; /* an empty chunk would end the body */
    char head[24];
    int hn = snprintf(head, sizeof head, "%zx\r\n", len);
    tr_sbuf b = {0};
    int rc = tr_sbuf_append(&b, head, (size_t)hn);
    rc |= tr_sbuf_append(&b, data, len);
    rc |= tr_sbuf_append(&b, "\r\n", 2);
    if (rc == 0) rc = conn_write(c, b.data, b.len);
    tr_sbuf_reset(&b);
    return rc;
}

int tr_http_stream_end(tr_http_conn *c) {
    if (!c->in_request || !c->streaming) return -1;
    int rc = conn_write(c, "0\r\n\r\n", 5);
    c->streaming = false;
    if (rc != 0) { /* the connection is being aborted; the caller is done */
        c->in_request = false;
        c->ctx = NULL;
        return -1;
    }
    request_finished(c);
    return 0;
}

/* An error this layer finds (framing, limits, time): an OpenAI-style body,
 * then the connection closes. */
static void respond_error_and_close(tr_http_conn *c, int status, const char *msg) {
    if (c->state == C_CLOSING) return;
    fire_gone(c);
    tr_sbuf b = {0};
    int rc = head_lines(&b, status, "application/json", NULL, true);
    tr_sbuf body = {0};
    rc |= tr_sbuf_puts(&body, "{\"error\":{\"message\":\"");
    rc |= tr_sbuf_json_str(&body, msg, strlen(msg));
    rc |= tr_sbuf_printf(&body, "\",\"type\":\"invalid_request_error\",\"param\":null,"
                                "\"code\":%d}}",
                         status);
    rc |= tr_sbuf_printf(&b, "Content-Length: %zu\r\n\r\n", body.len);
    rc |= tr_sbuf_append(&b, body.data, body.len);
    c->state = C_HANDLING; /* so that the write is accepted */
    c->in_request = false;
    if (rc == 0) conn_write(c, b.data, b.len);
    tr_sbuf_reset(&b);
    tr_sbuf_reset(&body);
    close_gracefully(c);
}

/* ---- parser callbacks ---- */

static int on_message_begin(http_parser *p) {
    tr_http_conn *c = p->data;
    reset_request(c);
    c->state = C_READING;
    arm(c, T_READ, c->srv->lim.read_timeout_ms);
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
    tr_http_conn *c = p->data;
    if (c->url.len + n > c->srv->lim.max_url) {
        c->err_status = 414;
        return -1;
    }
    return tr_sbuf_append(&c->url, at, n) ? (c->err_status = 500, -1) : 0;
}

static int count_header(tr_http_conn *c, size_t n) {
    c->header_bytes += n;
    if (c->header_bytes > c->srv->lim.max_header) {
        c->err_status = 431;
        return -1;
    }
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
    tr_http_conn *c = p->data;
    if (count_header(c, n)) return -1;
    if (c->in_value) {
        c->in_value = false;
        c->hname.len = 0;
        c->hname_long = false;
    }
    /* the names we capture are short; a longer one is simply not kept */
    if (c->hname_long || c->hname.len + n > 32) {
        c->hname_long = true;
        return 0;
    }
    if (tr_sbuf_append(&c->hname, at, n)) {
        c->err_status = 500;
        return -1;
    }
    return 0;
}

static bool hname_is(const tr_http_conn *c, const char *name) {
    size_t n = strlen(name);
    return !c->hname_long && c->hname.len == n && strncasecmp(c->hname.data, name, n) == 0;
}

static tr_sbuf *capture_buf(tr_http_conn *c) {
    switch (c->capture) {
    case H_AUTH: return &c->auth;
    case H_CTYPE: return &c->ctype;
    case H_REQID: return &c->reqid;
    default: return NULL;
    }
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
    tr_http_conn *c = p->data;
    if (count_header(c, n)) return -1;
    if (!c->in_value) {
        c->in_value = true;
        c->capture = hname_is(c, "authorization")  ? H_AUTH
                     : hname_is(c, "content-type") ? H_CTYPE
                     : hname_is(c, "x-request-id") ? H_REQID
                     : hname_is(c, "expect")       ? H_EXPECT
                                                   : H_NONE;
        if (c->capture == H_EXPECT)
            c->expect_continue = n >= 12 && strncasecmp(at, "100-continue", 12) == 0;
        tr_sbuf *b = capture_buf(c);
        if (b) b->len = 0; /* a repeated header: the last one counts */
    }
    tr_sbuf *b = capture_buf(c);
    if (b && b->len + n <= CAPTURE_MAX && tr_sbuf_append(b, at, n)) {
        c->err_status = 500;
        return -1;
    }
    return 0;
}

static int on_headers_complete(http_parser *p) {
    tr_http_conn *c = p->data;
    tr_http_server *s = c->srv;
    if (p->http_major != 1) {
        c->err_status = 505;
        return -1;
    }
    bool chunked = (p->flags & F_CHUNKED) != 0;
    if (!chunked && p->content_length != ULLONG_MAX && p->content_length > s->lim.max_body) {
        c->err_status = 413;
        return -1;
    }
    if (c->expect_continue) {
        c->state = C_HANDLING;
        const char *cont = "HTTP/1.1 100 Continue\r\n\r\n";
        int rc = conn_write(c, cont, strlen(cont));
        c->state = C_READING;
        if (rc) return -1;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
    tr_http_conn *c = p->data;
    if (c->body.len + n > c->srv->lim.max_body) {
        c->err_status = 413;
        return -1;
    }
    return tr_sbuf_append(&c->body, at, n) ? (c->err_status = 500, -1) : 0;
}

static int method_of(const http_parser *p) {
    switch (p->method) {
    case HTTP_GET: return TR_HTTP_GET;
    case HTTP_POST: return TR_HTTP_POST;
    case HTTP_HEAD: return TR_HTTP_HEAD;
    default: return TR_HTTP_OTHER;
    }
}

static int on_message_complete(http_parser *p) {
    tr_http_conn *c = p->data;
    tr_http_server *s = c->srv;
    arm(c, T_NONE, 0);
    if (tr_sbuf_append(&c->url, "", 0) || tr_sbuf_append(&c->body, "", 0)) {
        c->err_status = 500;
        return -1;
    }
    char *q = strchr(c->url.data, '?');
    if (q) *q++ = '\0';
    tr_http_request *r = &c->req;
    r->method = method_of(p);
    r->method_name = http_method_str((enum http_method)p->method);
    r->path = c->url.data;
    r->query = q ? q : "";
    r->body = c->body.data;
    r->body_len = c->body.len;
    r->authorization = c->auth.len ? c->auth.data : NULL;
    r->content_type = c->ctype.len ? c->ctype.data : NULL;
    r->request_id = c->reqid.len ? c->reqid.data : NULL;
    r->keep_alive = http_should_keep_alive(p) != 0;
    c->close_after = !r->keep_alive;
    c->state = C_HANDLING;
    c->in_request = true;
    s->st.requests_total++;
    c->dispatching = true;
    s->handler(s->app, c, r);
    c->dispatching = false;
    /* still handled (asynchronously), or closing: hold the rest */
    if (c->in_request || c->state == C_CLOSING) http_parser_pause(p, 1);
    return 0;
}

/* Parses data; returns the bytes consumed. On a framing error the
 * connection gets its error response. */
static size_t parse(tr_http_conn *c, const char *data, size_t len) {
    size_t n = http_parser_execute(&c->parser, &c->srv->settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e == HPE_OK || e == HPE_PAUSED) {
        if (c->parser.upgrade && c->state != C_CLOSING) {
            c->srv->st.protocol_errors++;
            respond_error_and_close(c, 400, "protocol upgrades are not supported");
        }
        return n;
    }
    if (c->state == C_CLOSING) return len;
    int status = c->err_status ? c->err_status : e == HPE_HEADER_OVERFLOW ? 431 : 400;
    char msg[160];
    switch (status) {
    case 413:
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %zu bytes",
                 c->srv->lim.max_body);
        break;
    case 414:
        snprintf(msg, sizeof msg, "the request target is longer than the limit of %zu bytes",
                 c->srv->lim.max_url);
        break;
    case 431:
        snprintf(msg, sizeof msg, "the request headers are larger than the limit of %zu bytes",
                 c->srv->lim.max_header);
        break;
    case 500: snprintf(msg, sizeof msg, "out of memory reading the request"); break;
    case 505: snprintf(msg, sizeof msg, "only HTTP/1.0 and HTTP/1.1 are supported"); break;
    default:
        snprintf(msg, sizeof msg, "malformed HTTP request at byte %zu: %s", n,
                 http_errno_description(e));
    }
    c->srv->st.protocol_errors++;
    respond_error_and_close(c, status, msg);
    return len;
}

static void compact_pending(tr_http_conn *c) {
    if (c->pending_off == 0) return;
    size_t rest = c->pending.len - c->pending_off;
    memmove(c->pending.data, c->pending.data + c->pending_off, rest);
    c->pending.len = rest;
    c->pending_off = 0;
    if (rest == 0 && c->pending.cap > 64 * 1024) tr_sbuf_reset(&c->pending);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void process_pending(tr_http_conn *c) {
    while (!c->in_request && c->state != C_CLOSING && c->pending_off < c->pending.len) {
        size_t n = parse(c, c->pending.data + c->pending_off, c->pending.len - c->pending_off);
        c->pending_off += n;
        if (n == 0 && !c->in_request) break;
    }
    if (c->state == C_CLOSING) return;
    compact_pending(c);
    if (!c->reading && c->pending.len <= c->srv->lim.max_pipeline) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
    }
}

static void feed(tr_http_conn *c, const char *data, size_t len) {
    if (!c->in_request && c->pending_off >= c->pending.len) {
        size_t n = parse(c, data, len);
        if (c->state == C_CLOSING || n >= len) return;
        data += n;
        len -= n;
    }
    /* a request is in progress: keep the bytes for later */
    if (tr_sbuf_append(&c->pending, data, len)) {
        c->srv->st.protocol_errors++;
        close_now(c);
        return;
    }
    if (c->pending.len - c->pending_off > c->srv->lim.max_pipeline) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    if (!c->in_request) process_pending(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    tr_http_conn *c = h->data;
    tr_http_server *s = c->srv;
    /* one buffer for the whole loop: each read is consumed before the next */
    if (s->read_buf_busy) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    s->read_buf_busy = true;
    buf->base = s->read_buf;
    buf->len = sizeof s->read_buf;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
    tr_http_conn *c = st->data;
    if (buf->base == c->srv->read_buf) c->srv->read_buf_busy = false;
    if (n == 0) return;
    if (n < 0) {
        /* EOF or an error: the client is gone (or has half-closed: the same
         * to us, see http_internal.h) */
        uv_read_stop(st);
        c->reading = false;
        if (c->state == C_CLOSING || c->in_request) close_now(c);
        else close_gracefully(c);
        return;
    }
    if (c->state == C_CLOSING) return; /* lingering: drop */
    feed(c, buf->base, (size_t)n);
}

/* ---- accepting ---- */

static void on_connection(uv_stream_t *ls, int status) {
    tr_http_server *s = ls->data;
    if (status != 0) return;
    tr_http_conn *c = calloc(1, sizeof *c);
    if (!c) return; /* the connection waits in the backlog */
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles_open = 2;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    s->st.connections_total++;
    s->st.connections_open = (uint64_t)s->n_conns;
    c->body.limit = s->lim.max_body;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
        close_now(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (s->n_conns > s->lim.max_connections || s->draining) {
        s->st.rejected_connections++;
        c->state = C_HANDLING;
        const char *msg = s->draining ? "the server is shutting down"
                                      : "too many connections";
        respond_error_and_close(c, 503, msg);
        /* read (and drop) its request while the answer goes out, so that its
         * EOF frees the slot and unread bytes cannot reset the connection */
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        close_now(c);
        return;
    }
    c->reading = true;
    c->state = C_IDLE;
    arm(c, T_IDLE, s->lim.idle_timeout_ms);
}

static void on_listener_closed(uv_handle_t *h) {
    tr_http_server *s = h->data;
    s->listening = false;
    maybe_free_server(s);
}

int tr_http_server_new(uv_loop_t *loop, const char *host, int port,
                       const tr_http_limits *limits, tr_http_handler_fn handler,
                       tr_http_gone_fn gone, void *app, tr_http_server **out,
                       char *err, size_t cap) {
    struct sockaddr_storage addr;
    if (strcmp(host, "localhost") == 0) host = "127.0.0.1";
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) != 0) {
        snprintf(err, cap, "--host %s is not an IPv4 or IPv6 address", host);
        return -1;
    }
    tr_http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    s->loop = loop;
    s->lim = *limits;
    s->handler = handler;
    s->gone = gone;
    s->app = app;
    s->settings.on_message_begin = on_message_begin;
    s->settings.on_url = on_url;
    s->settings.on_header_field = on_header_field;
    s->settings.on_header_value = on_header_value;
    s->settings.on_headers_complete = on_headers_complete;
    s->settings.on_body = on_body;
    s->settings.on_message_complete = on_message_complete;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listening = true;
    int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc != 0) {
        snprintf(err, cap, "cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        s->closing = true;
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
        return -1;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &blen);
    s->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                          : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    *out = s;
    return 0;
}

int tr_http_server_port(const tr_http_server *s) { return s->port; }

static void stop_listening(tr_http_server *s) {
    if (s->listening && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

void tr_http_server_drain(tr_http_server *s) {
    s->draining = true;
    stop_listening(s);
    for (tr_http_conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (c->state == C_IDLE) close_gracefully(c);
        else c->close_after = true;
    }
}

void tr_http_server_close(tr_http_server *s) {
    s->closing = true;
    s->draining = true;
    stop_listening(s);
    for (tr_http_conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        close_now(c);
    }
    maybe_free_server(s);
}

int32_t tr_http_server_open_connections(const tr_http_server *s) { return s->n_conns; }

void tr_http_server_stats(const tr_http_server *s, tr_http_stats *out) { *out = s->st; }
