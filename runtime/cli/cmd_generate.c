/* cmd_generate.c — `trellis generate`: one prompt, one completion, on the
 * CPU backend, streamed to stdout.
 *
 * This is the single-sequence driver that exists before the engine: it
 * prefills the prompt in chunks of up to --batch tokens (the batched
 * matrix-matrix path), then decodes one token per forward pass. KV lives in
 * pages from the start (a private page table 0..n-1 here; the shared pool
 * and radix tree take over in the engine).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/utf8.h"
#include "base/util.h"
#include "grammar/grammar.h"
#include "runtime/chat/chat.h"
#include "runtime/engine/constraint.h"
#include "runtime/sampler/sampler.h"
#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"

#define GEN_PAGE_SIZE 16

typedef struct gen_opts {
    const char *model, *prompt, *file, *system, *regex, *load;
    cli_strs choices;
    bool chat, json, ignore_eos, special;
    int64_t n_predict, threads, seed, top_k, ctx, batch;
    double temp, top_p, min_p, repeat_penalty, presence, frequency;
} gen_opts;

typedef struct gen_result {
    int32_t *ids; /* generated ids */
    size_t n_ids, cap;
    char *text;
    size_t text_len, text_cap;
    const char *finish;
    double prefill_ms, decode_ms;
    int n_decode_steps;
    int n_forced_tokens; /* tokens appended by jump-forward, not sampled */
    int n_forward;       /* forward passes after the prompt */
} gen_result;

/* A constraint for the sequence: the compiled grammar, its vocabulary and
 * the matcher (NULL members when generation is unconstrained). */
typedef struct gen_constraint {
    grammar_vocab *vocab;
    grammar *g;
    grammar_matcher *m;
    uint64_t *mask;
    size_t mask_words;
} gen_constraint;

static void constraint_free(gen_constraint *c) {
    tr_grammar_matcher_free(c->m);
    tr_grammar_free(c->g);
    tr_grammar_vocab_free(c->vocab);
    free(c->mask);
    memset(c, 0, sizeof *c);
}

/* Appends s to *buf; with literal, regex metacharacters are escaped. */
static bool regex_append(char **buf, size_t *len, size_t *cap, const char *s,
                         bool literal) {
    for (; *s; s++) {
        if (*len + 3 > *cap) {
            size_t nc = (*cap + 16) * 2;
            char *nb = realloc(*buf, nc);
            if (!nb) return false;
            *buf = nb;
            *cap = nc;
        }
        if (literal && strchr("\\^$.|?*+()[]{}/-", *s)) (*buf)[(*len)++] = '\\';
        (*buf)[(*len)++] = *s;
    }
    (*buf)[*len] = 0;
    return true;
}

/* Compiles --regex, or the --choice alternatives as an alternation of
 * literals, against the tokenizer's vocabulary. */
