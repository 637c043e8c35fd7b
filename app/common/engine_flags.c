/* engine_flags.c — the one table of engine flags (see engine_flags.h). */
#include "app/common/engine_flags.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* --load's value is stored through an int (CLI_ENUM) */
_Static_assert(sizeof(int) == sizeof(int32_t), "trellis_engine_options.load is read as int");
_Static_assert(TRELLIS_KV_F16 == 0 && TRELLIS_KV_Q8 == 1 && TRELLIS_KV_Q4 == 2,
               "--kv-type's choices are the TRELLIS_KV_* values in order");

#define OFF(m) offsetof(trellis_engine_options, m)

/* option: the member of trellis_engine_options as the engine's option
 * table names it (trellis_engine_option_find), for the flags whose
 * default and bounds come from there (CLI_INT32, and --load's range);
 * NULL for the others. help: what the flag does; an integer flag's help
 * gets the engine's note on special values ("0 = one per core") and its
 * bounds appended. */
static const struct {
    const char *name, *alias;
    cli_kind kind;
    const char *option;
    size_t off;
    const char *help, *meta, *choices;
    size_t also; /* CLI_ENUM: a second member it sets (0: none) */
} k_flags[TR_EF_COUNT] = {
    [TR_EF_DEVICE] = {"--device", NULL, CLI_STR, NULL, OFF(device),
                      "compute backend: cpu, or cuda / cuda:N (GPU N) in a build with "
                      "CUDA", "NAME", NULL},
    [TR_EF_THREADS] = {"--threads", "-t", CLI_INT32, "threads", OFF(threads),
                       "CPU compute threads", NULL, NULL},
    [TR_EF_CTX] = {"--ctx", "-c", CLI_INT32, "ctx", OFF(ctx),
                   "context per sequence (prompt + completion)", NULL, NULL},
    [TR_EF_KV_MEM] = {"--kv-mem", NULL, CLI_INT32, "kv_mb", OFF(kv_mb),
                      "KV cache memory in MiB", "MiB", NULL},
    [TR_EF_PAGE_SIZE] = {"--page-size", NULL, CLI_INT32, "page_size", OFF(page_size),
                         "tokens per KV page", NULL, NULL},
    [TR_EF_MAX_RUNNING] = {"--max-running", NULL, CLI_INT32, "max_running",
                           OFF(max_running), "sequences running at once", NULL, NULL},
    [TR_EF_MAX_BATCH_TOKENS] = {"--max-batch-tokens", NULL, CLI_INT32, "max_batch_tokens",
                                OFF(max_batch_tokens),
                                "tokens per engine step (decode rows + prefill chunks)",
                                NULL, NULL},
    [TR_EF_CHUNK_SIZE] = {"--chunk-size", NULL, CLI_INT32, "chunk_size", OFF(chunk_size),
                          "prefill tokens per sequence per step", NULL, NULL},
    [TR_EF_LOAD] = {"--load", NULL, CLI_ENUM, "load", OFF(load),
                    "how the model file comes in: read it into memory advised for huge "
                    "pages, or map it; auto reads when transparent huge pages are on",
                    NULL, "auto|mmap|read"},
    [TR_EF_NO_RADIX] = {"--no-radix", NULL, CLI_FLAG, NULL, OFF(no_radix),
                        "share no KV cache across requests", NULL, NULL},
    [TR_EF_NO_OVERLAP] = {"--no-overlap", NULL, CLI_FLAG, NULL, OFF(no_overlap),
                          "run forward passes on the engine thread instead of a compute "
                          "thread (no hand-off per step; constraint masks then wait for "
                          "the forward pass)", NULL, NULL},
    [TR_EF_SPEC_NGRAM] = {"--spec-ngram", NULL, CLI_INT32, "spec_ngram", OFF(spec_ngram),
                          "speculative decoding: up to N draft tokens per step from n-grams "
                          "of the prompt and output (prompt lookup), verified in the same "
                          "pass; the output is unchanged (constraints and log-probs too)", "N", NULL},
    [TR_EF_KV_TYPE] = {"--kv-type", NULL, CLI_ENUM, "kv_type_k", OFF(kv_type_k),
                       "KV cache type of keys and values: f16, q8 (int8, one scale per "
                       "position and KV head: ~half the bytes) or q4 (4-bit, a scale per 32: "
                       "~0.28x); a later --kv-type-k/-v overrides one of them",
                       NULL, "f16|q8|q4", OFF(kv_type_v)},
    [TR_EF_KV_TYPE_K] = {"--kv-type-k", NULL, CLI_ENUM, "kv_type_k", OFF(kv_type_k),
                         "KV cache type of the keys", NULL, "f16|q8|q4", 0},
    [TR_EF_KV_TYPE_V] = {"--kv-type-v", NULL, CLI_ENUM, "kv_type_v", OFF(kv_type_v),
                         "KV cache type of the values", NULL, "f16|q8|q4", 0},
    [TR_EF_KV_CACHE_DIR] = {"--kv-cache-dir", NULL, CLI_STR, NULL, OFF(kv_cache_dir),
                            "the prefix cache's disk tier: KV pages evicted from memory (and "
                            "all cached pages at exit) are kept under DIR and read back when "
                            "a prompt continues past what memory holds, after a restart too",
                            "DIR", NULL},
    [TR_EF_KV_CACHE_DISK_MB] = {"--kv-cache-disk-mb", NULL, CLI_INT32, "kv_cache_disk_mb",
                                OFF(kv_cache_disk_mb),
                                "the disk tier's bound in MiB (least recently used pages go "
                                "first)", "MiB", NULL},
    [TR_EF_KV_FULL_PAGES] = {"--kv-full-pages", NULL, CLI_FLAG, NULL, OFF(kv_full_pages),
                             "keep every layer of a position in one KV page (by default the "
                             "sliding-window layers of a model like Gemma 3 get pages of their "
                             "own, freed once no window reads them)", NULL, NULL},
    [TR_EF_DRAFT_MODEL] = {"--draft-model", NULL, CLI_STR, NULL, OFF(draft_model),
                           "speculative decoding with a draft model: a smaller GGUF model "
                           "with the same vocabulary proposes tokens greedily, verified in "
                           "the model's pass; the output is unchanged", "FILE", NULL},
    [TR_EF_SPEC_DRAFT] = {"--spec-draft", NULL, CLI_INT32, "spec_draft", OFF(spec_draft),
                          "the draft model's tokens per sequence and step at most (the "
                          "length adapts to what is kept)", "N", NULL},
    [TR_EF_DRAFT_SAMPLING] = {"--draft-sampling", NULL, CLI_FLAG, NULL, OFF(draft_sampling),
                              "sampled requests: the draft model samples its drafts and the "
                              "model keeps them by the speculative sampling rule (the output "
                              "follows the model's distribution, more drafts are kept, but a "
                              "seed no longer gives plain decoding's tokens)", NULL, NULL},
    /* not an engine option: settled into spec_ngram / draft_model */
    [TR_EF_SPECULATE] = {"--speculate", NULL, CLI_ENUM, NULL, 0,
                         "speculative decoding's proposers: off; ngram (n-gram drafts, "
                         "--spec-ngram of them, 8 unless given); draft (the --draft-model's "
                         "drafts alone); auto: as --spec-ngram and --draft-model say",
                         NULL, "auto|off|ngram|draft"},
};

