/* engine.c — the engine object: creation and destruction, the engine
 * thread's loop, the input and output queues, control messages, stats,
 * and the small utilities of the public API (include/trellis.h).
 *
 * Layering: runtime/engine (see engine_compute_internal.h). Threads: the public functions
 * here run on the embedder's threads and touch only the queues (in_mu,
 * out_mu), the stats snapshot (stats_mu) and immutable fields; everything
 * else belongs to the engine thread (engine_main and what it calls).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/engine/engine_internal.h"
#include "runtime/spec/spec.h"

#include "runtime/chat/chat.h"
#include "runtime/vocab/vocab.h"

/* every TRELLIS_ERR_x equals the core's TR_ERR_x */
_Static_assert(TRELLIS_OK == TR_OK, "ok");
_Static_assert(TRELLIS_ERR_NOMEM == TR_ERR_NOMEM, "nomem");
_Static_assert(TRELLIS_ERR_INVALID_ARG == TR_ERR_INVALID_ARG, "arg");
_Static_assert(TRELLIS_ERR_IO == TR_ERR_IO, "io");
_Static_assert(TRELLIS_ERR_FORMAT == TR_ERR_FORMAT, "format");
_Static_assert(TRELLIS_ERR_UNSUPPORTED == TR_ERR_UNSUPPORTED, "unsupported");
_Static_assert(TRELLIS_ERR_NOT_FOUND == TR_ERR_NOT_FOUND, "not found");
_Static_assert(TRELLIS_ERR_OVERFLOW == TR_ERR_OVERFLOW, "overflow");
_Static_assert(TRELLIS_ERR_LIMIT == TR_ERR_LIMIT, "limit");
_Static_assert(TRELLIS_ERR_STATE == TR_ERR_STATE, "state");
_Static_assert(TRELLIS_ERR_FULL == TR_ERR_FULL, "full");
_Static_assert(TRELLIS_ERR_CANCELLED == TR_ERR_CANCELLED, "cancelled");
_Static_assert(TRELLIS_ERR_TOO_LONG == TR_ERR_TOO_LONG, "too long");
_Static_assert(TRELLIS_ERR_INTERNAL == TR_ERR_INTERNAL, "internal");

const char *trellis_status_name(int status) {
    return tr_status_name((tr_status)status);
}
const char *trellis_status_message(int status) {
    return tr_status_message((tr_status)status);
}

const char *trellis_finish_name(trellis_finish f) {
    switch (f) {
    case TRELLIS_FINISH_STOP: return "stop";
    case TRELLIS_FINISH_LENGTH: return "length";
    case TRELLIS_FINISH_CANCELLED: return "cancelled";
    case TRELLIS_FINISH_ERROR: return "error";
    default: return "";
    }
}

/* ---- the request table (engine thread) ---- */

static size_t hash_slot(const trellis_engine *e, uint64_t id) {
    uint64_t z = id * 0x9e3779b97f4a7c15ull;
    return (size_t)(z >> 17) & (e->hash_cap - 1);
}

static bool hash_insert(trellis_engine *e, engine_req *r) {
    if (e->hash_n + 1 > e->hash_cap) {
        size_t cap = e->hash_cap * 2;
        engine_req **t = calloc(cap, sizeof *t);
        if (!t) return false;
        engine_req **old = e->hash;
        size_t old_cap = e->hash_cap;
        e->hash = t;
        e->hash_cap = cap;
        for (size_t i = 0; i < old_cap; i++) {
            for (engine_req *q = old[i], *nx; q; q = nx) {
                nx = q->hnext;
                size_t h = hash_slot(e, q->id);
                q->hnext = t[h];
                t[h] = q;
            }
        }
        free(old);
    }
    size_t h = hash_slot(e, r->id);
    r->hnext = e->hash[h];
    e->hash[h] = r;
    e->hash_n++;
    return true;
}

engine_req *tr_engine_hash_find(const trellis_engine *e, uint64_t id) {
    for (engine_req *q = e->hash[hash_slot(e, id)]; q; q = q->hnext)
        if (q->id == id) return q;
    return NULL;
}

void tr_engine_hash_remove(trellis_engine *e, engine_req *r) {
    engine_req **p = &e->hash[hash_slot(e, r->id)];
    while (*p && *p != r) p = &(*p)->hnext;
    if (*p) {
        *p = r->hnext;
        e->hash_n--;
    }
}

void tr_engine_req_free(engine_req *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n; i++) {
        engine_seq *s = &r->seqs[i];
        free(s->tokens);
        free(s->pages);
        free(s->spare);
        free(s->held);
        tr_stop_scan_free(s->stop_scan);
        free(s->out_text);
        free(s->out_tokens);
        free(s->out_lp);
        free(s->plp);
        tr_ngram_free(s->ngram);
        free(s->dpages);
        free(s->dq);
        tr_sampler_free(s->smp);
        if (s->cstate && r->cops) r->cops->free(s->cstate);
    }
    tr_sampler_free(r->plp_smp);
    if (r->cstate0 && r->cops) r->cops->free(r->cstate0);
    for (int32_t k = 0; k < r->n_stop; k++) free(r->stop[k]);
    free(r->stop);
    free(r->stop_len);
    free(r->stop_tokens);
    tr_stop_regex_set_free(r->stop_rx);
    free(r->bias);
    free(r->prompt);
    free(r);
}

/* ---- intake (engine thread) ---- */

