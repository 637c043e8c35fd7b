/* tokenizer_pre.c — the pre-tokenizers: tokenizer.ggml.pre name -> regexes.
 *
 * Layering: runtime/tokenizer internal. Pure data; thread-safe.
 *
 * A pre-tokenizer is a sequence of regexes. The first splits the text into
 * pieces: every match is a piece and so is every stretch between matches.
 * Each later regex splits every piece of the previous step the same way,
 * seeing only that piece as its subject (a lookahead cannot look past the
 * piece's end). This is how llama.cpp applies them, and it matters: for
 * "smollm" the digit split runs first, so in "a  1" the second regex sees
 * "a  " and keeps both spaces together ("\s+(?!\S)" at the end of its
 * subject), where a single regex over "a  1" would have split " " + " 1".
 *
 * The regexes are those llama.cpp uses for each name, with one deliberate
 * rewrite: \s and \S are spelled out as the Unicode White_Space set that
 * llama.cpp's own tables use (tab..CR, space, U+0085, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), because PCRE2's
 * \s in UCP mode leaves U+0085 out and its Unicode tables may differ in
 * version. \p{L} and \p{N} are PCRE2's Unicode general categories, as in
 * llama.cpp.
 */
#include <string.h>

#include "runtime/tokenizer/tokenizer_internal.h"

#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
#define RE_GPT2                                                         \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+" \
    "|[" WS "]+(?![^" WS "])"

/* (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
 * |\s*[\r\n]+|\s+(?!\S)|\s+ ; qwen2 has \p{N} instead of \p{N}{1,3}. */
#define RE_LLAMA3_HEAD                                                    \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"            \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
#define RE_LLAMA3_TAIL                                                    \
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+"               \
    "|[" WS "]+(?![^" WS "])|[" WS "]+"

static const char *const re_smollm[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const re_gpt2[] = {RE_GPT2, NULL};
static const char *const re_llama3[] = {
    RE_LLAMA3_HEAD "|\\p{N}{1,3}" RE_LLAMA3_TAIL, NULL};
static const char *const re_qwen2[] = {
    RE_LLAMA3_HEAD "|\\p{N}" RE_LLAMA3_TAIL, NULL};
static const char *const re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};

static const tokenizer_pre_def pre_smollm = {"smollm", re_smollm, false, false};
static const tokenizer_pre_def pre_gpt2 = {"gpt2", re_gpt2, false, false};
static const tokenizer_pre_def pre_llama3 = {"llama3", re_llama3, true, true};
/* dbrx / smaug-bpe: the llama3 regex without ignore_merges or BOS */
static const tokenizer_pre_def pre_llama3_plain = {"llama3", re_llama3, false,
                                                   false};
static const tokenizer_pre_def pre_qwen2 = {"qwen2", re_qwen2, false, false};
static const tokenizer_pre_def pre_default = {"default", re_default, false,
                                              false};

static const struct {
    const char *name;
    const tokenizer_pre_def *def;
} pre_names[] = {
    {"default", &pre_default},
    {"smollm", &pre_smollm},
    {"starcoder", &pre_smollm},
    {"refact", &pre_smollm},
    {"command-r", &pre_smollm},
    {"codeshell", &pre_smollm},
    {"exaone", &pre_smollm},
    {"minerva-7b", &pre_smollm},
    {"mellum2", &pre_smollm},
    {"gpt2", &pre_gpt2},
    {"gpt-2", &pre_gpt2},
    {"phi-2", &pre_gpt2},
    {"mpt", &pre_gpt2},
    {"olmo", &pre_gpt2},
    {"jais", &pre_gpt2},
    {"trillion", &pre_gpt2},
    {"granite-docling", &pre_gpt2},
    {"exaone4", &pre_gpt2},
    {"gigachat", &pre_gpt2},
    {"mellum", &pre_gpt2},
    {"llama3", &pre_llama3},
    {"llama-v3", &pre_llama3},
    {"llama-bpe", &pre_llama3},
    {"falcon3", &pre_llama3},
    {"falcon-h1", &pre_llama3},
    {"pixtral", &pre_llama3},
    {"lfm2", &pre_llama3},
    {"dbrx", &pre_llama3_plain},
    {"smaug-bpe", &pre_llama3_plain},
    {"qwen2", &pre_qwen2},
    {"deepseek-r1-qwen", &pre_qwen2},
    {"stablelm2", &pre_qwen2},
    {"megrez", &pre_qwen2},
    {"hunyuan", &pre_qwen2},
};

const tokenizer_pre_def *tr_tokenizer_pre_lookup(const char *name) {
    for (size_t i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++)
        if (strcmp(pre_names[i].name, name) == 0) return pre_names[i].def;
    return NULL;
}
