/* test_dsl_http.c — the DSL's remote backend (frontend/backend_http.c,
 * frontend/http.c) against a fake `trellis serve` on a loopback port: the
 * /generate body in SGLang's field names, plain, chunked and streamed
 * (server-sent events) answers, concurrency (a fork's branches reach the
 * server together), and every failure a client meets (unreachable,
 * HTTP errors, malformed answers, a connection cut short, a silent server)
 * as a clear error at the gen's location. No model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "frontend/dsl.h"
#include "frontend/http.h"

/* ---- the fake server ---- */

typedef enum mode {
    MODE_OK,        /* {"text": ..., "meta_info": {...}} with Content-Length */
    MODE_CHUNKED,   /* the same, chunked */
    MODE_HTTP_400,  /* {"error": {"message": ...}} */
    MODE_GARBAGE,   /* not HTTP */
    MODE_CUT,       /* Content-Length larger than what is sent */
    MODE_SILENT,    /* never answers */
    MODE_NO_TEXT,   /* 200 without "text" */
} mode;

typedef struct server {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t mu;
    mode mode;
    int delay_ms;
    bool chat_template;   /* /model_info reports one */
    bool tokenize;        /* /tokenize answers (3 ids per prompt) */
    int inflight, max_inflight, requests;
    char *bodies[64];     /* the /generate bodies */
    int n_bodies;
    bool stop;
} server;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void send_str(int fd, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void respond_json(int fd, int status, const char *body, bool chunked) {
    char head[256];
    if (chunked) {
        snprintf(head, sizeof head,
                 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 status);
        send_str(fd, head);
        size_t n = strlen(body), half = n / 2;
        char size[32];
        snprintf(size, sizeof size, "%zx\r\n", half);
        send_str(fd, size);
        send(fd, body, half, MSG_NOSIGNAL);
        send_str(fd, "\r\n");
        snprintf(size, sizeof size, "%zx\r\n", n - half);
        send_str(fd, size);
        send_str(fd, body + half);
        send_str(fd, "\r\n0\r\n\r\n");
        return;
    }
    snprintf(head, sizeof head,
             "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
             status, strlen(body));
    send_str(fd, head);
    send_str(fd, body);
}

typedef struct conn {
    server *s;
    int fd;
} conn;

static void *handle(void *arg) {
    conn *c = arg;
    server *s = c->s;
    char buf[65536];
    size_t len = 0;
    char *end = NULL;
    while (len < sizeof buf - 1) {
        ssize_t n = recv(c->fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0) break;
        len += (size_t)n;
        buf[len] = 0;
        end = strstr(buf, "\r\n\r\n");
        if (!end) continue;
        const char *cl = strstr(buf, "Content-Length: ");
        size_t want = cl ? (size_t)atoi(cl + 16) : 0;
        if (len >= (size_t)(end + 4 - buf) + want) break;
    }
    pthread_mutex_lock(&s->mu);
    s->requests++;
    s->inflight++;
    if (s->inflight > s->max_inflight) s->max_inflight = s->inflight;
    mode m = s->mode;
    int delay = s->delay_ms;
    pthread_mutex_unlock(&s->mu);
    if (end && strncmp(buf, "GET /model_info", 15) == 0) {
        respond_json(c->fd, 200,
                     s->chat_template ? "{\"model_path\": \"fake\", \"chat_template\": \"chatml\"}"
                                      : "{\"model_path\": \"fake\"}",
                     false);
    } else if (end && strncmp(buf, "POST /tokenize", 14) == 0 && s->tokenize) {
        respond_json(c->fd, 200, "{\"tokens\": [1, 2, 3], \"count\": 3}", false);
    } else if (end && strncmp(buf, "POST /generate", 14) == 0) {
        const char *body = end + 4;
        pthread_mutex_lock(&s->mu);
        int idx = s->n_bodies;
        if (s->n_bodies < 64) s->bodies[s->n_bodies++] = strdup(body);
        pthread_mutex_unlock(&s->mu);
        if (delay) sleep_ms(delay);
        json_t *j = json_loads(body, 0, NULL);
        bool stream = json_is_true(json_object_get(j, "stream"));
        json_t *sp = json_object_get(j, "sampling_params");
        const char *text = json_object_get(sp, "json_schema") ? "{\"name\": \"Bo\"}"
                           : json_object_get(sp, "regex")     ? "7"
                                                              : "hello world";
        char out[512];
        if (m == MODE_SILENT) {
            sleep_ms(3000);
        } else if (m == MODE_GARBAGE) {
            send_str(c->fd, "this is not HTTP at all\r\n\r\n");
        } else if (m == MODE_CUT) {
            send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"text\": \"hel");
        } else if (m == MODE_HTTP_400) {
            respond_json(c->fd, 400,
                         "{\"error\": {\"message\": \"regex: unbalanced parenthesis at 3\"}}",
                         false);
        } else if (m == MODE_NO_TEXT) {
            respond_json(c->fd, 200, "{\"meta_info\": {}}", false);
        } else if (stream) {
            send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                            "Connection: close\r\n\r\n");
            /* SGLang sends the text so far in every chunk */
            const char *cuts[] = {"hel", "hello", "hello world"};
            for (int k = 0; k < 3; k++) {
                snprintf(out, sizeof out,
                         "data: {\"text\": \"%s\", \"meta_info\": {\"prompt_tokens\": 10, "
                         "\"completion_tokens\": %d, \"cached_tokens\": 4, "
                         "\"finish_reason\": %s}}\n\n",
                         cuts[k], k + 1, k == 2 ? "{\"type\": \"stop\"}" : "null");
                send_str(c->fd, out);
            }
            send_str(c->fd, "data: [DONE]\n\n");
        } else {
            snprintf(out, sizeof out,
                     "{\"text\": \"%s\", \"meta_info\": {\"id\": \"r%d\", \"prompt_tokens\": 10, "
                     "\"completion_tokens\": 2, \"cached_tokens\": 6, \"finish_reason\": "
                     "{\"type\": \"stop\", \"matched\": null}}}",
                     strchr(text, '"') ? "{\\\"name\\\": \\\"Bo\\\"}" : text, idx);
            respond_json(c->fd, 200, out, m == MODE_CHUNKED);
        }
        json_decref(j);
    } else {
        respond_json(c->fd, 404, "{\"error\": {\"message\": \"not found\"}}", false);
    }
    pthread_mutex_lock(&s->mu);
    s->inflight--;
    pthread_mutex_unlock(&s->mu);
    close(c->fd);
    free(c);
    return NULL;
}

