/* engine_flags.h — the engine flags: one table of the flags that set
 * trellis_engine_options, taken by every command that starts an engine
 * (serve, generate, run, bench serve, bench grammar) with the same
 * spelling, the same bounds and the same error everywhere:
 *   trellis run: --threads: must be between 0 and 512, got 1024
 *
 * The table gives each flag its name, value kind and help; the defaults
 * and bounds of the integer ones are the engine's own, read from its
 * option table through trellis_engine_option_find (include/trellis.h),
 * never copied here. A command may start from another default (bench:
 * 2 threads) by changing `opts` before tr_engine_flags_attach; its --help
 * then shows that default.
 *
 *   tr_engine_flags ef;
 *   tr_engine_flags_init(&ef);
 *   cli_cmd c = {.name = "generate", ...};
 *   tr_engine_flags_attach(&ef, &c);
 *   if (!tr_cli_parse(&c, argc, argv, &help)) return 2;
 *   trellis_engine_new(model, &ef.opts, ...);
 *
 * Layering: applications (app/common), over include/trellis.h and args.h.
 * Single-threaded; no state beyond the struct.
 */
#ifndef TR_CLI_ENGINE_FLAGS_H
#define TR_CLI_ENGINE_FLAGS_H

#include <stdbool.h>

#include "app/common/args.h"
#include "trellis.h"

/* The flags, in the order --help lists them. */
typedef enum tr_engine_flag {
    TR_EF_DEVICE,           /* --device NAME */
    TR_EF_THREADS,          /* -t, --threads N */
    TR_EF_CTX,              /* -c, --ctx N */
    TR_EF_KV_MEM,           /* --kv-mem MiB (option kv_mb) */
    TR_EF_PAGE_SIZE,        /* --page-size N */
    TR_EF_MAX_RUNNING,      /* --max-running N */
    TR_EF_MAX_BATCH_TOKENS, /* --max-batch-tokens N */
    TR_EF_CHUNK_SIZE,       /* --chunk-size N */
    TR_EF_LOAD,             /* --load auto|mmap|read */
    TR_EF_NO_RADIX,         /* --no-radix */
    TR_EF_NO_OVERLAP,       /* --no-overlap */
    TR_EF_SPEC_NGRAM,       /* --spec-ngram N */
    TR_EF_KV_TYPE,          /* --kv-type f16|q8|q4 (keys and values) */
    TR_EF_KV_TYPE_K,        /* --kv-type-k f16|q8|q4 */
    TR_EF_KV_TYPE_V,        /* --kv-type-v f16|q8|q4 */
    TR_EF_KV_CACHE_DIR,     /* --kv-cache-dir DIR (the disk tier) */
    TR_EF_KV_CACHE_DISK_MB, /* --kv-cache-disk-mb MiB */
    TR_EF_KV_FULL_PAGES,    /* --kv-full-pages */
    TR_EF_DRAFT_MODEL,      /* --draft-model FILE */
    TR_EF_SPEC_DRAFT,       /* --spec-draft N */
    TR_EF_DRAFT_SAMPLING,   /* --draft-sampling */
    TR_EF_SPECULATE,        /* --speculate auto|off|ngram|draft */
    TR_EF_COUNT,
} tr_engine_flag;

/* --speculate: which proposers run (settled into opts after the parse:
 * off turns both off; ngram turns n-gram drafts on, up to 8 a step unless
 * --spec-ngram says, and refuses --draft-model; draft needs --draft-model
 * and turns n-gram drafts off; auto leaves --spec-ngram and --draft-model
 * as given). A contradiction (`--speculate off --spec-ngram 4`) is an
 * error naming both flags. */
enum { TR_SPECULATE_AUTO, TR_SPECULATE_OFF, TR_SPECULATE_NGRAM, TR_SPECULATE_DRAFT };
#define TR_SPECULATE_NGRAM_DEFAULT 8

typedef struct tr_engine_flags {
    trellis_engine_options opts;     /* the defaults, then what the flags
                                        say: pass to trellis_engine_new */
    int32_t speculate;               /* TR_SPECULATE_*, settled into opts */
    bool given[TR_EF_COUNT];         /* the flags the command line gave */
    const char *shown[TR_EF_COUNT];  /* a command's own words for a
                                        default (--help), or NULL: the
                                        value in opts */
    /* filled by tr_engine_flags_attach */
    cli_opt table[TR_EF_COUNT];
    char def[TR_EF_COUNT][32];
    char help[TR_EF_COUNT][256];
} tr_engine_flags;

/* The engine's defaults (trellis_engine_options_default), nothing given. */
void tr_engine_flags_init(tr_engine_flags *f);

/* Builds the flags' table from the engine's bounds and the defaults now
 * in f->opts, and hands it to c (c->engine, c->n_engine, and c->finish,
 * which settles --speculate). f must outlive the parse. */
void tr_engine_flags_attach(tr_engine_flags *f, cli_cmd *c);

/* The bounds of flag `flag`'s value as the engine's table states them:
 * false for the flags that take no integer. */
bool tr_engine_flag_bounds(tr_engine_flag flag, int32_t *min, int32_t *max);

/* The name of the first engine flag given ("--threads"), or NULL. */
const char *tr_engine_flags_first_given(const tr_engine_flags *f);

#endif