static void intake(trellis_engine *e, engine_req *r) {
    if (!hash_insert(e, r)) {
        /* cannot track it: every sample ends with an error right away (the
         * DONE events come from the spare boxes if need be) */
        for (int32_t i = 0, n = r->n; i < n; i++) {
            bool last = r->n_done == n - 1;
            tr_out_finish(e, &r->seqs[i], TRELLIS_FINISH_ERROR, TR_ERR_NOMEM,
                       "out of memory");
            if (last) return;
        }
    }
    r->ns = e->opt.no_radix ? engine_ns_private(r->id) : r->ns;
    for (int32_t i = 0; i < r->n; i++) {
        engine_seq *s = &r->seqs[i];
        s->stop_index = -1;
        s->stop_token = -1;
        s->logit_row = -1;
        tr_tokenizer_stream_init(&s->ts, false);
        if (r->cops) {
            /* clones are made before sample 0 accepts anything */
            s->cstate = i == 0 ? r->cstate0 : r->cops->clone(r->seqs[0].cstate);
            if (i == 0) r->cstate0 = NULL;
        }
    }
    int32_t n = r->n;
    for (int32_t i = 0; i < n; i++) {
        engine_seq *s = &r->seqs[i];
        bool last = r->n_done == n - 1;
        if (r->cops && !s->cstate) {
            tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, TR_ERR_NOMEM,
                           "cannot copy the constraint state for this sample");
            if (last) return;
            continue;
        }
        tr_sched_waiting_push_back(e, s);
    }
    tr_disk_lookup(e, r);
}

static void cancel(trellis_engine *e, uint64_t id) {
    engine_req *r = tr_engine_hash_find(e, id);
    if (!r) return;
    r->cancelled = true;
    int32_t n = r->n;
    for (int32_t i = 0; i < n; i++) {
        engine_seq *s = &r->seqs[i];
        if (s->state == SEQ_DONE) continue;
        bool last = r->n_done == n - 1;
        tr_engine_end_seq(e, s, TRELLIS_FINISH_CANCELLED, TR_ERR_CANCELLED, NULL);
        if (last) return; /* r is freed */
    }
}

/* One running sequence's ids (engine_internal.h, "Pages of a sequence"):
 * all held (locked); a global id in the tree iff its slot is below
 * n_locked; windowed ids -1 below let_go. *private_ids += the ids it holds
 * that are not the tree's. */
static tr_status check_seq_pages(trellis_engine *e, const engine_seq *q,
                                 int64_t *private_ids) {
    for (int32_t p = 0; p < q->n_pages; p++) {
        for (int32_t u = 0; u < e->W; u++) {
            int32_t id = q->pages[(int64_t)p * e->W + u];
            bool windowed = e->unit_window[u] > 0;
            if (windowed && id == -1) continue;
            kv_page_state ps = tr_kv_pool_page_state(e->pool, id);
            bool in_tree = tr_kv_pool_page_in_tree(e->pool, id);
            bool bad = ps != KV_PAGE_LOCKED || (windowed && p < q->let_go) ||
                       (!windowed && in_tree != (p < q->n_locked)) ||
                       (windowed && in_tree && p >= q->n_locked);
            if (bad) {
                fprintf(stderr, "engine_check: sequence %llu/%d slot %d unit %d (id %d) "
                                "state %d in_tree %d, locked prefix %d, let go %d\n",
                        (unsigned long long)q->req->id, q->index, p, u, id, ps, in_tree,
                        q->n_locked, q->let_go);
                return TR_ERR_INTERNAL;
            }
            *private_ids += !in_tree;
        }
    }
    return TR_OK;
}

/* Page accounting every sequence must satisfy; TR_ERR_INTERNAL if not. */
static tr_status check_all(trellis_engine *e) {
    tr_status s = tr_radix_tree_check(e->tree);
    if (s != TR_OK) return s;
    int64_t private_pages = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        engine_seq *q = e->running[i];
        if (q->state != SEQ_RUNNING || q->n_locked > q->n_pages ||
            q->n_kv > q->n_pages * e->page_size || q->n_kv >= q->len + 1 ||
            (q->n_locked > 0) != (q->node != NULL)) {
            fprintf(stderr, "engine_check: running sequence %llu/%d: state %d "
                            "locked %d pages %d kv %d len %d\n",
                    (unsigned long long)q->req->id, q->index, q->state,
                    q->n_locked, q->n_pages, q->n_kv, q->len);
            return TR_ERR_INTERNAL;
        }
        int64_t held = 0;
        if (check_seq_pages(e, q, &held) != TR_OK) return TR_ERR_INTERNAL;
        private_pages += held;
    }
    int32_t n = 0;
    bool disk_locks = false; /* a waiter pinning its prefix (disk_tier.c) */
    for (engine_seq *q = e->wait_head; q; q = q->next, n++) {
        disk_locks = disk_locks || q->req->disk_node;
        if (q->state != SEQ_WAITING || q->n_pages != 0 || q->node) {
            fprintf(stderr, "engine_check: waiting sequence holds pages\n");
            return TR_ERR_INTERNAL;
        }
    }
    if (n != e->n_waiting) {
        fprintf(stderr, "engine_check: waiting count %d, list %d\n",
                e->n_waiting, n);
        return TR_ERR_INTERNAL;
    }
    /* private pages are exactly the locked pages outside the tree */
    int64_t locked_outside = 0;
    for (int32_t p = 0; p < e->n_pages; p++)
        if (tr_kv_pool_page_state(e->pool, p) == KV_PAGE_LOCKED &&
            !tr_kv_pool_page_in_tree(e->pool, p))
            locked_outside++;
    if (locked_outside != private_pages) {
        fprintf(stderr, "engine_check: %lld private pages in the pool, "
                        "sequences hold %lld\n",
                (long long)locked_outside, (long long)private_pages);
        return TR_ERR_INTERNAL;
    }
    if (tr_draft_check(e) != TR_OK) return TR_ERR_INTERNAL;
    if (e->n_running == 0 && !disk_locks) {
        kv_pool_stats ps;
        tr_kv_pool_stats_get(e->pool, &ps);
        if (ps.n_locked != 0) {
            fprintf(stderr, "engine_check: idle but %d pages locked\n",
                    ps.n_locked);
            return TR_ERR_INTERNAL;
        }
    }
    return TR_OK;
}