static void *serve(void *arg) {
    server *s = arg;
    for (;;) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) return NULL;
        pthread_mutex_lock(&s->mu);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) {
            close(fd);
            return NULL;
        }
        conn *c = malloc(sizeof *c);
        c->s = s;
        c->fd = fd;
        pthread_t t;
        pthread_create(&t, NULL, handle, c);
        pthread_detach(t);
    }
}

static server *server_start(void) {
    server *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->chat_template = true;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t al = sizeof a;
    getsockname(s->fd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    assert_int_equal(listen(s->fd, 64), 0);
    pthread_create(&s->thread, NULL, serve, s);
    return s;
}

static void server_stop(server *s) {
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_mutex_unlock(&s->mu);
    /* wake accept() */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)s->port);
    connect(fd, (struct sockaddr *)&a, sizeof a);
    close(fd);
    pthread_join(s->thread, NULL);
    close(s->fd);
    /* let detached handlers finish */
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&s->mu);
        int n = s->inflight;
        pthread_mutex_unlock(&s->mu);
        if (!n) break;
        sleep_ms(10);
    }
    sleep_ms(20);
    for (int i = 0; i < s->n_bodies; i++) free(s->bodies[i]);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- helpers ---- */

typedef struct remote {
    server *srv;
    tr_dsl_backend *b;
    tr_dsl_script *script;
    tr_dsl_session *sess;
} remote;

static void remote_open(remote *r, const char *src, const tr_dsl_session_options *o,
                        int timeout_ms) {
    memset(r, 0, sizeof *r);
    r->srv = server_start();
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", r->srv->port);
    tr_dsl_http_options ho = {0};
    ho.url = url;
    ho.timeout_ms = timeout_ms;
    char err[512];
    tr_status st = tr_dsl_backend_http_new(&ho, &r->b, err, sizeof err);
    if (st) fprintf(stderr, "%s\n", err);
    assert_int_equal(st, TR_OK);
    tr_dsl_error e;
    assert_int_equal(tr_dsl_script_parse("r.tr", NULL, src, strlen(src), NULL, &r->script, &e),
                     TR_OK);
    assert_int_equal(tr_dsl_session_new(r->script, r->b, o, &r->sess, &e), TR_OK);
}

