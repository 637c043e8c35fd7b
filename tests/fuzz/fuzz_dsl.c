/* fuzz_dsl.c — libFuzzer target for the DSL (frontend/): the input is a
 * script. Parsing must succeed or fail with a located error inside the
 * input (line >= 1, offset <= size), and the error must render; a script
 * that parses is then run (its default function, no arguments) under
 * small limits on a backend that answers at once, with load() disabled,
 * so the interpreter meets the same inputs. Checked: no crash, no
 * sanitizer report, no hang (every loop and recursion is bounded). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/dsl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tr_status answer(tr_dsl_backend *b, const tr_dsl_gen_req *r,
                        const tr_dsl_gen_sink *sink, char *err, size_t cap) {
    (void)b;
    (void)err;
    (void)cap;
    const char *text = r->constraint == TR_DSL_CONSTRAINT_CHOICES ? r->choices[0]
                       : r->constraint == TR_DSL_CONSTRAINT_JSON ||
                               r->constraint == TR_DSL_CONSTRAINT_JSON_SCHEMA
                           ? "{\"a\": [1, \"x\"]}"
                           : "ok";
    tr_dsl_gen_out out = {0};
    out.finish = "stop";
    out.text = strdup(text);
    out.len = out.text ? strlen(text) : 0;
    if (!out.text) {
        out.status = TR_ERR_NOMEM;
        out.finish = "error";
    }
    if (r->stream && sink->delta && out.text) sink->delta(sink->user, out.text, out.len);
    sink->done(sink->user, &out);
    free(out.text);
    return TR_OK;
}

static tr_status render(tr_dsl_backend *b, const trellis_message *m, int32_t n, bool gen,
                        char **out, size_t *len, char *err, size_t cap) {
    (void)b;
    return (tr_status)trellis_chat_template_render("chatml", m, n, gen, out, len, err, cap);
}

static void nothing(tr_dsl_backend *b) { (void)b; }

static const tr_dsl_backend_ops ops = {"fuzz", answer, render, NULL, nothing};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_dsl_session_options o;
    tr_dsl_session_options_default(&o);
    tr_dsl_limits *l = &o.limits;
    l->max_script_bytes = 1 << 16;
    l->max_steps = 20000;
    l->max_loop_iterations = 2000;
    l->max_string_bytes = 1 << 16;
    l->max_prompt_bytes = 1 << 16;
    l->max_fork_width = 4;
    l->max_tasks = 8;
    l->max_call_depth = 16;
    l->max_file_bytes = 0;
    tr_dsl_script *s = NULL;
    tr_dsl_error e;
    tr_status st = tr_dsl_script_parse("fuzz.tr", "/nonexistent", (const char *)data, size, l,
                                       &s, &e);
    char buf[4096];
    if (st != TR_OK) {
        if (s) abort();
        if (e.has_location && (e.line < 1 || e.column < 1 || e.offset > size)) abort();
        tr_dsl_error_format_src("fuzz.tr", (const char *)data, size, &e, buf, sizeof buf);
        return 0;
    }
    tr_dsl_backend b = {&ops};
    tr_dsl_session *sess = NULL;
    if (tr_dsl_session_new(s, &b, &o, &sess, &e) == TR_OK) {
        const char *fn = tr_dsl_script_default_fn(s);
        if (fn) {
            tr_dsl_result r;
            if (tr_dsl_session_run(sess, fn, NULL, &r, &e) == TR_OK) tr_dsl_result_deinit(&r);
            else tr_dsl_error_format(s, &e, buf, sizeof buf);
        }
        tr_dsl_session_free(sess);
    } else {
        tr_dsl_error_format(s, &e, buf, sizeof buf);
    }
    tr_dsl_script_free(s);
    return 0;
}