static bool constraint_build(const gen_opts *o, const tokenizer *tok,
                             gen_constraint *c) {
    memset(c, 0, sizeof *c);
    if (!o->regex && o->choices.n == 0) return true;
    if (o->regex && o->choices.n) {
        fprintf(stderr, "trellis generate: give --regex or --choice, not both\n");
        return false;
    }
    char *pattern = NULL;
    size_t plen = 0, pcap = 0;
    bool ok = true;
    if (o->regex) {
        ok = regex_append(&pattern, &plen, &pcap, o->regex, false);
    } else {
        ok = regex_append(&pattern, &plen, &pcap, "(", false);
        for (int i = 0; ok && i < o->choices.n; i++) {
            if (!o->choices.items[i][0]) {
                fprintf(stderr, "trellis generate: --choice number %d is empty\n", i + 1);
                free(pattern);
                return false;
            }
            ok = (i == 0 || regex_append(&pattern, &plen, &pcap, "|", false)) &&
                 regex_append(&pattern, &plen, &pcap, o->choices.items[i], true);
        }
        ok = ok && regex_append(&pattern, &plen, &pcap, ")", false);
    }
    if (!ok) {
        free(pattern);
        pattern = NULL;
    }
    if (!pattern) {
        fprintf(stderr, "trellis generate: out of memory\n");
        return false;
    }
    tr_diag d = {0};
    tr_status s = tr_constraint_vocab_from_tokenizer(tok, &c->vocab, &d);
    if (s) {
        cli_report("generate", "cannot build the grammar vocabulary", s, &d);
        free(pattern);
        return false;
    }
    s = tr_grammar_compile_regex(pattern, plen, NULL, &c->g, &d);
    if (s) {
        cli_report("generate", o->regex ? "bad --regex" : "bad --choice", s, &d);
        free(pattern);
        constraint_free(c);
        return false;
    }
    free(pattern);
    c->mask_words = tr_grammar_vocab_mask_words(c->vocab);
    c->mask = malloc(c->mask_words * sizeof *c->mask);
    if (!c->mask || tr_grammar_matcher_new(c->g, c->vocab, 0, &c->m)) {
        fprintf(stderr, "trellis generate: out of memory\n");
        constraint_free(c);
        return false;
    }
    return true;
}

static bool append_text(gen_result *r, const char *s, size_t n) {
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = (r->text_cap + n + 1) * 2;
        char *t = realloc(r->text, cap);
        if (!t) return false;
        r->text = t;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    return true;
}

static bool append_id(gen_result *r, int32_t id) {
    if (r->n_ids == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        int32_t *t = realloc(r->ids, cap * sizeof *t);
        if (!t) return false;
        r->ids = t;
        r->cap = cap;
    }
    r->ids[r->n_ids++] = id;
    return true;
}

/* Builds the prompt text: the raw prompt, or the chat template applied to
 * [system?, user]. *parse_special: chat prompts contain control tokens. */
static tr_status build_prompt(const gen_opts *o, const cli_loaded *L,
                              const char *user, char **out, bool *parse_special,
                              tr_diag *d) {
    if (!o->chat) {
        *out = strdup(user);
        *parse_special = o->special;
        return *out ? TR_OK : TR_ERR_NOMEM;
    }
    gguf_str tmpl = {0};
    char *tmpl_z = NULL;
    if (tr_gguf_get_str(L->file, "tokenizer.chat_template", &tmpl) == TR_OK) {
        tmpl_z = malloc(tmpl.len + 1);
        if (!tmpl_z) return TR_ERR_NOMEM;
        memcpy(tmpl_z, tmpl.ptr, tmpl.len);
        tmpl_z[tmpl.len] = 0;
    }
    chat_template_kind kind;
    tr_status s = tr_chat_template_detect(tmpl_z, &kind, d);
    char *default_system = NULL;
    if (s == TR_OK) s = tr_chat_template_default_system(tmpl_z, &default_system);
    free(tmpl_z);
    if (s) return s;
    chat_message msgs[2];
    size_t n = 0;
    if (o->system) msgs[n++] = (chat_message){"system", o->system};
    msgs[n++] = (chat_message){"user", user};
    *parse_special = true;
    s = tr_chat_render(kind, default_system, msgs, n, true, out, NULL, d);
    free(default_system);
    return s;
}