static void remote_close(remote *r) {
    tr_dsl_session_free(r->sess);
    tr_dsl_backend_free(r->b);
    tr_dsl_script_free(r->script);
    server_stop(r->srv);
}

/* ---- tests ---- */

static void test_url_parse(void **state) {
    (void)state;
    tr_dsl_url u;
    char err[256];
    assert_int_equal(tr_dsl_url_parse("http://127.0.0.1:8080", &u, err, sizeof err), TR_OK);
    assert_string_equal(u.host, "127.0.0.1");
    assert_string_equal(u.port, "8080");
    assert_string_equal(u.prefix, "");
    assert_int_equal(tr_dsl_url_parse("http://host/api/v1/", &u, err, sizeof err), TR_OK);
    assert_string_equal(u.port, "80");
    assert_string_equal(u.prefix, "/api/v1");
    assert_int_equal(tr_dsl_url_parse("http://[::1]:9/", &u, err, sizeof err), TR_OK);
    assert_string_equal(u.host, "::1");
    assert_int_equal(tr_dsl_url_parse("https://x", &u, err, sizeof err), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "https is not supported"));
    assert_int_equal(tr_dsl_url_parse("localhost:8080", &u, err, sizeof err), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_dsl_url_parse("http://h:99999", &u, err, sizeof err), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_dsl_url_parse("http://:80", &u, err, sizeof err), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_dsl_url_parse("http://h:80x", &u, err, sizeof err), TR_ERR_INVALID_ARG);
}

static void test_unreachable(void **state) {
    (void)state;
    /* a port nobody listens on: bind one, close it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t al = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &al);
    int port = ntohs(a.sin_port);
    close(fd);
    char url[64], err[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    tr_dsl_http_options ho = {0};
    ho.url = url;
    tr_dsl_backend *b = NULL;
    assert_int_equal(tr_dsl_backend_http_new(&ho, &b, err, sizeof err), TR_ERR_IO);
    assert_null(b);
    assert_non_null(strstr(err, "cannot reach the server at http://127.0.0.1:"));
    assert_non_null(strstr(err, "Connection refused"));
    ho.url = "http://no-such-host.invalid:80";
    assert_int_not_equal(tr_dsl_backend_http_new(&ho, &b, err, sizeof err), TR_OK);
    assert_non_null(strstr(err, "cannot resolve no-such-host.invalid"));
}

static void test_generate_fields(void **state) {
    (void)state;
    remote r;
    remote_open(&r,
                "fn main() {\n"
                "  system { \"S\" }\n"
                "  user { \"Q\" }\n"
                "  assistant { gen a(max_tokens=7, stop=[\"\\n\"], temperature=0.5, top_k=3,"
                " seed=9) }\n"
                "  assistant { gen n(regex=r\"[0-9]\") }\n"
                "  assistant { select c from [\"x\", \"y.z\"] }\n"
                "  assistant { gen p(json_schema={type: \"object\"}) }\n"
                "  return [a, n, c, p.name]\n"
                "}\n",
                NULL, 5000);
    tr_dsl_result res;
    tr_dsl_error e;
    tr_status st = tr_dsl_session_run(r.sess, "main", NULL, &res, &e);
    if (st) fprintf(stderr, "%s\n", e.message);
    assert_int_equal(st, TR_OK);
    /* the fake answers "7" to every regex, so select's answer is "7" too:
     * the remote mode trusts the server's constraint */
    json_t *want = json_pack("[s, s, s, s]", "hello world", "7", "7", "Bo");
    assert_true(json_equal(res.ret, want));
    json_decref(want);
    assert_int_equal(res.stats.prompt_tokens, 40);
    assert_int_equal(res.stats.cached_tokens, 24);
    tr_dsl_result_deinit(&res);
    assert_int_equal(r.srv->n_bodies, 4);
    json_t *b0 = json_loads(r.srv->bodies[0], 0, NULL);
    assert_non_null(b0);
    assert_string_equal(json_string_value(json_object_get(b0, "text")),
                        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
                        "<|im_start|>assistant\n");
    json_t *sp = json_object_get(b0, "sampling_params");
    assert_int_equal(json_integer_value(json_object_get(sp, "max_new_tokens")), 7);
    assert_string_equal(json_string_value(json_array_get(json_object_get(sp, "stop"), 0)), "\n");
    assert_true(json_real_value(json_object_get(sp, "temperature")) == 0.5);
    assert_int_equal(json_integer_value(json_object_get(sp, "top_k")), 3);
    assert_int_equal(json_integer_value(json_object_get(sp, "sampling_seed")), 9);
    assert_true(json_is_false(json_object_get(b0, "stream")));
    json_decref(b0);
    json_t *b2 = json_loads(r.srv->bodies[2], 0, NULL);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(b2, "sampling_params"), "regex")),
                        "(?:x|y\\.z)");
    json_decref(b2);
    json_t *b3 = json_loads(r.srv->bodies[3], 0, NULL);
    /* json_schema is a string, as SGLang takes it */
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(b3, "sampling_params"), "json_schema")),
                        "{\"type\":\"object\"}");
    json_decref(b3);
    remote_close(&r);
}

