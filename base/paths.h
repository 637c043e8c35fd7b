/* paths.h — where Trellis looks for things on this machine.
 * Layering: bottom. Thread-safe (reads the environment only). */
#ifndef TR_BASE_PATHS_H
#define TR_BASE_PATHS_H

#include <stddef.h>

/* File name of the default model (SmolLM2-135M-Instruct Q4_1). */
#define TR_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
/* Gemma 3 270M Q4_K_M (scripts/setup.sh --model gemma3-270m). */
#define TR_GEMMA3_MODEL_FILE "gemma-3-270m-q4_k_m.gguf"

/* Writes the default model path into buf: $TRELLIS_MODEL if set, else
 * $TRELLIS_CACHE/models/<file>, else $XDG_CACHE_HOME/trellis/models/<file>,
 * else $HOME/.cache/trellis/models/<file> (where scripts/setup puts it).
 * Returns buf, or NULL if it does not fit. */
char *tr_default_model_path(char *buf, size_t size);

/* Writes the path of `file` in the model cache into buf, as above without
 * $TRELLIS_MODEL. Returns buf, or NULL if it does not fit. */
char *tr_cached_model_path(const char *file, char *buf, size_t size);

#endif