static void print_json(const gen_opts *o, const gen_result *r, const gen_constraint *con,
                       size_t n_prompt, double load_ms, const char *load_mode) {
    json_t *root = json_object();
    json_object_set_new(root, "text", json_stringn_nocheck(r->text ? r->text : "", r->text_len));
    json_t *ids = json_array();
    for (size_t i = 0; i < r->n_ids; i++) json_array_append_new(ids, json_integer(r->ids[i]));
    json_object_set_new(root, "tokens", ids);
    json_object_set_new(root, "prompt_tokens", json_integer((json_int_t)n_prompt));
    json_object_set_new(root, "completion_tokens", json_integer((json_int_t)r->n_ids));
    json_object_set_new(root, "finish_reason", json_string(r->finish));
    json_t *t = json_object();
    json_object_set_new(t, "load_ms", json_real(load_ms));
    json_object_set_new(t, "prefill_ms", json_real(r->prefill_ms));
    json_object_set_new(t, "prefill_tok_per_s",
                        json_real(r->prefill_ms > 0 ? (double)n_prompt / (r->prefill_ms / 1e3) : 0));
    json_object_set_new(t, "decode_ms", json_real(r->decode_ms));
    json_object_set_new(t, "decode_tok_per_s",
                        json_real(r->decode_ms > 0 ? r->n_decode_steps / (r->decode_ms / 1e3) : 0));
    json_object_set_new(root, "timings", t);
    json_object_set_new(root, "threads", json_integer((json_int_t)o->threads));
    json_object_set_new(root, "model_load", json_string(load_mode));
    if (con && con->m) {
        json_t *c = json_object();
        json_object_set_new(c, "kind", json_string(o->regex ? "regex" : "choice"));
        json_object_set_new(c, "accepted", json_boolean(tr_grammar_matcher_is_terminated(con->m) || tr_grammar_matcher_is_accepting(con->m)));
        json_object_set_new(c, "forced_tokens", json_integer(r->n_forced_tokens));
        json_object_set_new(c, "forward_passes", json_integer(r->n_forward));
        json_object_set_new(root, "constraint", c);
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) printf("%s\n", s);
    free(s);
    json_decref(root);
}