static char streamed[256];
static void on_text(void *user, int32_t task, const char *name, const char *text, size_t len) {
    (void)user;
    (void)task;
    (void)name;
    strncat(streamed, text, len);
    strcat(streamed, "|");
}

static void test_stream_and_chunked(void **state) {
    (void)state;
    tr_dsl_session_options o;
    tr_dsl_session_options_default(&o);
    tr_dsl_stream s = {on_text, NULL};
    o.stream = &s;
    remote r;
    remote_open(&r, "fn main() { \"Say hi:\" gen g(max_tokens=4) return g }\n", &o, 5000);
    streamed[0] = 0;
    tr_dsl_result res;
    tr_dsl_error e;
    assert_int_equal(tr_dsl_session_run(r.sess, "main", NULL, &res, &e), TR_OK);
    assert_string_equal(json_string_value(res.ret), "hello world");
    assert_string_equal(streamed, "hel|lo| world|");
    assert_int_equal(res.stats.completion_tokens, 3);
    tr_dsl_result_deinit(&res);
    json_t *b = json_loads(r.srv->bodies[0], 0, NULL);
    assert_true(json_is_true(json_object_get(b, "stream")));
    json_decref(b);
    remote_close(&r);
    /* a chunked answer */
    remote_open(&r, "fn main() { \"x\" gen g return g }\n", NULL, 5000);
    r.srv->mode = MODE_CHUNKED;
    assert_int_equal(tr_dsl_session_run(r.sess, "main", NULL, &res, &e), TR_OK);
    assert_string_equal(json_string_value(res.ret), "hello world");
    tr_dsl_result_deinit(&res);
    remote_close(&r);
}

static void test_fork_reaches_server_together(void **state) {
    (void)state;
    tr_dsl_session_options o;
    tr_dsl_session_options_default(&o);
    o.warm_forks = false;
    remote r;
    remote_open(&r, "fn main() { \"x\" fork 6 { gen g } return g }\n", &o, 5000);
    r.srv->delay_ms = 200;
    tr_dsl_result res;
    tr_dsl_error e;
    assert_int_equal(tr_dsl_session_run(r.sess, "main", NULL, &res, &e), TR_OK);
    assert_int_equal(json_array_size(res.ret), 6);
    assert_int_equal(r.srv->max_inflight, 6);
    tr_dsl_result_deinit(&res);
    remote_close(&r);
}

typedef struct failure_case {
    mode mode;
    const char *message;
} failure_case;