static void sync_done(trellis_engine *e, engine_sync *sy, tr_status s) {
    pthread_mutex_lock(&e->in_mu);
    sy->result = s;
    sy->done = true;
    pthread_cond_broadcast(&e->ctl_cond);
    pthread_mutex_unlock(&e->in_mu);
}

static void process(trellis_engine *e, engine_msg *m) {
    switch (m->kind) {
    case MSG_SUBMIT:
        intake(e, m->req);
        break;
    case MSG_CANCEL:
        cancel(e, m->id);
        break;
    case MSG_FLUSH:
        tr_radix_tree_flush(e->tree);
        tr_disk_flush(e);
        /* before the caller returns: stats read right after a flush must
         * show the freed pages (an idle engine publishes nothing else) */
        tr_engine_publish_stats(e);
        sync_done(e, m->sync, TR_OK);
        break;
    case MSG_CHECK:
        sync_done(e, m->sync, check_all(e));
        break;
    }
    free(m);
}

bool tr_engine_take_messages(trellis_engine *e, bool block, bool submits_only) {
    pthread_mutex_lock(&e->in_mu);
    if (block)
        while (!e->in_head && !e->quit && !e->disk_ready)
            pthread_cond_wait(&e->in_cond, &e->in_mu);
    engine_msg *list = e->in_head;
    e->in_head = e->in_tail = NULL;
    bool quit = e->quit;
    pthread_mutex_unlock(&e->in_mu);
    if (!submits_only) {
        engine_msg *d = e->deferred;
        e->deferred = e->deferred_tail = NULL;
        for (engine_msg *nx; d; d = nx) {
            nx = d->next;
            process(e, d);
        }
    }
    for (engine_msg *nx; list; list = nx) {
        nx = list->next;
        if (submits_only && list->kind != MSG_SUBMIT) {
            list->next = NULL;
            if (e->deferred_tail) e->deferred_tail->next = list;
            else e->deferred = list;
            e->deferred_tail = list;
            continue;
        }
        process(e, list);
    }
    return quit;
}

void tr_engine_publish_stats(trellis_engine *e) {
    trellis_stats *st = &e->st;
    uint64_t now = tr_now_ns();
    if (e->tps_t0 == 0) {
        e->tps_t0 = now;
        e->tps_gen0 = st->generated_tokens;
    } else if (now - e->tps_t0 >= 1000000000ull) {
        st->tokens_per_s = (double)(st->generated_tokens - e->tps_gen0) /
                           ((double)(now - e->tps_t0) / 1e9);
        e->tps_t0 = now;
        e->tps_gen0 = st->generated_tokens;
    }
    kv_pool_stats ps;
    tr_kv_pool_stats_get(e->pool, &ps);
    st->running = e->n_running;
    st->waiting = e->n_waiting;
    st->pages_total = ps.n_pages;
    st->pages_used = ps.n_locked;
    st->pages_cached = ps.n_cached;
    st->pages_free = ps.n_free;
    tr_disk_stats(e, st);
    tr_draft_stats(e, st);
    radix_tree_stats rs;
    tr_radix_tree_stats_get(e->tree, &rs);
    st->kv_window_stripped = rs.stripped_pages;
    st->cache_hit_rate = st->prompt_tokens
                             ? (double)st->cached_prompt_tokens /
                                   (double)st->prompt_tokens
                             : 0.0;
    pthread_mutex_lock(&e->stats_mu);
    e->snap = *st;
    pthread_mutex_unlock(&e->stats_mu);
}

static void *engine_main(void *arg) {
    trellis_engine *e = arg;
    for (;;) {
        /* requests waiting only for disk reads: sleep until they come */
        bool idle = e->n_running == 0 && (e->n_waiting == 0 || tr_disk_waiting_only(e)) &&
                    !e->deferred;
        if (tr_engine_take_messages(e, idle, false)) break;
        tr_disk_answers(e);
        if (e->n_running || (e->n_waiting && !tr_disk_waiting_only(e))) {
            tr_engine_step(e); /* publishes stats and events */
        } else {
            tr_engine_publish_stats(e);
            tr_out_publish(e);
        }
    }
    /* shutdown: end everything; nobody reads the events any more */
    while (e->n_running) {
        engine_seq *s = e->running[e->n_running - 1];
        tr_engine_end_seq(e, s, TRELLIS_FINISH_CANCELLED, TR_ERR_CANCELLED, NULL);
    }
    while (e->wait_head)
        tr_engine_end_seq(e, e->wait_head, TRELLIS_FINISH_CANCELLED,
                       TR_ERR_CANCELLED, NULL);
    for (engine_msg *d = e->deferred, *nx; d; d = nx) {
        nx = d->next;
        process(e, d);
    }
    e->deferred = e->deferred_tail = NULL;
    tr_disk_spill(e); /* what the cache holds outlives the process */
    tr_engine_publish_stats(e);
    tr_out_publish(e);
    return NULL;
}

/* ---- creation ---- */

/* The vocabulary grammars are compiled against, and their cache. Failure
 * only disables grammar constraints (submit and compile then say so). */
static tr_status build_vocab(trellis_engine *e) {
    tr_diag dg = {0};
    tr_status s = tr_vocab_from_tokenizer(e->tok, &e->gvocab, &dg);
    if (s == TR_OK) {
        s = tr_gcache_new(e->gvocab, (uint64_t)e->opt.grammar_cache_mb << 20,
                          &e->gcache);
        if (s != TR_OK) snprintf(dg.message, sizeof dg.message, "no grammar cache");
    }
    if (s != TR_OK) {
        tr_log(TR_LOG_WARN, "engine: no vocabulary for constraints: %s",
               dg.message[0] ? dg.message : tr_status_message(s));
        tr_grammar_vocab_free(e->gvocab);
        e->gvocab = NULL;
    }
    return s;
}

