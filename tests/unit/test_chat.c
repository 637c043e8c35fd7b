/* test_chat.c — unit tests of runtime/chat.
 *
 * The expected prompts were produced by rendering the original Jinja
 * templates with jinja2 (SmolLM2's read from the model file; Llama 3,
 * Gemma 3, Llama-2-chat and Mistral-Instruct v0.1 as published), with
 * the leading BOS removed (Trellis leaves it to the tokenizer). Where
 * Trellis deliberately differs (Mistral system messages, errors instead of
 * silently dropped messages) the test says so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/paths.h"
#include "runtime/chat/chat.h"
#include "runtime/gguf/gguf.h"

/* tokenizer.chat_template of SmolLM2-135M-Instruct (verbatim from the
 * GGUF; the newlines inside the string literals are real newlines). */
static const char SMOLLM2_TEMPLATE[] =
    "{% for message in messages %}{% if loop.first and "
    "messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a "
    "helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + "
    "'\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const char SMOLLM2_SYSTEM[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

static const char LLAMA3_TEMPLATE[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

static const char GEMMA3_TEMPLATE_START[] =
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "...{{ '<start_of_turn>' + role + '\n' }}...";

static const char LLAMA2_TEMPLATE_PART[] =
    "{% if loop.index0 == 0 and system_message != false %}{% set content = "
    "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
    "message['content'] %}...{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}";

static const char MISTRAL_TEMPLATE[] =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == "
    "'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% endif %}{% endfor %}";

#define M(r, c) {r, c}

static char *render_ok(chat_template_kind k, const char *sys,
                       const chat_message *m, size_t n, chat_render_end gen) {
    char *out = NULL;
    size_t len = 0;
    tr_diag d;
    memset(&d, 0, sizeof d);
    tr_status st = tr_chat_render(k, sys, m, n, gen, &out, &len, &d);
    if (st != TR_OK) fprintf(stderr, "chat_render: %s\n", d.message);
    assert_int_equal(st, TR_OK);
    assert_non_null(out);
    assert_int_equal(len, strlen(out));
    return out;
}

static void expect_render(chat_template_kind k, const char *sys,
                          const chat_message *m, size_t n, chat_render_end gen,
                          const char *want) {
    char *out = render_ok(k, sys, m, n, gen);
    if (strcmp(out, want) != 0)
        fprintf(stderr, "got  [%s]\nwant [%s]\n", out, want);
    assert_string_equal(out, want);
    free(out);
}

static void expect_error(chat_template_kind k, const char *sys,
                         const chat_message *m, size_t n, tr_status code,
                         const char *needle1, const char *needle2) {
    char *out = (char *)0x1; /* must stay untouched */
    tr_diag d;
    memset(&d, 0, sizeof d);
    assert_int_equal(tr_chat_render(k, sys, m, n, true, &out, NULL, &d), code);
    assert_ptr_equal(out, (char *)0x1);
    if (needle1 && !strstr(d.message, needle1))
        fprintf(stderr, "message '%s' lacks '%s'\n", d.message, needle1);
    if (needle1) assert_non_null(strstr(d.message, needle1));
    if (needle2) assert_non_null(strstr(d.message, needle2));
}

/* ------------------------------------------------------------ detect */

static void test_detect(void **state) {
    (void)state;
    chat_template_kind k = CHAT_TEMPLATE_NONE;
    tr_diag d;
    assert_int_equal(tr_chat_template_detect(SMOLLM2_TEMPLATE, &k, &d), TR_OK);
    assert_int_equal(k, CHAT_TEMPLATE_CHATML);
    assert_int_equal(tr_chat_template_detect(LLAMA3_TEMPLATE, &k, &d), TR_OK);
    assert_int_equal(k, CHAT_TEMPLATE_LLAMA3);
    assert_int_equal(tr_chat_template_detect(GEMMA3_TEMPLATE_START, &k, &d), TR_OK);
    assert_int_equal(k, CHAT_TEMPLATE_GEMMA);
    assert_int_equal(tr_chat_template_detect(LLAMA2_TEMPLATE_PART, &k, &d), TR_OK);
    assert_int_equal(k, CHAT_TEMPLATE_LLAMA2);
    assert_int_equal(tr_chat_template_detect(MISTRAL_TEMPLATE, &k, &d), TR_OK);
    assert_int_equal(k, CHAT_TEMPLATE_MISTRAL);
    assert_string_equal(tr_chat_template_kind_name(CHAT_TEMPLATE_GEMMA), "gemma");
    assert_string_equal(tr_chat_template_end_of_turn(CHAT_TEMPLATE_CHATML), "<|im_end|>");
    assert_string_equal(tr_chat_template_end_of_turn(CHAT_TEMPLATE_LLAMA3), "<|eot_id|>");
    assert_null(tr_chat_template_end_of_turn((chat_template_kind)42));

    k = CHAT_TEMPLATE_CHATML;
    memset(&d, 0, sizeof d);
    assert_int_equal(tr_chat_template_detect(NULL, &k, &d), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(d.message, "no chat template"));
    const char *alien = "{% for m in messages %}<|user|>\n{{ m.content }}\x01{% endfor %}";
    assert_int_equal(tr_chat_template_detect(alien, &k, &d), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.message, "unrecognised chat template"));
    assert_non_null(strstr(d.message, "<|user|>\\n")); /* quoted, escaped */
    assert_non_null(strstr(d.message, "\\x01"));
    assert_int_equal(tr_chat_template_detect("", &k, &d), TR_ERR_UNSUPPORTED);
    assert_int_equal(k, CHAT_TEMPLATE_CHATML); /* untouched on failure */
    assert_int_equal(tr_chat_template_detect("x", NULL, &d), TR_ERR_INVALID_ARG);
}