/* --speculate against --spec-ngram and --draft-model. */
static bool settle_speculate(void *ctx, const char *cmd) {
    tr_engine_flags *f = ctx;
    trellis_engine_options *o = &f->opts;
    const bool ngram_given = f->given[TR_EF_SPEC_NGRAM], draft_given = f->given[TR_EF_DRAFT_MODEL];
    if (f->speculate == TR_SPECULATE_AUTO) return true;
    const bool ngram = f->speculate == TR_SPECULATE_NGRAM, draft = f->speculate == TR_SPECULATE_DRAFT;
    if (draft && !o->draft_model) {
        fprintf(stderr, "trellis %s: --speculate draft: needs --draft-model FILE\n", cmd);
        return false;
    }
    /* a given setting against the mode; other_proposer: it is the
     * proposer the mode leaves out */
    const char *clash = NULL;
    bool other_proposer = false;
    if (ngram_given && (o->spec_ngram > 0) != ngram)
        clash = ngram ? "--spec-ngram 0" : "--spec-ngram", other_proposer = draft;
    else if (draft_given && o->draft_model && !draft)
        clash = "--draft-model", other_proposer = ngram;
    if (!ngram) o->spec_ngram = 0;
    else if (!ngram_given) o->spec_ngram = TR_SPECULATE_NGRAM_DEFAULT;
    if (!draft) o->draft_model = NULL;
    if (clash) {
        static const char *const mode[] = {"auto", "off", "ngram", "draft"};
        fprintf(stderr, "trellis %s: --speculate %s contradicts %s%s\n", cmd,
                mode[f->speculate], clash,
                other_proposer ? " (without --speculate both run, n-gram drafts first)" : "");
        return false;
    }
    return true;
}

