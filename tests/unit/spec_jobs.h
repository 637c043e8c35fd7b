/* spec_jobs.h — the requests the speculative-decoding tests run
 * (test_engine_spec.c: n-gram drafts; test_engine_draft.c: a draft model)
 * and their comparison: prompts that repeat a phrase (copying pays),
 * greedy and sampled, n > 1, stop strings. Header-only, for tests; after
 * engine_fake.h.
 */
#ifndef TR_TESTS_UNIT_SPEC_JOBS_H
#define TR_TESTS_UNIT_SPEC_JOBS_H

/* A prompt that repeats a 24-token phrase three times (copying pays). */
static inline void phrase_prompt(uint64_t seed, int32_t *out, int n) {
    int32_t phrase[24];
    rand_tokens(seed, phrase, 24);
    for (int i = 0; i < n; i++) out[i] = phrase[i % 24];
}

typedef struct job {
    trellis_request q;
    int32_t prompt[96];
    const char *stop[1];
} job;

static inline void make_job(job *j, int k) {
    trellis_request_default(&j->q);
    phrase_prompt((uint64_t)(k % 5) + 1, j->prompt, 72 + k % 20);
    j->q.tokens = j->prompt;
    j->q.n_tokens = 72 + k % 20;
    j->q.max_tokens = 20 + (k * 7) % 60;
    j->q.temperature = (k % 3 == 0) ? 0.0f : (k % 3 == 1 ? 0.7f : 1.3f);
    j->q.seed = (uint64_t)k * 31u;
    j->q.n = 1 + k % 3;
    if (k % 4 == 3) { /* a stop string: some token's text in the phrase */
        j->stop[0] = "a";
        j->q.stop = j->stop;
        j->q.n_stop = 1;
    }
}

/* Same tokens, text, stops and finish (and log-probs when lp). */
static inline void same_result(const result *a, const result *b, bool lp) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        same_tokens(a, b, i);
        assert_int_equal(a->s[i].text_len, b->s[i].text_len);
        assert_memory_equal(a->s[i].text, b->s[i].text, a->s[i].text_len);
        assert_int_equal(a->s[i].stop_index, b->s[i].stop_index);
        assert_int_equal(a->s[i].stop_token, b->s[i].stop_token);
        assert_int_equal(a->s[i].finish, b->s[i].finish);
        if (!lp) continue;
        assert_non_null(b->s[i].lp);
        assert_memory_equal(a->s[i].lp, b->s[i].lp,
                            (size_t)a->s[i].n_tokens * sizeof(trellis_logprob));
    }
}

#endif