static void test_default_system(void **state) {
    (void)state;
    char *s = NULL;
    assert_int_equal(tr_chat_template_default_system(SMOLLM2_TEMPLATE, &s), TR_OK);
    assert_non_null(s);
    assert_string_equal(s, SMOLLM2_SYSTEM);
    free(s);
    /* Qwen2.5 style: the first '<|im_start|>system\n' literal is cut by a
     * quote (the caller's system message follows); the default comes
     * later, written with a Jinja \n escape */
    const char *qwen =
        "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]"
        "['role'] == 'system' %}{{- messages[0]['content'] }}{%- endif %}"
        "{%- else %}{%- if messages[0]['role'] == 'system' %}{{- "
        "'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
        "{%- else %}{{- \"<|im_start|>system\\nYou are Qwen, created by "
        "Alibaba Cloud. You\\'re a \\\"helpful\\\" assistant.<|im_end|>\\n\" }}";
    assert_int_equal(tr_chat_template_default_system(qwen, &s), TR_OK);
    assert_non_null(s);
    assert_string_equal(s, "You are Qwen, created by Alibaba Cloud. You're a "
                           "\"helpful\" assistant.");
    free(s);
    /* no default: only the caller's system message is rendered */
    const char *plain =
        "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + "
        "m['content'] + '<|im_end|>\n'}}{% endfor %}"
        "{{ '<|im_start|>system\n' + x + '<|im_end|>' }}";
    s = (char *)0x1;
    assert_int_equal(tr_chat_template_default_system(plain, &s), TR_OK);
    assert_null(s);
    assert_int_equal(tr_chat_template_default_system(LLAMA3_TEMPLATE, &s), TR_OK);
    assert_null(s);
    assert_int_equal(tr_chat_template_default_system(NULL, &s), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_chat_template_default_system("x", NULL), TR_ERR_INVALID_ARG);
}

/* The real file, when it is on this machine. */
static void test_model_template(void **state) {
    (void)state;
    char path[4096];
    if (!tr_default_model_path(path, sizeof path)) skip();
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "model not found at %s: skipped\n", path);
        skip();
    }
    fclose(f);
    gguf_file *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g, NULL), TR_OK);
    gguf_str gs;
    assert_int_equal(tr_gguf_get_str(g, "tokenizer.chat_template", &gs), TR_OK);
    char *t = malloc(gs.len + 1);
    memcpy(t, gs.ptr, gs.len);
    t[gs.len] = '\0';
    tr_gguf_close(g);
    assert_string_equal(t, SMOLLM2_TEMPLATE);
    chat_template_kind k;
    assert_int_equal(tr_chat_template_detect(t, &k, NULL), TR_OK);
    assert_int_equal(k, CHAT_TEMPLATE_CHATML);
    char *sys = NULL;
    assert_int_equal(tr_chat_template_default_system(t, &sys), TR_OK);
    assert_string_equal(sys, SMOLLM2_SYSTEM);
    free(sys);
    free(t);
}

