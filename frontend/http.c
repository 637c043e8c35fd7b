/* http.c — see http_internal.h. */
#include "frontend/http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>

tr_status tr_dsl_url_parse(const char *url, tr_dsl_url *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    if (strncmp(url, "https://", 8) == 0)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "%s: https is not supported (use http:// to a local `trellis serve`, "
                       "or a TLS proxy)",
                       url);
    if (strncmp(url, "http://", 7) != 0)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "%s: expected a URL like http://127.0.0.1:8080", url);
    const char *h = url + 7, *end;
    if (*h == '[') { /* [v6]:port */
        end = strchr(h, ']');
        if (!end) return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%s: unclosed [", url);
        if ((size_t)(end - h - 1) >= sizeof out->host)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%s: host too long", url);
        memcpy(out->host, h + 1, (size_t)(end - h - 1));
        end++;
    } else {
        end = h + strcspn(h, ":/");
        if ((size_t)(end - h) >= sizeof out->host)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%s: host too long", url);
        memcpy(out->host, h, (size_t)(end - h));
    }
    if (!out->host[0]) return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%s: no host", url);
    strcpy(out->port, "80");
    if (*end == ':') {
        const char *p = end + 1;
        size_t n = strspn(p, "0123456789");
        long port = n && n < 6 ? strtol(p, NULL, 10) : 0;
        if (port < 1 || port > 65535)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%s: bad port", url);
        snprintf(out->port, sizeof out->port, "%ld", port);
        end = p + n;
    }
    if (*end && *end != '/')
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%s: unexpected '%c' after the host", url,
                       *end);
    size_t plen = strlen(end);
    while (plen && end[plen - 1] == '/') plen--;
    if (plen >= sizeof out->prefix)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%s: path too long", url);
    memcpy(out->prefix, end, plen);
    return TR_OK;
}

/* ---- connection ---- */

static tr_status connect_to(const tr_dsl_url *u, int timeout_ms, int *out, char *err,
                            size_t cap) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(u->host, u->port, &hints, &res);
    if (gai != 0)
        return tr_errf(err, cap, TR_ERR_IO, "cannot resolve %s: %s", u->host, gai_strerror(gai));
    int last = 0;
    bool timed_out = false;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            *out = fd;
            freeaddrinfo(res);
            return TR_OK;
        }
        if (errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            int r;
            do r = poll(&p, 1, timeout_ms);
            while (r < 0 && errno == EINTR);
            int soerr = 0;
            socklen_t len = sizeof soerr;
            if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 &&
                soerr == 0) {
                *out = fd;
                freeaddrinfo(res);
                return TR_OK;
            }
            if (r == 0) timed_out = true;
            last = r == 1 ? soerr : errno;
        } else {
            last = errno;
        }
        close(fd);
    }
    freeaddrinfo(res);
    if (timed_out)
        return tr_errf(err, cap, TR_ERR_CANCELLED,
                       "cannot connect to %s:%s: no answer within %d ms", u->host, u->port,
                       timeout_ms);
    return tr_errf(err, cap, TR_ERR_IO, "cannot connect to %s:%s: %s (is `trellis serve` "
                                      "running there?)",
                   u->host, u->port, strerror(last ? last : ECONNREFUSED));
}

static tr_status send_all(int fd, const tr_dsl_url *u, const char *data, size_t len,
                          int timeout_ms, char *err, size_t cap) {
    while (len) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {fd, POLLOUT, 0};
            int r = poll(&p, 1, timeout_ms);
            if (r == 0)
                return tr_errf(err, cap, TR_ERR_CANCELLED,
                               "%s:%s did not take the request within %d ms", u->host, u->port,
                               timeout_ms);
            if (r < 0 && errno != EINTR)
                return tr_errf(err, cap, TR_ERR_IO, "poll: %s", strerror(errno));
            continue;
        }
        return tr_errf(err, cap, TR_ERR_IO, "sending to %s:%s: %s", u->host, u->port,
                       strerror(errno));
    }
    return TR_OK;
}

/* ---- response ---- */