void tr_engine_flags_init(tr_engine_flags *f) {
    memset(f, 0, sizeof *f);
    trellis_engine_options_default(&f->opts);
}

bool tr_engine_flag_bounds(tr_engine_flag flag, int32_t *min, int32_t *max) {
    if ((unsigned)flag >= TR_EF_COUNT || k_flags[flag].kind != CLI_INT32) return false;
    const trellis_engine_option_desc *d = trellis_engine_option_find(k_flags[flag].option);
    if (!d) return false; /* never: tests/unit/test_app_args.c checks every one */
    *min = d->min;
    *max = d->max;
    return true;
}

/* The default --help shows: the command's words, or the value in opts. */
static void show_default(const tr_engine_flags *f, int i, char *out, size_t cap) {
    const void *v = i == TR_EF_SPECULATE ? (const void *)&f->speculate
                                         : (const void *)((const char *)&f->opts + k_flags[i].off);
    if (f->shown[i]) snprintf(out, cap, "%s", f->shown[i]);
    else if (k_flags[i].kind == CLI_FLAG) snprintf(out, cap, "%s", *(const bool *)v ? "on" : "off");
    else if (k_flags[i].kind == CLI_STR)
        snprintf(out, cap, "%s", *(const char *const *)v ? *(const char *const *)v
                                 : i == TR_EF_DEVICE                   ? "cpu"
                                                                       : "none");
    else if (k_flags[i].kind == CLI_ENUM) {
        /* the value's name: the index-th of the choices */
        const char *p = k_flags[i].choices;
        for (int k = *(const int32_t *)v; k > 0 && strchr(p, '|'); k--) p = strchr(p, '|') + 1;
        snprintf(out, cap, "%.*s", (int)strcspn(p, "|"), p);
    } else snprintf(out, cap, "%d", (int)*(const int32_t *)v);
}

void tr_engine_flags_attach(tr_engine_flags *f, cli_cmd *c) {
    for (int i = 0; i < TR_EF_COUNT; i++) {
        cli_opt *o = &f->table[i];
        memset(o, 0, sizeof *o);
        o->name = k_flags[i].name;
        o->alias = k_flags[i].alias;
        o->kind = k_flags[i].kind;
        o->dest = i == TR_EF_SPECULATE ? (void *)&f->speculate
                                       : (void *)((char *)&f->opts + k_flags[i].off);
        o->min = 1, o->max = 0; /* unbounded, but for the integers below */
        o->meta = k_flags[i].meta;
        o->choices = k_flags[i].choices;
        o->given = &f->given[i];
        o->also = k_flags[i].also ? (char *)&f->opts + k_flags[i].also : NULL;
        o->help = k_flags[i].help;
        int32_t lo, hi;
        if (tr_engine_flag_bounds((tr_engine_flag)i, &lo, &hi)) {
            const trellis_engine_option_desc *d = trellis_engine_option_find(k_flags[i].option);
            o->min = lo, o->max = hi;
            char range[48] = "";
            if (hi < INT32_MAX) snprintf(range, sizeof range, "%d..%d", (int)lo, (int)hi);
            else snprintf(range, sizeof range, "%d or more", (int)lo);
            snprintf(f->help[i], sizeof f->help[i], "%s; %s%s%s", k_flags[i].help, range,
                     d->note[0] ? ", " : "", d->note);
            o->help = f->help[i];
        }
        show_default(f, i, f->def[i], sizeof f->def[i]);
        o->def = f->def[i];
    }
    c->engine = f->table;
    c->n_engine = TR_EF_COUNT;
    c->finish = settle_speculate;
    c->finish_ctx = f;
}

const char *tr_engine_flags_first_given(const tr_engine_flags *f) {
    for (int i = 0; i < TR_EF_COUNT; i++)
        if (f->given[i]) return k_flags[i].name;
    return NULL;
}