/* ------------------------------------------------------------ render */

static void test_chatml(void **state) {
    (void)state;
    const chat_message hi[] = {M("user", "Hi")};
    expect_render(CHAT_TEMPLATE_CHATML, SMOLLM2_SYSTEM, hi, 1, true,
                  "<|im_start|>system\nYou are a helpful AI assistant named "
                  "SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>"
                  "user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* the default extracted from the template gives the same */
    char *sys = NULL;
    assert_int_equal(tr_chat_template_default_system(SMOLLM2_TEMPLATE, &sys), TR_OK);
    expect_render(CHAT_TEMPLATE_CHATML, sys, hi, 1, true,
                  "<|im_start|>system\nYou are a helpful AI assistant named "
                  "SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>"
                  "user\nHi<|im_end|>\n<|im_start|>assistant\n");
    const chat_message conv[] = {M("system", "Be terse."), M("user", "Hi"),
                                 M("assistant", "Hello!"), M("user", " 2+2? ")};
    expect_render(CHAT_TEMPLATE_CHATML, sys, conv, 4, true,
                  "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\n"
                  "Hi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\n 2+2? <|im_end|>\n<|im_start|>assistant\n");
    const chat_message two[] = {M("user", "Hi"), M("assistant", "Hello")};
    expect_render(CHAT_TEMPLATE_CHATML, sys, two, 2, false,
                  "<|im_start|>system\nYou are a helpful AI assistant named "
                  "SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>"
                  "user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n");
    /* no messages: the template's loop never runs, no default system */
    expect_render(CHAT_TEMPLATE_CHATML, sys, NULL, 0, true,
                  "<|im_start|>assistant\n");
    expect_render(CHAT_TEMPLATE_CHATML, sys, NULL, 0, false, "");
    const chat_message tool[] = {M("user", "call it"), M("tool", "{\"x\":1}")};
    expect_render(CHAT_TEMPLATE_CHATML, sys, tool, 2, true,
                  "<|im_start|>system\nYou are a helpful AI assistant named "
                  "SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>"
                  "user\ncall it<|im_end|>\n<|im_start|>tool\n{\"x\":1}"
                  "<|im_end|>\n<|im_start|>assistant\n");
    /* without a default system prompt */
    expect_render(CHAT_TEMPLATE_CHATML, NULL, hi, 1, true,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* NULL content is the empty string */
    const chat_message empty[] = {M("user", NULL)};
    expect_render(CHAT_TEMPLATE_CHATML, NULL, empty, 1, false,
                  "<|im_start|>user\n<|im_end|>\n");
    free(sys);
}

static void test_llama3(void **state) {
    (void)state;
    const chat_message conv[] = {M("system", "Be terse."), M("user", "  Hi\n"),
                                 M("assistant", "Hello!")};
    expect_render(CHAT_TEMPLATE_LLAMA3, NULL, conv, 3, true,
                  "<|start_header_id|>system<|end_header_id|>\n\nBe terse."
                  "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi"
                  "<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
                  "\n\nHello!<|eot_id|><|start_header_id|>assistant"
                  "<|end_header_id|>\n\n");
    const chat_message hi[] = {M("user", "Hi")};
    expect_render(CHAT_TEMPLATE_LLAMA3, NULL, hi, 1, false,
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    /* Trellis: tool -> ipython (Llama 3.1); default system as a turn */
    const chat_message tool[] = {M("user", "Hi"), M("tool", " 42 ")};
    expect_render(CHAT_TEMPLATE_LLAMA3, "S", tool, 2, false,
                  "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>");
}

static void test_gemma(void **state) {
    (void)state;
    const chat_message conv[] = {M("system", "Be terse."), M("user", " Hi "),
                                 M("assistant", "Hello"), M("user", "Bye")};
    expect_render(CHAT_TEMPLATE_GEMMA, NULL, conv, 4, true,
                  "<start_of_turn>user\nBe terse.\n\nHi<end_of_turn>\n"
                  "<start_of_turn>model\nHello<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n"
                  "<start_of_turn>model\n");
    const chat_message hi[] = {M("user", "Hi")};
    expect_render(CHAT_TEMPLATE_GEMMA, NULL, hi, 1, true,
                  "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    /* default system behaves like a first system message */
    expect_render(CHAT_TEMPLATE_GEMMA, "Be terse.", conv + 1, 3, true,
                  "<start_of_turn>user\nBe terse.\n\nHi<end_of_turn>\n"
                  "<start_of_turn>model\nHello<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n"
                  "<start_of_turn>model\n");
    /* a system message alone renders nothing (as the original does) */
    const chat_message sys[] = {M("system", "S")};
    expect_render(CHAT_TEMPLATE_GEMMA, NULL, sys, 1, true,
                  "<start_of_turn>model\n");
    const chat_message uu[] = {M("user", "Hi"), M("user", "again")};
    expect_error(CHAT_TEMPLATE_GEMMA, NULL, uu, 2, TR_ERR_INVALID_ARG,
                 "message 1", "alternating");
    const chat_message au[] = {M("assistant", "Hi")};
    expect_error(CHAT_TEMPLATE_GEMMA, NULL, au, 1, TR_ERR_INVALID_ARG,
                 "message 0", "alternating");
    const chat_message tool[] = {M("user", "Hi"), M("tool", "x")};
    expect_error(CHAT_TEMPLATE_GEMMA, NULL, tool, 2, TR_ERR_UNSUPPORTED,
                 "message 1", "tool");
    const chat_message late[] = {M("user", "Hi"), M("system", "S")};
    expect_error(CHAT_TEMPLATE_GEMMA, NULL, late, 2, TR_ERR_INVALID_ARG,
                 "message 1", "first message");
}

static void test_llama2(void **state) {
    (void)state;
    const chat_message conv[] = {M("system", "SYS"), M("user", "Hi "),
                                 M("assistant", " Hello"), M("user", "Bye")};
    expect_render(CHAT_TEMPLATE_LLAMA2, NULL, conv, 4, true,
                  "[INST] <<SYS>>\nSYS\n<</SYS>>\n\nHi [/INST] Hello </s>"
                  "<s>[INST] Bye [/INST]");
    const chat_message two[] = {M("user", "Hi"), M("assistant", "Hello")};
    expect_render(CHAT_TEMPLATE_LLAMA2, NULL, two, 2, true,
                  "[INST] Hi [/INST] Hello </s>");
    /* strip() of the folded content reaches into the <<SYS>> block */
    const chat_message blank[] = {M("system", "SYS"), M("user", "  ")};
    expect_render(CHAT_TEMPLATE_LLAMA2, NULL, blank, 2, true,
                  "[INST] <<SYS>>\nSYS\n<</SYS>> [/INST]");
    const chat_message bad[] = {M("user", "a"), M("assistant", "b"),
                                M("assistant", "c")};
    expect_error(CHAT_TEMPLATE_LLAMA2, NULL, bad, 3, TR_ERR_INVALID_ARG,
                 "message 2", "alternating");
}

static void test_mistral(void **state) {
    (void)state;
    const chat_message conv[] = {M("user", "Hi"), M("assistant", "Hello"),
                                 M("user", " Bye ")};
    expect_render(CHAT_TEMPLATE_MISTRAL, NULL, conv, 3, true,
                  "[INST] Hi [/INST]Hello</s>[INST]  Bye  [/INST]");
    /* Trellis extension: a first system message joins the first turn */
    const chat_message sys[] = {M("system", "SYS"), M("user", "Hi")};
    expect_render(CHAT_TEMPLATE_MISTRAL, NULL, sys, 2, false,
                  "[INST] SYS\n\nHi [/INST]");
    const chat_message tool[] = {M("user", "Hi"), M("tool", "x")};
    expect_error(CHAT_TEMPLATE_MISTRAL, NULL, tool, 2, TR_ERR_UNSUPPORTED,
                 "message 1", "mistral");
}

static void test_render_errors(void **state) {
    (void)state;
    const chat_message wiz[] = {M("user", "Hi"), M("wizard", "zap")};
    for (int k = CHAT_TEMPLATE_CHATML; k <= CHAT_TEMPLATE_MISTRAL; k++)
        expect_error((chat_template_kind)k, NULL, wiz, 2, TR_ERR_INVALID_ARG,
                     "message 1", "\"wizard\"");
    const chat_message nul[] = {M(NULL, "x")};
    expect_error(CHAT_TEMPLATE_CHATML, NULL, nul, 1, TR_ERR_INVALID_ARG,
                 "message 0", "no role");
    const chat_message hi[] = {M("user", "Hi")};
    expect_error(CHAT_TEMPLATE_NONE, NULL, hi, 1, TR_ERR_INVALID_ARG,
                 "kind", NULL);
    expect_error((chat_template_kind)99, NULL, hi, 1, TR_ERR_INVALID_ARG,
                 "kind", NULL);
    expect_error(CHAT_TEMPLATE_CHATML, NULL, NULL, 2, TR_ERR_INVALID_ARG,
                 "NULL", NULL);
    /* roles are case-sensitive, as in the templates */
    const chat_message upper[] = {M("User", "Hi")};
    expect_error(CHAT_TEMPLATE_CHATML, NULL, upper, 1, TR_ERR_INVALID_ARG,
                 "\"User\"", NULL);
    assert_int_equal(tr_chat_render(CHAT_TEMPLATE_CHATML, NULL, hi, 1, true,
                                 NULL, NULL, NULL),
                     TR_ERR_INVALID_ARG);
}

/* CHAT_END_CONTINUE: the final assistant message stays open, in every
 * kind (trimmed where the kind trims); another last role is refused. */
static void test_continue_final(void **state) {
    (void)state;
    chat_message m[] = {M("user", "Hi"), M("assistant", " The answer is ")};
    const chat_render_end C = CHAT_END_CONTINUE;
    expect_render(CHAT_TEMPLATE_CHATML, NULL, m, 2, C,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n The answer is ");
    expect_render(CHAT_TEMPLATE_LLAMA3, NULL, m, 2, C,
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nThe answer is");
    expect_render(CHAT_TEMPLATE_GEMMA, NULL, m, 2, C,
                  "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nThe answer is");
    expect_render(CHAT_TEMPLATE_LLAMA2, NULL, m, 2, C, "[INST] Hi [/INST] The answer is");
    expect_render(CHAT_TEMPLATE_MISTRAL, NULL, m, 2, C, "[INST] Hi [/INST] The answer is ");
    /* an empty assistant message: the open turn alone */
    chat_message e[] = {M("user", "Hi"), M("assistant", "")};
    expect_render(CHAT_TEMPLATE_CHATML, NULL, e, 2, C,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* the last message must be the assistant's */
    char *out = (char *)0x1;
    tr_diag d;
    memset(&d, 0, sizeof d);
    assert_int_equal(tr_chat_render(CHAT_TEMPLATE_CHATML, NULL, m, 1, C, &out, NULL, &d),
                     TR_ERR_INVALID_ARG);
    assert_ptr_equal(out, (char *)0x1);
    assert_non_null(strstr(d.message, "the last role is \"user\""));
    assert_int_equal(tr_chat_render(CHAT_TEMPLATE_CHATML, NULL, m, 0, C, &out, NULL, &d),
                     TR_ERR_INVALID_ARG);
}

static void test_long_content(void **state) {
    (void)state;
    size_t n = 1 << 20;
    char *big = malloc(n + 1);
    memset(big, 'a', n);
    big[n] = '\0';
    chat_message m[3] = {M("user", big), M("assistant", big), M("user", "x")};
    char *out = render_ok(CHAT_TEMPLATE_CHATML, NULL, m, 3, true);
    assert_int_equal(strlen(out), 3 * n / 3 * 2 + strlen("x") +
                                      3 * strlen("<|im_start|>\n<|im_end|>\n") +
                                      strlen("user") * 2 + strlen("assistant") +
                                      strlen("<|im_start|>assistant\n"));
    free(out);
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_default_system),
        cmocka_unit_test(test_model_template),
        cmocka_unit_test(test_chatml),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_continue_final),
        cmocka_unit_test(test_long_content),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