int cmd_generate(int argc, char **argv) {
    gen_opts o = {.n_predict = 128, .threads = 0, .seed = 0, .top_k = 0,
                  .ctx = 0, .batch = 512, .temp = 0.0, .top_p = 1.0,
                  .min_p = 0.0, .repeat_penalty = 1.0};
    bool help = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &o.model, 1, 0, "GGUF file (default: the cached default model)"},
        {"--prompt", "-p", CLI_STR, &o.prompt, 1, 0, "prompt text"},
        {"--file", "-f", CLI_STR, &o.file, 1, 0, "read the prompt from a file"},
        {"--chat", NULL, CLI_FLAG, &o.chat, 1, 0, "apply the model's chat template"},
        {"--system", NULL, CLI_STR, &o.system, 1, 0, "system message (with --chat)"},
        {"--n-predict", "-n", CLI_INT, &o.n_predict, 1, 1 << 20, "tokens to generate (default 128)"},
        {"--temp", NULL, CLI_FLOAT, &o.temp, 0, 100, "temperature; 0 = greedy (default 0)"},
        {"--top-k", NULL, CLI_INT, &o.top_k, 0, 1 << 30, "top-k (0 = off)"},
        {"--top-p", NULL, CLI_FLOAT, &o.top_p, 1e-9, 1, "top-p (1 = off)"},
        {"--min-p", NULL, CLI_FLOAT, &o.min_p, 0, 1, "min-p (0 = off)"},
        {"--repeat-penalty", NULL, CLI_FLOAT, &o.repeat_penalty, 1e-3, 100, "repetition penalty (1 = off)"},
        {"--presence-penalty", NULL, CLI_FLOAT, &o.presence, -2, 2, "presence penalty"},
        {"--frequency-penalty", NULL, CLI_FLOAT, &o.frequency, -2, 2, "frequency penalty"},
        {"--seed", NULL, CLI_INT, &o.seed, 0, 9.2e18, "sampling seed (default 0)"},
        {"--threads", "-t", CLI_INT, &o.threads, 0, 1024, "CPU threads (default: all cores)"},
        {"--ctx", "-c", CLI_INT, &o.ctx, 0, 1 << 24, "context length (default: the model's)"},
        {"--batch", "-b", CLI_INT, &o.batch, 1, 8192, "prefill chunk size in tokens (default 512)"},
        {"--ignore-eos", NULL, CLI_FLAG, &o.ignore_eos, 1, 0, "keep generating past end-of-turn tokens"},
        {"--special", NULL, CLI_FLAG, &o.special, 1, 0, "parse special tokens in a raw prompt"},
        {"--regex", NULL, CLI_STR, &o.regex, 1, 0, "constrain the output to full-match this regex"},
        {"--choice", NULL, CLI_STRS, &o.choices, 1, 0, "constrain the output to one of these texts (repeat)"},
        {"--json", NULL, CLI_FLAG, &o.json, 1, 0, "print one JSON object instead of streaming"},
        {"--load", NULL, CLI_STR, &o.load, 1, 0,
         "model file: auto (default), mmap, or read (into huge pages)"},
    };
    if (!cli_parse("generate",
                   "[-m MODEL] (-p TEXT | -f FILE) [--chat] [--system TEXT] [-n N] "
                   "[--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] "
                   "[--threads N] [--ignore-eos] [--regex R | --choice A --choice B ...] [--json]",
                   opts, TR_ARRAY_LEN(opts), argc, argv, &help))
        return 2;
    if (help) return 0;
    if (!!o.prompt == !!o.file) {
        fprintf(stderr, "trellis generate: give exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    if (o.regex && !o.regex[0]) {
        fprintf(stderr, "trellis generate: --regex is empty\n");
        return 2;
    }
    if (o.system && !o.chat) {
        fprintf(stderr, "trellis generate: --system needs --chat\n");
        return 2;
    }
    sampler_params sp = tr_sampler_params_default();
    sp.temperature = (float)o.temp;
    sp.top_k = (int32_t)o.top_k;
    sp.top_p = (float)o.top_p;
    sp.min_p = (float)o.min_p;
    sp.repetition_penalty = (float)o.repeat_penalty;
    sp.presence_penalty = (float)o.presence;
    sp.frequency_penalty = (float)o.frequency;
    sp.seed = (uint64_t)o.seed;
    tr_diag d = {0};
    tr_status s = tr_sampler_params_validate(&sp, &d);
    if (s) {
        cli_report("generate", "bad sampling parameters", s, &d);
        return 2;
    }

    char *user = NULL;
    size_t user_len;
    if (o.file) {
        if (tr_read_file(o.file, &user, &user_len) != 0) {
            fprintf(stderr, "trellis generate: cannot read prompt file '%s'\n", o.file);
            return 1;
        }
    } else {
        user = strdup(o.prompt);
        user_len = strlen(o.prompt);
    }
    /* a NUL byte in a prompt file counts as invalid: the prompt is a C string */
    size_t bad = TR_MIN(tr_utf8_invalid_at(user, user_len), strlen(user));
    if (bad != user_len) {
        fprintf(stderr, "trellis generate: the prompt is not valid UTF-8 (at byte %zu)\n", bad);
        free(user);
        return 1;
    }

    gguf_load load;
    if (!cli_parse_load("generate", o.load, &load)) {
        free(user);
        return 2;
    }
    cli_loaded L;
    if (!cli_load("generate", o.model, load, true, (int)o.threads, (int32_t)o.batch, &L)) {
        free(user);
        return 1;
    }
    o.threads = tr_backend_get_info(L.be).threads;
    const model_hparams *hp = tr_model_get_hparams(L.model);
    int rc = 1;
    char *text = NULL;
    int32_t *ids = NULL, *page_table = NULL;
    size_t n_ids = 0;
    float *logits = NULL;
    sampler *smp = NULL;
    tr_kv_layout kv = {0};
    gen_result r = {0};
    gen_constraint con = {0};
    if (!constraint_build(&o, L.tok, &con)) {
        cli_loaded_free(&L);
        free(user);
        return 2;
    }

    bool parse_special = false;
    s = build_prompt(&o, &L, user, &text, &parse_special, &d);
    if (s) {
        cli_report("generate", "cannot build the prompt", s, &d);
        goto done;
    }
    int32_t *raw = NULL;
    size_t n_raw = 0;
    s = tr_tokenizer_encode(L.tok, text, strlen(text), parse_special, &raw, &n_raw);
    if (s) {
        cli_report("generate", "cannot tokenize the prompt", s, NULL);
        goto done;
    }
    bool bos = tr_tokenizer_add_bos(L.tok) && tr_tokenizer_bos(L.tok) >= 0;
    ids = malloc((n_raw + 1) * sizeof *ids);
    if (!ids) {
        free(raw);
        goto done;
    }
    if (bos) ids[n_ids++] = tr_tokenizer_bos(L.tok);
    memcpy(ids + n_ids, raw, n_raw * sizeof *ids);
    n_ids += n_raw;
    free(raw);
    if (n_ids == 0) {
        fprintf(stderr, "trellis generate: the prompt is empty (no tokens to start from)\n");
        goto done;
    }
    int64_t ctx = o.ctx > 0 ? o.ctx : hp->n_ctx_train;
    if ((int64_t)n_ids >= ctx) {
        fprintf(stderr,
                "trellis generate: the prompt is %zu tokens, longer than the context "
                "of %lld tokens allows (it must leave room for at least one new token)\n",
                n_ids, (long long)ctx);
        goto done;
    }
    int64_t n_predict = TR_MIN(o.n_predict, ctx - (int64_t)n_ids);
    int64_t total = (int64_t)n_ids + n_predict;
    int32_t n_pages = (int32_t)((total + GEN_PAGE_SIZE - 1) / GEN_PAGE_SIZE);
    s = tr_model_kv_alloc(L.model, n_pages, GEN_PAGE_SIZE, TR_DTYPE_F16, &kv);
    page_table = malloc((size_t)n_pages * sizeof *page_table);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    if (s || !page_table || !logits) {
        fprintf(stderr, "trellis generate: cannot allocate the KV cache (%d pages)\n", n_pages);
        goto done;
    }
    for (int32_t i = 0; i < n_pages; i++) page_table[i] = i;
    s = tr_sampler_new(&sp, hp->n_vocab, &smp, &d);
    if (s) {
        cli_report("generate", "cannot create the sampler", s, &d);
        goto done;
    }

    int32_t *pos = malloc((size_t)o.batch * sizeof *pos);
    int32_t *seq = calloc((size_t)o.batch, sizeof *seq);
    if (!pos || !seq) {
        free(pos);
        free(seq);
        goto done;
    }
    const int32_t *tables[1] = {page_table};
    tr_batch b = {.pos = pos, .seq = seq, .n_seqs = 1, .page_table = tables,
                  .n_pages = &n_pages};
    /* prefill in chunks; logits only for the prompt's last token */
    uint64_t t0 = tr_now_ns();
    for (size_t at = 0; at < n_ids && s == TR_OK;) {
        int32_t n = (int32_t)TR_MIN((size_t)o.batch, n_ids - at);
        for (int32_t i = 0; i < n; i++) pos[i] = (int32_t)(at + (size_t)i);
        b.n_tokens = n;
        bool last = at + (size_t)n == n_ids;
        int32_t row = n - 1;
        s = tr_model_forward(L.model, &kv, &b, ids + at, &row, last ? 1 : 0, logits);
        at += (size_t)n;
    }
    r.prefill_ms = (double)(tr_now_ns() - t0) / 1e6;
    for (size_t i = 0; i < n_ids && s == TR_OK; i++) tr_sampler_accept(smp, ids[i]);

    tokenizer_stream ts;
    tr_tokenizer_stream_init(&ts, false);
    r.finish = "length";
    uint64_t t1 = tr_now_ns();
    int32_t p = (int32_t)n_ids;
    for (int64_t k = 0; k < n_predict && s == TR_OK; k++) {
        int32_t tok;
        const uint64_t *mask = NULL;
        if (con.m) {
            s = tr_grammar_matcher_fill_mask(con.m, con.mask, con.mask_words);
            if (s) break;
            mask = con.mask;
        }
        s = tr_sampler_sample(smp, logits, mask, &tok, NULL);
        if (s) {
            fprintf(stderr, "trellis generate: sampling failed: %s\n", tr_sampler_last_error(smp));
            break;
        }
        if (con.m && (s = tr_grammar_matcher_accept_token(con.m, tok))) break;
        if ((!o.ignore_eos || con.m) && tr_tokenizer_is_eog(L.tok, tok)) {
            tr_sampler_accept(smp, tok);
            r.finish = "stop";
            break;
        }
        /* Jump-forward (runtime/engine/constraint.c, the engine's code):
         * the bytes the grammar forces next run with the sampled token as
         * one chunk instead of one decode step each, re-encoded together
         * with it. */
        int32_t chunk[CONSTRAINT_JF_MAX_TOKENS];
        int32_t n_chunk = 1;
        chunk[0] = tok;
        if (con.m) {
            int64_t room = TR_MIN((int64_t)TR_ARRAY_LEN(chunk), o.batch);
            room = TR_MIN(room, n_predict - k);
            s = tr_constraint_jump_forward(L.tok, &tr_constraint_matcher_ops, con.m, tok,
                                        (int32_t)room, chunk, &n_chunk);
            if (s) break;
        }
        for (int32_t i = 0; i < n_chunk && s == TR_OK; i++) {
            tr_sampler_accept(smp, chunk[i]);
            if (!append_id(&r, chunk[i])) {
                s = TR_ERR_NOMEM;
                break;
            }
            char piece[512];
            size_t plen = 0;
            s = tr_tokenizer_stream_push(&ts, L.tok, chunk[i], piece, sizeof piece, &plen);
            if (s) break;
            if (!append_text(&r, piece, plen)) s = TR_ERR_NOMEM;
            if (!o.json && plen) {
                fwrite(piece, 1, plen, stdout);
                fflush(stdout);
            }
        }
        r.n_forced_tokens += n_chunk - 1;
        k += n_chunk - 1;
        if (s) break;
        if (con.m && tr_constraint_matcher_ops.is_done(con.m)) {
            r.finish = "stop"; /* the grammar is complete: only EOS could follow */
            break;
        }
        if (k + 1 >= n_predict) break; /* no forward needed for the last one */
        for (int32_t i = 0; i < n_chunk; i++) pos[i] = p++;
        b.n_tokens = n_chunk;
        int32_t row = n_chunk - 1;
        s = tr_model_forward(L.model, &kv, &b, chunk, &row, 1, logits);
        r.n_decode_steps += n_chunk;
        r.n_forward++;
    }
    r.decode_ms = (double)(tr_now_ns() - t1) / 1e6;
    char tail[16];
    size_t tl = tr_tokenizer_stream_flush(&ts, tail, sizeof tail);
    append_text(&r, tail, tl);
    if (!o.json) {
        fwrite(tail, 1, tl, stdout);
        printf("\n");
    }
    free(pos);
    free(seq);
    if (s) {
        cli_report("generate", "generation failed", s, NULL);
        goto done;
    }
    if (o.json) {
        print_json(&o, &r, &con, n_ids, L.load_ms, tr_gguf_load_name(tr_gguf_load_used(L.file)));
    } else {
        fprintf(stderr,
                "\n[prompt %zu tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s | %s]\n",
                n_ids, r.prefill_ms > 0 ? n_ids / (r.prefill_ms / 1e3) : 0.0, r.n_ids,
                r.decode_ms > 0 ? r.n_decode_steps / (r.decode_ms / 1e3) : 0.0, r.finish);
    }
    rc = 0;
done:
    constraint_free(&con);
    tr_sampler_free(smp);
    free(logits);
    free(page_table);
    if (kv.base) tr_model_kv_free(L.model, &kv);
    free(ids);
    free(text);
    free(r.ids);
    free(r.text);
    free(user);
    cli_loaded_free(&L);
    return rc;
}