typedef struct parse_state {
    const tr_dsl_http_request *req;
    tr_dsl_http_response *resp;
    bool complete, stopped, too_big;
    size_t body_bytes;
} parse_state;

static int on_headers_complete(http_parser *p) {
    parse_state *ps = p->data;
    ps->resp->status = (int)p->status_code;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
    parse_state *ps = p->data;
    ps->body_bytes += len;
    if (ps->body_bytes > ps->req->max_body) {
        ps->too_big = true;
        return -1;
    }
    bool ok2xx = ps->resp->status >= 200 && ps->resp->status < 300;
    if (ps->req->on_body && ok2xx) {
        if (!ps->req->on_body(ps->req->user, at, len)) {
            ps->stopped = true;
            return -1;
        }
        return 0;
    }
    return tr_dsl_buf_put(&ps->resp->body, at, len) ? 0 : -1;
}

static int on_message_complete(http_parser *p) {
    parse_state *ps = p->data;
    ps->complete = true;
    return 0;
}

tr_status tr_dsl_http_do(const tr_dsl_url *u, const tr_dsl_http_request *r,
                         tr_dsl_http_response *resp, char *err, size_t cap) {
    memset(resp, 0, sizeof *resp);
    int fd = -1;
    tr_status s = connect_to(u, r->connect_timeout_ms, &fd, err, cap);
    if (s) return s;
    char head[2048];
    int hn = snprintf(head, sizeof head,
                      "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: trellis-run\r\n"
                      "Accept: */*\r\nConnection: close\r\n%s%s%s"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      r->method, u->prefix, r->path, u->host, u->port,
                      r->api_key ? "Authorization: Bearer " : "", r->api_key ? r->api_key : "",
                      r->api_key ? "\r\n" : "", r->body ? r->body_len : 0);
    if (hn < 0 || (size_t)hn >= sizeof head) {
        close(fd);
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "request header too long");
    }
    s = send_all(fd, u, head, (size_t)hn, r->timeout_ms, err, cap);
    if (s == TR_OK && r->body) s = send_all(fd, u, r->body, r->body_len, r->timeout_ms, err, cap);
    http_parser parser;
    http_parser_init(&parser, HTTP_RESPONSE);
    http_parser_settings settings;
    http_parser_settings_init(&settings);
    settings.on_headers_complete = on_headers_complete;
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;
    parse_state ps = {r, resp, false, false, false, 0};
    parser.data = &ps;
    char buf[16384];
    while (s == TR_OK && !ps.complete) {
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, r->timeout_ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) {
            s = tr_errf(err, cap, TR_ERR_CANCELLED,
                        "%s:%s sent nothing for %d ms (timeout)", u->host, u->port,
                        r->timeout_ms);
            break;
        }
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) {
            s = tr_errf(err, cap, TR_ERR_IO, "reading from %s:%s: %s", u->host, u->port,
                        strerror(errno));
            break;
        }
        /* n == 0 (EOF) tells the parser, which ends a close-delimited body */
        size_t used = http_parser_execute(&parser, &settings, n ? buf : NULL, (size_t)n);
        if (ps.stopped) break;
        if (ps.too_big) {
            s = tr_errf(err, cap, TR_ERR_LIMIT, "the response from %s:%s is over %zu bytes",
                        u->host, u->port, r->max_body);
            break;
        }
        if (n == 0 && !ps.complete) {
            s = tr_errf(err, cap, TR_ERR_IO,
                        "%s:%s closed the connection before the response was complete",
                        u->host, u->port);
            break;
        }
        if (HTTP_PARSER_ERRNO(&parser) != HPE_OK || (n > 0 && used != (size_t)n)) {
            if (ps.complete) break;
            s = tr_errf(err, cap, TR_ERR_IO, "malformed HTTP response from %s:%s: %s", u->host,
                        u->port, http_errno_description(HTTP_PARSER_ERRNO(&parser)));
            break;
        }
        if (n == 0) break;
    }
    close(fd);
    if (s) tr_dsl_buf_free(&resp->body);
    return s;
}