static void test_failures(void **state) {
    (void)state;
    const failure_case cases[] = {
        {MODE_HTTP_400, "the server answered 400: regex: unbalanced parenthesis at 3"},
        {MODE_GARBAGE, "malformed HTTP response"},
        {MODE_CUT, "closed the connection before the response was complete"},
        {MODE_SILENT, "sent nothing for 1000 ms"},
        {MODE_NO_TEXT, "has no \"text\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        remote r;
        /* the silent server's timeout well below its 3 s of silence; the
         * others far above an answer's time on a loaded machine */
        remote_open(&r, "fn main() {\n  \"x\"\n  gen g\n  return g\n}\n", NULL,
                    cases[i].mode == MODE_SILENT ? 1000 : 5000);
        r.srv->mode = cases[i].mode;
        tr_dsl_result res;
        tr_dsl_error e;
        assert_int_not_equal(tr_dsl_session_run(r.sess, "main", NULL, &res, &e), TR_OK);
        if (!strstr(e.message, cases[i].message))
            fprintf(stderr, "case %zu: %s\n", i, e.message);
        assert_non_null(strstr(e.message, cases[i].message));
        assert_non_null(strstr(e.message, "gen g failed"));
        assert_int_equal(e.line, 3);
        assert_int_equal(e.column, 3);
        remote_close(&r);
    }
}

/* A server whose /generate counts more prompt tokens than /tokenize gives
 * (it does not parse the template's special tokens in text) gets token
 * ids instead. */
static void test_sends_ids_when_text_loses_special_tokens(void **state) {
    (void)state;
    server *s = server_start();
    s->tokenize = true;
    char url[64], err[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    tr_dsl_http_options ho = {0};
    ho.url = url;
    tr_dsl_backend *b;
    assert_int_equal(tr_dsl_backend_http_new(&ho, &b, err, sizeof err), TR_OK);
    assert_int_equal(s->n_bodies, 1); /* the probe: one token */
    const char *src = "fn main() {\n  user { \"hi\" }\n  assistant { gen a }\n  return a\n}\n";
    tr_dsl_script *sc;
    tr_dsl_error e;
    assert_int_equal(tr_dsl_script_parse("c.tr", NULL, src, strlen(src), NULL, &sc, &e), TR_OK);
    tr_dsl_session *sess;
    assert_int_equal(tr_dsl_session_new(sc, b, NULL, &sess, &e), TR_OK);
    tr_dsl_result res;
    assert_int_equal(tr_dsl_session_run(sess, "main", NULL, &res, &e), TR_OK);
    assert_string_equal(json_string_value(res.ret), "hello world");
    tr_dsl_result_deinit(&res);
    assert_int_equal(s->n_bodies, 2);
    json_t *body = json_loads(s->bodies[1], 0, NULL);
    assert_null(json_object_get(body, "text"));
    json_t *ids = json_object_get(body, "input_ids");
    assert_int_equal(json_array_size(ids), 3);
    json_decref(body);
    tr_dsl_session_free(sess);
    tr_dsl_backend_free(b);
    tr_dsl_script_free(sc);
    server_stop(s);
}

static void test_chat_template_needed(void **state) {
    (void)state;
    server *s = server_start();
    s->chat_template = false;
    char url[64], err[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    tr_dsl_http_options ho = {0};
    ho.url = url;
    tr_dsl_backend *b;
    assert_int_equal(tr_dsl_backend_http_new(&ho, &b, err, sizeof err), TR_OK);
    const char *src = "fn main() {\n  user { \"hi\" }\n  assistant { gen a }\n}\n";
    tr_dsl_script *sc;
    tr_dsl_error e;
    assert_int_equal(tr_dsl_script_parse("c.tr", NULL, src, strlen(src), NULL, &sc, &e), TR_OK);
    tr_dsl_session *sess;
    assert_int_equal(tr_dsl_session_new(sc, b, NULL, &sess, &e), TR_OK);
    tr_dsl_result res;
    assert_int_equal(tr_dsl_session_run(sess, "main", NULL, &res, &e), TR_ERR_UNSUPPORTED);
    assert_int_equal(e.line, 3);
    assert_non_null(strstr(e.message, "pass --chat-template"));
    tr_dsl_session_free(sess);
    tr_dsl_backend_free(b);
    /* named explicitly, the same script runs */
    ho.chat_template = "chatml";
    assert_int_equal(tr_dsl_backend_http_new(&ho, &b, err, sizeof err), TR_OK);
    assert_int_equal(tr_dsl_session_new(sc, b, NULL, &sess, &e), TR_OK);
    assert_int_equal(tr_dsl_session_run(sess, "main", NULL, &res, &e), TR_OK);
    tr_dsl_result_deinit(&res);
    tr_dsl_session_free(sess);
    tr_dsl_backend_free(b);
    tr_dsl_script_free(sc);
    server_stop(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_parse),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_generate_fields),
        cmocka_unit_test(test_stream_and_chunked),
        cmocka_unit_test(test_fork_reaches_server_together),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_sends_ids_when_text_loses_special_tokens),
        cmocka_unit_test(test_chat_template_needed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