static void engine_destroy(trellis_engine *e) {
    if (!e) return;
    for (engine_event_box *b = e->out_head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    for (engine_event_box *b = e->ev_head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    for (engine_msg *m = e->in_head, *nx; m; m = nx) {
        nx = m->next;
        if (m->kind == MSG_SUBMIT) tr_engine_req_free(m->req);
        else if (m->sync) sync_done(e, m->sync, TR_ERR_CANCELLED);
        free(m);
    }
    for (size_t i = 0; e->hash && i < e->hash_cap; i++) {
        for (engine_req *q = e->hash[i], *nx; q; q = nx) {
            nx = q->hnext;
            tr_engine_req_free(q);
        }
    }
    free(e->hash);
    tr_disk_close(e); /* its queued writes first; it reads no page */
    tr_radix_tree_free(e->tree);
    tr_kv_pool_free(e->pool);
    tr_draft_free(e); /* before the target: it may share its backend */
    if (e->compute.ops && e->compute.ops->destroy)
        e->compute.ops->destroy(e->compute.ctx);
    /* after the requests: their samples hold handles (which would
     * survive the cache anyway: handles are reference-counted) */
    tr_gcache_free(e->gcache);
    tr_grammar_vocab_free(e->gvocab);
    tr_tokenizer_free(e->tok);
    tr_gguf_close(e->file);
    free(e->chat_system);
    free(e->chat_template);
    free(e->is_eog);
    free(e->eog_ids);
    free(e->piece);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_rows);
    free(e->b_npages);
    free(e->b_tables);
    free(e->b_seqs);
    free(e->row_seqs);
    free(e->logits);
    free(e->row_tok);
    free(e->row_st);
    free(e->row_lp);
    free(e->masks);
    free(e->row_mask);
    free(e->plp_bidx);
    free(e->plp_seqs);
    free(e->running);
    free(e->cand);
    pthread_mutex_destroy(&e->in_mu);
    pthread_cond_destroy(&e->in_cond);
    pthread_cond_destroy(&e->ctl_cond);
    pthread_mutex_destroy(&e->out_mu);
    pthread_cond_destroy(&e->out_cond);
    pthread_mutex_destroy(&e->stats_mu);
    pthread_mutex_destroy(&e->worker.mu);
    pthread_cond_destroy(&e->worker.cond);
    free(e);
}

/* The template family a vocabulary's turn markers name, for a model file
 * that carries no chat template (the Gemma 3 270M GGUF has none): both
 * markers must be special tokens, so that the rendered prompt encodes to
 * the turn tokens the model was trained on. CHAT_TEMPLATE_NONE if none. */
static chat_template_kind kind_from_vocab(const tokenizer *t) {
    static const struct {
        const char *open, *close;
        chat_template_kind kind;
    } k_markers[] = {
        {"<|start_header_id|>", "<|eot_id|>", CHAT_TEMPLATE_LLAMA3},
        {"<start_of_turn>", "<end_of_turn>", CHAT_TEMPLATE_GEMMA},
        {"<|im_start|>", "<|im_end|>", CHAT_TEMPLATE_CHATML},
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(k_markers); i++) {
        int32_t a = tr_tokenizer_find(t, k_markers[i].open);
        int32_t b = tr_tokenizer_find(t, k_markers[i].close);
        if (a >= 0 && b >= 0 && tr_tokenizer_is_special(t, a) &&
            tr_tokenizer_is_special(t, b))
            return k_markers[i].kind;
    }
    return CHAT_TEMPLATE_NONE;
}

static void load_chat_template(trellis_engine *e) {
    char *tmpl = NULL;
    gguf_str g = {0};
    if (e->file && tr_gguf_get_str(e->file, "tokenizer.chat_template", &g) == TR_OK) {
        tmpl = malloc(g.len + 1);
        if (!tmpl) return;
        memcpy(tmpl, g.ptr, g.len);
        tmpl[g.len] = 0;
    }
    chat_template_kind kind = CHAT_TEMPLATE_NONE;
    tr_diag d = {0};
    if (tr_chat_template_detect(tmpl, &kind, &d) == TR_OK) {
        e->chat_kind = (int)kind;
        if (tr_chat_template_default_system(tmpl, &e->chat_system) != TR_OK)
            e->chat_system = NULL;
    } else if (!tmpl && (kind = kind_from_vocab(e->tok)) != CHAT_TEMPLATE_NONE) {
        e->chat_kind = (int)kind;
        tr_log(TR_LOG_INFO,
               "engine: the model file has no chat template; chat requests use "
               "the %s template, whose turn tokens its vocabulary has",
               tr_chat_template_kind_name(kind));
    } else {
        tr_log(TR_LOG_INFO, "engine: no chat template (%s)", d.message);
    }
    e->chat_template = tmpl; /* reported as is, even when not recognised */
}

static void drop_compute(const engine_compute *c) {
    if (c && c->ops && c->ops->destroy) c->ops->destroy(c->ctx);
}

tr_status tr_engine_new_custom(const trellis_engine_options *options,
                            gguf_file *file, tokenizer *tok,
                            const engine_compute *compute, trellis_engine **out,
                            char *err, size_t err_cap) {
    return tr_engine_new_custom_draft(options, file, tok, compute, NULL, NULL, out, err,
                                      err_cap);
}

tr_status tr_engine_new_custom_draft(const trellis_engine_options *options,
                                     gguf_file *file, tokenizer *tok,
                                     const engine_compute *compute,
                                     const engine_compute *draft, gguf_file *draft_file,
                                     trellis_engine **out, char *err, size_t err_cap) {
    trellis_engine *e = calloc(1, sizeof *e);
    if (!e) {
        drop_compute(compute);
        drop_compute(draft);
        tr_gguf_close(draft_file);
        tr_tokenizer_free(tok);
        tr_gguf_close(file);
        return tr_errf(err, err_cap, TR_ERR_NOMEM, "out of memory");
    }
    e->file = file;
    e->tok = tok;
    if (compute) e->compute = *compute;
    pthread_mutex_init(&e->in_mu, NULL);
    pthread_cond_init(&e->in_cond, NULL);
    pthread_cond_init(&e->ctl_cond, NULL);
    pthread_mutex_init(&e->out_mu, NULL);
    pthread_cond_init(&e->out_cond, NULL);
    pthread_mutex_init(&e->stats_mu, NULL);
    pthread_mutex_init(&e->worker.mu, NULL);
    pthread_cond_init(&e->worker.cond, NULL);
    atomic_init(&e->next_id, 1);
    atomic_init(&e->n_submitted, 0);
    tr_status s;
    if (!tok || !compute || !compute->ops || !compute->ops->forward ||
        !out) {
        s = tr_errf(err, err_cap, TR_ERR_INVALID_ARG,
                    "engine: missing tokenizer or compute");
        goto fail;
    }
    trellis_engine_options o;
    if ((s = tr_engine_options_resolve(options, &o, err, err_cap)) != TR_OK) goto fail;
    /* what the compute side holds or takes bounds the rest */
    o.max_batch_tokens = TR_MIN(o.max_batch_tokens, compute->max_batch);
    o.max_running = TR_MIN(o.max_running, o.max_batch_tokens);
    o.chunk_size = TR_MIN(o.chunk_size, o.max_batch_tokens);
    o.page_size = compute->page_size;
    o.kv_pages = compute->n_pages;
    o.threads = compute->threads;
    o.device = compute->device ? compute->device : "custom"; /* static */
    if (o.ctx < 0 || o.ctx > compute->n_ctx) {
        s = tr_errf(err, err_cap, TR_ERR_INVALID_ARG,
                    "context %d is outside 1..%d (the model's training context)",
                    o.ctx, compute->n_ctx);
        goto fail;
    }
    if (o.ctx == 0) o.ctx = compute->n_ctx;
    e->opt = o;
    e->opt.draft_model = NULL; /* the caller's string: info gives draft_arch */
    e->n_vocab = compute->n_vocab;
    e->n_ctx = o.ctx;
    e->page_size = compute->page_size;
    e->n_pages = compute->n_pages;
    e->W = compute->kv_units > 1 ? compute->kv_units : 1;
    for (int32_t u = 0; u < e->W && e->W > 1; u++) {
        e->unit_window[u] = compute->kv_unit_window[u];
        e->windowed |= e->unit_window[u] > 0;
    }
    e->n_words = ((size_t)e->n_vocab + 63) / 64;
    if (tr_tokenizer_n_vocab(tok) != e->n_vocab) {
        s = tr_errf(err, err_cap, TR_ERR_FORMAT,
                    "the tokenizer has %d tokens but the model %d",
                    tr_tokenizer_n_vocab(tok), e->n_vocab);
        goto fail;
    }
    e->eos = tr_tokenizer_eos(tok);
    e->add_bos = tr_tokenizer_add_bos(tok) && tr_tokenizer_bos(tok) >= 0;
    e->max_piece = 3 * (tr_tokenizer_max_token_len(tok) + 1);

    s = tr_kv_pool_new(e->n_pages, e->page_size, NULL, &e->pool);
    if (s == TR_OK)
        s = tr_radix_tree_new_units(e->pool, NULL, e->W, e->unit_window, &e->tree);
    if (s != TR_OK) {
        s = tr_errf(err, err_cap, s, "cannot create the KV page pool (%d pages)",
                    e->n_pages);
        goto fail;
    }
    if ((s = tr_disk_open(e, err, err_cap)) != TR_OK) goto fail;
    size_t nb = (size_t)o.max_batch_tokens, nr = (size_t)o.max_running;
    e->is_eog = calloc((size_t)e->n_vocab, 1);
    e->piece = malloc(e->max_piece);
    e->b_tokens = malloc(nb * sizeof(int32_t));
    e->b_pos = malloc(nb * sizeof(int32_t));
    e->b_seq = malloc(nb * sizeof(int32_t));
    /* logits rows: the sampled ones, then prompt log-prob rows */
    e->b_rows = malloc((nr + TR_PLP_ROWS_MAX + TR_SPEC_ROWS_MAX) * sizeof(int32_t));
    e->plp_bidx = malloc(TR_PLP_ROWS_MAX * sizeof(int32_t));
    e->plp_seqs = malloc(TR_PLP_ROWS_MAX * sizeof(*e->plp_seqs));
    e->b_npages = malloc(nr * sizeof(int32_t));
    e->b_tables = malloc(nr * sizeof(*e->b_tables));
    e->b_seqs = malloc(nr * sizeof(*e->b_seqs));
    e->row_seqs = malloc(nr * sizeof(*e->row_seqs));
    e->logits = malloc(nr * (size_t)e->n_vocab * sizeof(float));
    e->logits_rows = (int32_t)nr; /* grown by tr_plp_reserve_logits */
    e->row_tok = malloc(nr * sizeof(*e->row_tok));
    e->row_st = malloc(nr * sizeof(*e->row_st));
    e->row_lp = malloc(nr * sizeof(*e->row_lp));
    e->masks = malloc(nr * e->n_words * sizeof(uint64_t));
    e->row_mask = malloc((nr + TR_PLP_ROWS_MAX + TR_SPEC_ROWS_MAX) * sizeof(*e->row_mask));
    e->running = malloc(nr * sizeof(*e->running));
    e->cand = malloc(SCHED_SCAN_MAX * sizeof(*e->cand));
    e->hash_cap = 64;
    e->hash = calloc(e->hash_cap, sizeof *e->hash);
    if (!e->is_eog || !e->piece || !e->b_tokens || !e->b_pos || !e->b_seq ||
        !e->b_rows || !e->b_npages || !e->b_tables || !e->b_seqs ||
        !e->row_seqs || !e->logits || !e->masks || !e->row_mask || !e->running || !e->cand ||
        !e->row_tok || !e->row_st || !e->row_lp || !e->plp_bidx || !e->plp_seqs ||
        !e->hash) {
        s = tr_errf(err, err_cap, TR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < e->n_vocab; i++) {
        e->is_eog[i] = tr_tokenizer_is_eog(tok, i);
        e->n_eog += e->is_eog[i];
    }
    e->eog_ids = malloc(((size_t)e->n_eog + 1) * sizeof *e->eog_ids);
    if (!e->eog_ids) {
        s = tr_errf(err, err_cap, TR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0, k = 0; i < e->n_vocab; i++)
        if (e->is_eog[i]) e->eog_ids[k++] = i;
    build_vocab(e); /* failure only disables grammar constraints */
    load_chat_template(e);
    if (draft) {
        const engine_compute *dc = draft;
        gguf_file *df = draft_file;
        draft = NULL; /* attach owns both from here, also on failure */
        draft_file = NULL;
        if ((s = tr_draft_attach(e, dc, df, err, err_cap)) != TR_OK) goto fail;
    }

    if (!o.no_overlap && (s = tr_worker_start(e)) != TR_OK) {
        s = tr_errf(err, err_cap, s, "cannot start the compute thread");
        goto fail;
    }
    {
        /* a first snapshot so that stats are meaningful before any step */
        trellis_stats st = {0};
        st.pages_total = st.pages_free = e->n_pages;
        e->snap = st;
    }
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        tr_worker_stop(e);
        s = tr_errf(err, err_cap, TR_ERR_INTERNAL,
                    "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    *out = e;
    return TR_OK;
fail:
    drop_compute(draft);
    tr_gguf_close(draft_file);
    engine_destroy(e);
    return s;
}

/* The first token whose bytes or type differ between two vocabularies of
 * the same size, or -1 when they are the same. */
static int32_t vocab_differs(const tokenizer *a, const tokenizer *b) {
    for (int32_t i = 0; i < tr_tokenizer_n_vocab(a); i++) {
        size_t la, lb;
        const uint8_t *pa = tr_tokenizer_token_bytes(a, i, &la);
        const uint8_t *pb = tr_tokenizer_token_bytes(b, i, &lb);
        if (la != lb || (la && memcmp(pa, pb, la) != 0) ||
            tr_tokenizer_type(a, i) != tr_tokenizer_type(b, i))
            return i;
    }
    return -1;
}

/* Opens options.draft_model on the target's backend as a compute object of
 * `positions` positions in pages of page_size (F16 K/V, full pages): its
 * file in *df, the compute in *dc (owning its model). */
static tr_status load_draft(const trellis_engine_options *o, tr_backend *be,
                            const tokenizer *tok, int64_t positions, int32_t page_size,
                            gguf_file **df, engine_compute *dc, char *err, size_t cap) {
    const char *path = o->draft_model;
    tr_diag d = {0};
    tokenizer *dt = NULL;
    model *m = NULL;
    tr_status s = tr_gguf_open_ex(path, (gguf_load)o->load, df, &d);
    if (s != TR_OK)
        return tr_errf(err, cap, s, "cannot open draft model '%s': %s", path,
                       d.message[0] ? d.message : tr_status_message(s));
    s = tr_tokenizer_from_gguf(*df, &dt, &d);
    if (s != TR_OK) {
        s = tr_errf(err, cap, s, "cannot build the tokenizer of draft model '%s': %s", path,
                    d.message[0] ? d.message : tr_status_message(s));
        goto fail;
    }
    int32_t nd = tr_tokenizer_n_vocab(dt);
    if (nd != tr_tokenizer_n_vocab(tok)) {
        s = tr_errf(err, cap, TR_ERR_INVALID_ARG,
                    "draft model '%s' cannot draft for this model: its vocabulary has %d "
                    "tokens, the model's %d (a draft must share the model's vocabulary)",
                    path, nd, tr_tokenizer_n_vocab(tok));
        goto fail;
    }
    int32_t at = vocab_differs(tok, dt);
    if (at >= 0) {
        s = tr_errf(err, cap, TR_ERR_INVALID_ARG,
                    "draft model '%s' cannot draft for this model: token %d differs "
                    "between the two vocabularies (in its bytes or its type; a draft must "
                    "share the model's vocabulary)",
                    path, at);
        goto fail;
    }
    s = tr_model_load_owning(*df, be, o->max_batch_tokens, &m, &d);
    if (s != TR_OK) {
        s = tr_errf(err, cap, s, "cannot load draft model '%s': %s", path,
                    d.message[0] ? d.message : tr_status_message(s));
        goto fail;
    }
    int32_t pages = (int32_t)TR_MIN((positions + page_size - 1) / page_size, INT32_MAX / 2);
    const char *why = NULL;
    s = tr_engine_compute_model_new(m, be, TR_MAX(pages, 1), page_size, TR_KV_F16, TR_KV_F16,
                                    false, ENGINE_OWN_MODEL, dc, &why);
    if (s != TR_OK) {
        tr_model_free(m);
        s = tr_errf(err, cap, s, "cannot allocate the draft model's KV (%d pages): %s", pages,
                    why ? why : tr_status_message(s));
        goto fail;
    }
    tr_tokenizer_free(dt);
    return TR_OK;
fail:
    tr_tokenizer_free(dt);
    tr_gguf_close(*df);
    *df = NULL;
    return s;
}

int trellis_engine_new(const char *model_path,
                       const trellis_engine_options *options,
                       trellis_engine **out, char *err, size_t err_cap) {
    if (!out) return tr_errf(err, err_cap, TR_ERR_INVALID_ARG, "out is NULL");
    trellis_engine_options o;
    tr_status s = tr_engine_options_resolve(options, &o, err, err_cap);
    if (s != TR_OK) return s;
    char def[4096];
    const char *path = model_path ? model_path
                                  : tr_default_model_path(def, sizeof def);
    if (!path)
        return tr_errf(err, err_cap, TR_ERR_INVALID_ARG,
                       "the default model path is too long");
    gguf_file *f = NULL;
    tokenizer *tok = NULL;
    tr_backend *be = NULL;
    model *m = NULL;
    tr_diag d = {0};
    _Static_assert(TRELLIS_LOAD_AUTO == (int)GGUF_LOAD_AUTO &&
                       TRELLIS_LOAD_MMAP == (int)GGUF_LOAD_MMAP &&
                       TRELLIS_LOAD_READ == (int)GGUF_LOAD_READ,
                   "trellis.h's load modes are gguf.h's");
    s = tr_gguf_open_ex(path, (gguf_load)o.load, &f, &d);
    if (s != TR_OK)
        return tr_errf(err, err_cap, s, "cannot open model '%s': %s", path,
                       d.message[0] ? d.message : tr_status_message(s));
    /* before the model may let go of the tensors' bytes */
    uint64_t file_fp = o.kv_cache_dir ? tr_disk_file_fingerprint(f) : 0;
    s = tr_tokenizer_from_gguf(f, &tok, &d);
    if (s != TR_OK) {
        tr_gguf_close(f);
        return tr_errf(err, err_cap, s, "cannot build the tokenizer of '%s': %s",
                       path, d.message[0] ? d.message : tr_status_message(s));
    }
    s = tr_backend_new(o.device, &(tr_backend_config){.threads = o.threads},
                       &be, &d);
    if (s != TR_OK) {
        tr_tokenizer_free(tok);
        tr_gguf_close(f);
        return tr_errf(err, err_cap, s, "cannot start the compute backend: %s",
                       d.message[0] ? d.message : tr_status_message(s));
    }
    /* the engine owns f and only this model reads its tensors */
    s = tr_model_load_owning(f, be, o.max_batch_tokens, &m, &d);
    if (s != TR_OK) {
        tr_backend_free(be);
        tr_tokenizer_free(tok);
        tr_gguf_close(f);
        return tr_errf(err, err_cap, s, "cannot load model '%s': %s", path,
                       d.message[0] ? d.message : tr_status_message(s));
    }
    tr_kv_type kt = tr_engine_kv_type(o.kv_type_k), vt = tr_engine_kv_type(o.kv_type_v);
    s = tr_engine_calibrate_keys(m, tok, kt, err, err_cap);
    if (s != TR_OK) {
        tr_model_free(m);
        tr_backend_free(be);
        tr_tokenizer_free(tok);
        tr_gguf_close(f);
        return s;
    }
    bool split = !o.kv_full_pages;
    tr_kv_units units;
    tr_model_kv_units(m, split, &units);
    uint64_t pb = tr_model_kv_page_bytes(m, o.page_size, kt, vt) / (uint64_t)units.n;
    int32_t n_pages = o.kv_pages;
    if (n_pages == 0) {
        uint64_t n = (uint64_t)o.kv_mb * 1024u * 1024u / (pb ? pb : 1);
        n_pages = (int32_t)TR_MIN(n, (uint64_t)INT32_MAX / 2);
        if (n_pages < 1) n_pages = 1;
    }
    engine_compute c;
    const char *why = NULL;
    s = tr_engine_compute_model_new(m, be, n_pages, o.page_size, kt, vt, split,
                                    ENGINE_OWN_BOTH, &c, &why);
    c.kv_fingerprint = tr_splitmix64(c.kv_fingerprint ^ file_fp);
    if (s != TR_OK) {
        tr_model_free(m);
        tr_backend_free(be);
        tr_tokenizer_free(tok);
        tr_gguf_close(f);
        if (why)
            return tr_errf(err, err_cap, s,
                           "cannot use KV type %s for keys and %s for values: %s",
                           tr_kv_type_name(kt), tr_kv_type_name(vt), why);
        return tr_errf(err, err_cap, s,
                       "cannot allocate the KV cache (%d pages of %d tokens)",
                       n_pages, o.page_size);
    }
    if (!o.draft_model) return tr_engine_new_custom(&o, f, tok, &c, out, err, err_cap);
    gguf_file *df = NULL;
    engine_compute dc;
    int64_t positions = (int64_t)(n_pages / units.n) * o.page_size;
    s = load_draft(&o, be, tok, positions, o.page_size, &df, &dc, err, err_cap);
    if (s != TR_OK) {
        c.ops->destroy(c.ctx); /* the model and the backend */
        tr_tokenizer_free(tok);
        tr_gguf_close(f);
        return s;
    }
    return tr_engine_new_custom_draft(&o, f, tok, &c, &dc, df, out, err, err_cap);
}

void trellis_engine_free(trellis_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->in_mu);
        e->quit = true;
        pthread_cond_broadcast(&e->in_cond);
        pthread_mutex_unlock(&e->in_mu);
        pthread_join(e->thread, NULL);
    }
    tr_worker_stop(e);
    engine_destroy(e);
}

void trellis_engine_get_info(const trellis_engine *e, trellis_engine_info *o) {
    memset(o, 0, sizeof *o);
    o->device = e->opt.device;
    o->n_vocab = e->n_vocab;
    o->n_ctx = e->n_ctx;
    o->page_size = e->page_size;
    o->kv_pages = e->n_pages;
    o->max_batch_tokens = e->opt.max_batch_tokens;
    o->max_running = e->opt.max_running;
    o->chunk_size = e->opt.chunk_size;
    o->threads = e->opt.threads;
    o->eos = e->eos;
    o->add_bos = e->add_bos;
    o->no_radix = e->opt.no_radix;
    o->overlap = !e->opt.no_overlap;
    o->load = e->file && tr_gguf_load_used(e->file) == GGUF_LOAD_READ ? TRELLIS_LOAD_READ
                                                                   : TRELLIS_LOAD_MMAP;
    o->arch = e->compute.arch ? e->compute.arch : "custom";
    o->n_layers = e->compute.n_layers;
    tr_draft_info(e, o);
    o->chat_template = e->chat_template;
    o->kv_type_k = e->compute.kv_type_k;
    o->kv_type_v = e->compute.kv_type_v;
    o->kv_bytes = e->compute.kv_bytes;
    o->kv_cache_dir = e->disk ? e->opt.kv_cache_dir : NULL;
    o->kv_cache_disk_mb = e->disk ? e->opt.kv_cache_disk_mb : 0;
    o->kv_units = e->W;
}

int32_t trellis_engine_layer_window(const trellis_engine *e, int32_t layer) {
    if (!e || layer < 0 || layer >= e->compute.n_layers) return -1;
    const engine_compute *c = &e->compute;
    return c->ops->layer_window ? c->ops->layer_window(c->ctx, layer) : 0;
}

/* ---- queues (any thread) ---- */

tr_status tr_engine_send(trellis_engine *e, engine_msg *m) {
    m->next = NULL;
    pthread_mutex_lock(&e->in_mu);
    if (e->in_tail) e->in_tail->next = m;
    else e->in_head = m;
    e->in_tail = m;
    pthread_cond_signal(&e->in_cond);
    pthread_mutex_unlock(&e->in_mu);
    return TR_OK;
}

int trellis_cancel(trellis_engine *e, uint64_t id) {
    if (!e) return TR_ERR_INVALID_ARG;
    engine_msg *m = calloc(1, sizeof *m);
    if (!m) return TR_ERR_NOMEM;
    m->kind = MSG_CANCEL;
    m->id = id;
    return tr_engine_send(e, m);
}

static tr_status control(trellis_engine *e, engine_msg_kind kind) {
    engine_msg *m = calloc(1, sizeof *m);
    if (!m) return TR_ERR_NOMEM;
    engine_sync sy = {0};
    m->kind = kind;
    m->sync = &sy;
    tr_engine_send(e, m);
    pthread_mutex_lock(&e->in_mu);
    while (!sy.done) pthread_cond_wait(&e->ctl_cond, &e->in_mu);
    pthread_mutex_unlock(&e->in_mu);
    return sy.result;
}

int trellis_flush_cache(trellis_engine *e) {
    return e ? control(e, MSG_FLUSH) : TR_ERR_INVALID_ARG;
}

tr_status tr_engine_debug_check(trellis_engine *e) {
    return e ? control(e, MSG_CHECK) : TR_ERR_INVALID_ARG;
}

static engine_event_box *pop_event(trellis_engine *e) {
    engine_event_box *b = e->out_head;
    if (b) {
        e->out_head = b->next;
        if (!e->out_head) e->out_tail = NULL;
        b->next = NULL;
    }
    return b;
}

int trellis_poll(trellis_engine *e, trellis_event **out) {
    if (!e || !out) return 0;
    pthread_mutex_lock(&e->out_mu);
    engine_event_box *b = pop_event(e);
    pthread_mutex_unlock(&e->out_mu);
    *out = b ? &b->ev : NULL;
    return b != NULL;
}

int trellis_wait(trellis_engine *e, int timeout_ms, trellis_event **out) {
    if (!e || !out) return 0;
    struct timespec until;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->out_mu);
    while (!e->out_head) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&e->out_cond, &e->out_mu);
        } else if (pthread_cond_timedwait(&e->out_cond, &e->out_mu, &until) ==
                   ETIMEDOUT) {
            break;
        }
    }
    engine_event_box *b = pop_event(e);
    pthread_mutex_unlock(&e->out_mu);
    *out = b ? &b->ev : NULL;
    return b != NULL;
}

void trellis_event_free(trellis_event *ev) {
    free((engine_event_box *)ev);
}

void trellis_get_stats(trellis_engine *e, trellis_stats *out) {
    pthread_mutex_lock(&e->stats_mu);
    *out = e->snap;
    pthread_mutex_unlock(&e->stats_mu);
    out->requests_submitted = atomic_load(&e->n_submitted);
    tr_disk_store_stats(e, out); /* the store's own counters, live */
}

int trellis_tokenize(const trellis_engine *e, const char *text, size_t len,
                     bool parse_special, int32_t **ids, size_t *n_ids) {
    if (!e || (!text && len) || !ids || !n_ids) return TR_ERR_INVALID_ARG;
    return tr_tokenizer_encode(e->tok, text ? text : "", len, parse_special, ids,
                            n_ids);
}

const char *trellis_token_text(const trellis_engine *e, int32_t id,
                               size_t *len) {
    size_t l = 0;
    const uint8_t *p = e ? tr_tokenizer_token_bytes(e->tok, id, &l) : NULL;
    if (len) *len = l;
    return (const char *)p;
}
