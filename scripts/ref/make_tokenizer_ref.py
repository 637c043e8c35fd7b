#!/usr/bin/env python3
"""Reference token ids from llama.cpp for the tokenizer parity test.

Commands that produced the checked-in data (llama-cpp-python 0.3.36, built
on this machine; see scripts/ref/make_model_ref.py for the venv):

    ~/.cache/trellis/refvenv/bin/python scripts/ref/make_tokenizer_ref.py \
        ~/.cache/trellis/models/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/tokenizer
    ~/.cache/trellis/refvenv/bin/python scripts/ref/make_tokenizer_ref.py \
        ~/.cache/trellis/models/gemma-3-270m-q4_k_m.gguf tests/data/tokenizer gemma3

With a third argument NAME (a SentencePiece-style "llama" vocabulary such
as Gemma 3's), it writes instead:

  NAME_ref.jsonl     the same strings plus the chat-template strings of
                     gemma_strings(), as above (special=true too where '<'
                     occurs).
  NAME_prefix.jsonl  the strings (special=false, and special=true where '<'
                     occurs) with tokenizer.ggml.add_space_prefix flipped
                     to true in a temporary copy (a one-byte patch), to
                     check the other setting of that flag.
  NAME_meta.json     as smollm2_meta.json.
  NAME_chat.jsonl    {"messages", "text", "ids"}: llama.cpp's rendering of
                     a few conversations with its built-in "gemma"
                     template (llama_chat_apply_template), and the ids of
                     that text (special=true).

Writes, into the output folder:

  smollm2_ref.jsonl        one JSON object per line: {"text", "special", "ids"}
                           for the model's own pre-tokenizer ("smollm"); every
                           string is tokenized with special=false, and those
                           containing '<' also with special=true.
  smollm2_pre_<name>.jsonl the same strings (special=false only) tokenized
                           with the SAME vocabulary but tokenizer.ggml.pre
                           set to <name> (gpt-2, llama-bpe, qwen2, default), to
                           check the other pre-tokenizer regexes. The patched
                           model copies live in a temporary folder only.
  smollm2_meta.json        n_vocab, bos, eos, and the ids llama.cpp marks
                           end-of-generation (llama_vocab_is_eog).

The strings come from a fixed hand-written list plus seeded random mixes
(deterministic: random.Random(1234)). Invalid UTF-8 is out of scope here
(llama.cpp replaces it by U+FFFD while Trellis keeps the bytes).

Patching the pre-tokenizer name: the GGUF header is rewritten in place with
general.name lengthened or shortened by the same number of bytes, so that
every later offset (tensor infos, data) stays where it was.
"""
import ctypes
import json
import os
import random
import struct
import sys
import tempfile

import llama_cpp
from llama_cpp import Llama


def hand_strings():
    s = []
    # --- ASCII prose ---
    s += [
        "Hello world",
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "Hello, we can use",
        "The capital of France is",
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
        "It was the best of times, it was the worst of times, it was the age of wisdom.",
        "A radix tree is a space-optimized trie in which each node that is the only child is merged with its parent.",
        "Call me Ishmael. Some years ago - never mind how long precisely - having little or no money in my purse...",
        "To be, or not to be: that is the question.",
        "Why? Because!! Really?! Yes... no; maybe: perhaps.",
        "(parenthetical) [bracketed] {braced} <angled>",
        "\"Double quoted\" and 'single quoted' and `backticked`",
        "e.g. i.e. etc. vs. Mr. Mrs. Dr. St.",
        "well-known state-of-the-art top-to-bottom",
        "a",
        "A",
        " ",
        "I",
        "!",
        "ab",
        "hello",
        " hello",
        "  hello",
        "hello ",
        "Hello World HELLO world hElLo WoRlD",
        "camelCaseIdentifier snake_case_identifier SCREAMING_SNAKE kebab-case-name",
        "XMLHttpRequest getHTTPResponseCode IOError",
        "THIS IS ALL CAPS TEXT WITH SOME WORDS",
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
    ]
    # --- contractions ---
    s += [
        "I'm sure you're right, they'll see we've done what she'd said.",
        "don't won't can't shouldn't isn't",
        "It's Bob's dog's bone.",
        "I'M SURE YOU'RE RIGHT, THEY'LL SEE WE'VE DONE WHAT SHE'D SAID.",
        "'s 't 're 've 'm 'll 'd",
        "'S 'T 'RE 'VE 'M 'LL 'D",
        "rock 'n' roll",
        "''quoted''",
        "o'clock O'Brien d'Artagnan",
        "'",
        "'''",
        "he said 'hello'",
        "the '90s and '00s",
        "l'homme qu'il aime",
        "it's 5 o'clock",
    ]
    # --- numbers ---
    s += [
        "0",
        "7",
        "42",
        "123",
        "1234",
        "12345",
        "1234567890",
        "3.14159",
        "3.14159265358979323846264338327950288419716939937510",
        "-273.15",
        "+1 (555) 123-4567",
        "1,000,000",
        "1.000.000,50",
        "6.022e23",
        "1e-9",
        "0x1F 0b1010 0o777",
        "2024-01-15T10:30:00Z",
        "12:34:56",
        "v1.2.3-rc.4",
        "100%",
        "$19.99",
        "€5,00",
        "Hello world! 123",
        "abc123def456",
        "a1b2c3",
        "1st 2nd 3rd 4th",
        "99 bottles of beer",
        " 1 2 3 4 5 6 7 8 9 10",
        "00000000000000000000000000000000000000000",
        "1" * 100,
        "3.",
        ".5",
        "1/2 3/4",
        "x=1;y=22;z=333",
    ]
    # --- whitespace ---
    s += [
        "  multiple   spaces",
        "a  b",
        "a   b",
        "a    b",
        "a     b",
        "a          b",
        "a\tb",
        "a\t\tb",
        "a \tb",
        "a\t b",
        "a\nb",
        "a\n\nb",
        "a\n\n\nb",
        "a \n b",
        "a\r\nb",
        "a\r\n\r\nb",
        "a\rb",
        "trailing space ",
        "trailing spaces   ",
        "trailing tab\t",
        "trailing newline\n",
        "trailing newlines\n\n",
        " leading space",
        "   leading spaces",
        "\tleading tab",
        "\nleading newline",
        "    ",
        "\t",
        "\n",
        "\n\n",
        "\n\n\n\n",
        " \n",
        "\n ",
        " \t \n \r\n ",
        "line one\nline two\nline three",
        "    indented code\n        more indented\n",
        "a\u00a0b",
        "a\u3000b",
        "a\u2003b",
        "a\u2028b",
        "a\u0085b",
        "a\u000bb",
        "a\u000cb",
        "a\u001cb",
        "a\u200bb",
        "x \u00a0 y",
        "end  1",
        "word\t\t1",
        "  12",
        "a  'll",
        "a   !",
    ]
    # --- Unicode ---
    s += [
        "Café déjà vu.",
        "naïve façade résumé coöperate",
        "Größe Straße Übermäßig",
        "Tiếng Việt có dấu",
        "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏ",
        "e\u0301 a\u0300 n\u0303",
        "Привет, мир! Как дела?",
        "Γειά σου Κόσμε",
        "你好，世界！",
        "我爱自然语言处理。",
        "日本語のテキストです。カタカナとひらがな。",
        "안녕하세요 세계",
        "مرحبا بالعالم",
        "العربية ١٢٣٤٥",
        "שלום עולם",
        "नमस्ते दुनिया",
        "हिन्दी में लिखा गया वाक्य।",
        "สวัสดีชาวโลก",
        "ሰላም ልዑል",
        "Ελληνικά και English mixed 中文",
        "😀",
        "😀😃😄😁",
        "I ❤️ NY",
        "👍🏽",
        "👨‍👩‍👧‍👦",
        "👩🏽‍💻 coding",
        "🏳️‍🌈",
        "🇫🇷🇩🇪🇯🇵",
        "1️⃣ 2️⃣ #️⃣",
        "emoji at end 🎉",
        "🎉 emoji at start",
        "mixed😀text😃here",
        "∀x∈ℝ: x²≥0",
        "½ ¾ ⅓ ² ³ ⁴",
        "Ⅻ ⅻ ① ② ③",
        "０１２３ ＡＢＣ",
        "٠١٢٣٤٥٦٧٨٩",
        "१२३",
        "\ufeffBOM at start",
        "©®™ §¶ †‡ •",
        "— – … ‘quotes’ “double”",
        "¡Hola! ¿Qué tal?",
        "«guillemets» „Anführungszeichen“",
        "ﬁ ﬂ ligatures",
        "Ǆ ǅ ǆ",
        "ı İ ß ẞ",
        "𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭",
        "𐍈 𐌰 gothic",
        "\u0000",
        "a\u0000b",
        "\u0001\u0002\u0003",
        "\u007f",
        "\ue000 private use",
        "↑↓←→ ⇒ ⇔",
        "₀₁₂ ⁰¹²",
    ]
    # --- code ---
    s += [
        "def f(x):\n    return x * 2\n",
        "for i in range(10):\n\tprint(i)\n",
        "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\n",
        "#include <stdio.h>\n\nint main(void) {\n    printf(\"hello\\n\");\n    return 0;\n}\n",
        "static inline uint32_t hash(const char *s) { uint32_t h = 2166136261u; while (*s) h = (h ^ (uint8_t)*s++) * 16777619u; return h; }",
        "const x = (a, b) => a + b;\nconsole.log(`sum: ${x(1, 2)}`);",
        "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
        "<html><head><title>Test</title></head><body><p class=\"x\">Hi</p></body></html>",
        "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
        "\\begin{equation} E = mc^2 \\end{equation}",
        "x += 1; y -= 2; z *= 3; w /= 4; a %= 5; b **= 6; c //= 7;",
        "if (a && b || !c) { return a != b ? a : b; }",
        "arr[i][j] = arr[i-1][j-1] + 1;",
        "    \n    \n",
        "}\n\n\n\nint x;",
        "public static void main(String[] args) throws Exception {}",
        "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n    pass\n",
        "// comment\n/* block\n   comment */\n",
        "@decorator\nasync def handler(req: Request) -> Response:\n    ...",
        "matrix = [[1, 2, 3],\n          [4, 5, 6]]",
        "a==b!=c<=d>=e<<f>>g&&h||i",
        "std::vector<std::unique_ptr<Node>> children;",
        "lambda x: x**2 + 2*x + 1",
    ]
    # --- URLs, JSON, markdown, data ---
    s += [
        "https://www.example.com/path/to/page?query=value&other=123#section",
        "http://localhost:8080/api/v1/users/42",
        "mailto:someone@example.org",
        "user.name+tag@sub.domain.co.uk",
        "ftp://files.example.net/pub/file-1.2.3.tar.gz",
        "{\"name\": \"Alice\", \"age\": 30, \"tags\": [\"a\", \"b\"], \"active\": true, \"score\": null}",
        "{\"nested\": {\"deep\": {\"deeper\": [1, 2, {\"x\": -1.5e3}]}}}",
        "[1,2,3,4,5]",
        "{\"unicode\": \"caf\\u00e9\", \"emoji\": \"\\ud83d\\ude00\"}",
        "# Heading\n\n## Subheading\n\n- item one\n- item two\n\n1. first\n2. second\n",
        "**bold** _italic_ `code` [link](http://x.y) ![img](a.png)",
        "```python\nprint('hi')\n```",
        "| a | b |\n|---|---|\n| 1 | 2 |",
        "> quoted text\n>> nested quote",
        "key: value\nlist:\n  - one\n  - two\n",
        "name,age,city\nAlice,30,Paris\nBob,25,\"New York\"\n",
        "<!-- comment --> &amp; &lt; &gt; &#39;",
        "C:\\Users\\name\\Documents\\file.txt",
        "/usr/local/bin/python3 --version",
        "--flag=value -v -abc --no-color",
    ]
    # --- special tokens (each also gets special=true) ---
    s += [
        "<|im_start|>user\nhi<|im_end|>",
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>",
        "<|im_end|>",
        "<|im_start|>",
        "<|im_start|><|im_end|>",
        "<|im_end|><|im_end|><|im_end|>",
        "text before<|endoftext|>text after",
        "abc<|im_end|>def",
        " <|im_start|> spaced <|im_end|> ",
        "\n<|im_start|>\n",
        "<|im_end",
        "<|im_start|im_end|>",
        "<|im_start|>user<|im_start|>",
        "<file_sep><filename>main.py\nprint(1)",
        "<jupyter_start><jupyter_code>x = 1<jupyter_output>1",
        "<repo_name>trellis<reponame>x",
        "<issue_start>bug<issue_comment>fixed<issue_closed>",
        "<gh_stars>100",
        "<empty_output><jupyter_script><jupyter_text>",
        "<|im_start|>assistant\nThe answer is 4.<|im_end|>\n",
        "<<|im_end|>>",
        "<|<|im_end|>|>",
        "<p>not special</p>",
    ]
    # --- edge cases ---
    s += [
        "",
        "".join(chr(c) for c in range(32, 127)),
        "".join(chr(c) for c in range(1, 32)),
        "".join(chr(c) for c in range(0xa0, 0x180)),
        "a" * 1000,
        "ab" * 300,
        "hello " * 100,
        "The quick brown fox. " * 30,
        " " * 100,
        "\n" * 50,
        "\t" * 20 + "x",
        "!" * 50,
        "-" * 80,
        "=" * 40 + "\n",
        "...",
        "?!?!",
        "😀" * 20,
        "中" * 50,
    ]
    return s


def gemma_strings():
    """Gemma's chat-template strings and its own special texts."""
    turn = "<start_of_turn>{}\n{}<end_of_turn>\n"
    s = [
        turn.format("user", "What is the capital of France?") + "<start_of_turn>model\n",
        "<bos>" + turn.format("user", "You are a helpful assistant.\n\nHi there!")
        + turn.format("model", "Hello! How can I help you today?")
        + turn.format("user", "Tell me a joke about radix trees.") + "<start_of_turn>model\n",
        turn.format("user", "Write a Python function that reverses a string.")
        + "<start_of_turn>model\n```python\ndef rev(s):\n    return s[::-1]\n```<end_of_turn>\n",
        turn.format("user", "Translate 'good morning' into Spanish, French and German."),
        "<start_of_turn>user\n  indented\tand\ttabbed  <end_of_turn>",
        "<start_of_turn>model\n",
        "<end_of_turn>",
        "<start_of_turn><end_of_turn><eos><bos><pad><unk><mask>",
        "<eos>",
        "<bos>Hello",
        "text<eos>",
        "<start_of_image><end_of_image>[multimodal]",
        "<unused0> <unused1><unused99>",
        "<start_of_turn",
        "<start_of_turn>>",
        "<<start_of_turn>>",
        "<0x41><0x0A>",
        "▁ ▁▁ ▁x",
        "<h1>Title</h1><table><tr><td>x</td></tr></table>",
        "<b>bold</b> <i>it</i> <br> <p>",
        " " * 31 + "x",
        " " * 32 + "x",
        " " * 40,
        "\n" * 31 + "x",
        "\n" * 33,
        "\t" * 40 + "x",
        "a \n b \n\n c",
        "  leading and trailing  ",
        "\u2581 literal lower-one-eighth block",
        "日本語の文章\n\nと改行",
        "𝕳𝖊𝖑𝖑𝖔\u200d🏳️\u200d🌈",
    ]
    return s


def random_strings(n):
    rng = random.Random(1234)
    pools = [
        list("abcdefghijklmnopqrstuvwxyz"),
        list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
        list("0123456789"),
        list(" "), list(" "), list(" "),
        list("\t\n\r"),
        list(".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`"),
        list("éèàùçñöüßøåæœ"),
        list("中文字日本語한국어"),
        list("абвгдежзийклмн"),
        list("αβγδεζηθ"),
        list("नमस्तेहिन्दी"),
        list("مرحباالعربية"),
        ["😀", "👍", "👍🏽", "🇫🇷", "❤️", "👨‍👩‍👧", "🎉", "\u200d"],
        ["\u00a0", "\u3000", "\u2009", "\u0085", "\u2028"],
        ["١", "٢", "²", "½", "Ⅻ", "①", "０"],
        ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"],
        ["  ", "   ", "\n\n", " \n", "\t\t", "    "],
        ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "|>"],
    ]
    out = []
    for i in range(n):
        length = rng.randint(1, 40)
        k = rng.randint(1, 4)
        chosen = rng.sample(pools, k)
        out.append("".join(rng.choice(rng.choice(chosen)) for _ in range(length)))
    return out


def all_strings():
    seen = set()
    out = []
    for t in hand_strings() + random_strings(160):
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def patch_pre(src, dst, new_pre):
    """Copies src to dst with tokenizer.ggml.pre = new_pre, keeping every
    offset after the header's key/value section unchanged (general.name
    absorbs the length difference)."""
    with open(src, "rb") as f:
        data = bytearray(f.read())

    def find_str_kv(key):
        k = key.encode()
        pat = struct.pack("<Q", len(k)) + k + struct.pack("<I", 8)
        pos = data.find(pat)
        assert pos >= 0, key
        vpos = pos + len(pat)
        (vlen,) = struct.unpack_from("<Q", data, vpos)
        return vpos, vlen

    pre_pos, pre_len = find_str_kv("tokenizer.ggml.pre")
    name_pos, name_len = find_str_kv("general.name")
    delta = len(new_pre) - pre_len
    new_name_len = name_len - delta
    assert new_name_len > 0
    old_name = bytes(data[name_pos + 8:name_pos + 8 + name_len])
    new_name = (old_name + b"x" * max(0, -delta))[:new_name_len]
    pieces = []
    # both keys are rewritten; they may come in either order in the file
    edits = sorted([(pre_pos, 8 + pre_len, struct.pack("<Q", len(new_pre)) + new_pre.encode()),
                    (name_pos, 8 + name_len, struct.pack("<Q", len(new_name)) + new_name)])
    cur = 0
    for pos, old_size, repl in edits:
        pieces.append(bytes(data[cur:pos]))
        pieces.append(repl)
        cur = pos + old_size
    pieces.append(bytes(data[cur:]))
    out = b"".join(pieces)
    assert len(out) == len(data)
    with open(dst, "wb") as f:
        f.write(out)


def patch_bool(src, dst, key, value):
    """Copies src to dst with the bool key set to value (a one-byte patch)."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    k = key.encode()
    pat = struct.pack("<Q", len(k)) + k + struct.pack("<I", 7)
    pos = data.find(pat)
    assert pos >= 0, key
    data[pos + len(pat)] = 1 if value else 0
    with open(dst, "wb") as f:
        f.write(data)


def load(path):
    return Llama(model_path=path, vocab_only=True, verbose=False)


def tokenize(llm, text, special):
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)


def write_jsonl(path, llm, strings):
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for t in strings:
            modes = [False, True] if "<" in t else [False]
            for sp in modes:
                ids = tokenize(llm, t, sp)
                f.write(json.dumps({"text": t, "special": sp, "ids": ids},
                                   ensure_ascii=False) + "\n")
                n += 1
    return n


def write_meta(path, llm, strings, n):
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    meta = {
        "llama_cpp_python": llama_cpp.__version__,
        "n_vocab": n_vocab,
        "bos": llama_cpp.llama_vocab_bos(vocab),
        "eos": llama_cpp.llama_vocab_eos(vocab),
        "eog": eog,
        "n_strings": len(strings),
        "n_lines": n,
    }
    with open(path, "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return eog


CHATS = [
    [("user", "What is the capital of France?")],
    [("system", "You are a helpful assistant."), ("user", "Hi there!"),
     ("assistant", "Hello! How can I help you today?"),
     ("user", "Tell me a joke about radix trees.")],
    [("user", "  Spaces around  "), ("assistant", "\nTrimmed?\n"), ("user", "Yes.")],
    [("system", "Answer in French."), ("user", "Good morning!")],
]


def chat_render(tmpl, msgs):
    arr = (llama_cpp.llama_chat_message * len(msgs))()
    keep = []
    for i, (r, c) in enumerate(msgs):
        rb, cb = r.encode(), c.encode()
        keep += [rb, cb]
        arr[i].role = rb
        arr[i].content = cb
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_chat_apply_template(tmpl, arr, len(msgs), True, buf, len(buf))
    assert 0 < n < len(buf), n
    return buf.raw[:n].decode()


def main_spm(model, outdir, name):
    strings = all_strings()
    for t in gemma_strings():
        if t not in strings:
            strings.append(t)
    llm = load(model)
    n = write_jsonl(os.path.join(outdir, name + "_ref.jsonl"), llm, strings)
    eog = write_meta(os.path.join(outdir, name + "_meta.json"), llm, strings, n)
    with open(os.path.join(outdir, name + "_chat.jsonl"), "w", encoding="utf-8") as f:
        for msgs in CHATS:
            text = chat_render(b"gemma", msgs)
            ids = tokenize(llm, text, True)
            f.write(json.dumps({"messages": [{"role": r, "content": c} for r, c in msgs],
                                "text": text, "ids": ids}, ensure_ascii=False) + "\n")
    del llm
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "patched.gguf")
        patch_bool(model, path, "tokenizer.ggml.add_space_prefix", True)
        llm = load(path)
        write_jsonl(os.path.join(outdir, name + "_prefix.jsonl"), llm, strings)
        del llm
    print("strings: %d, lines: %d, eog: %s" % (len(strings), n, eog))


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        sys.exit(2)
    model, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    if len(sys.argv) == 4:
        main_spm(model, outdir, sys.argv[3])
        return
    strings = all_strings()

    llm = load(model)
    n = 0
    with open(os.path.join(outdir, "smollm2_ref.jsonl"), "w", encoding="utf-8") as f:
        for t in strings:
            modes = [False, True] if "<" in t else [False]
            for sp in modes:
                ids = tokenize(llm, t, sp)
                f.write(json.dumps({"text": t, "special": sp, "ids": ids},
                                   ensure_ascii=False) + "\n")
                n += 1

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    meta = {
        "llama_cpp_python": llama_cpp.__version__,
        "n_vocab": n_vocab,
        "bos": llama_cpp.llama_vocab_bos(vocab),
        "eos": llama_cpp.llama_vocab_eos(vocab),
        "eog": eog,
        "n_strings": len(strings),
        "n_lines": n,
    }
    with open(os.path.join(outdir, "smollm2_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    del llm

    with tempfile.TemporaryDirectory() as tmp:
        for pre in ["gpt-2", "llama-bpe", "qwen2", "default"]:
            path = os.path.join(tmp, "patched.gguf")
            patch_pre(model, path, pre)
            llm = load(path)
            name = pre.replace("-", "_")
            with open(os.path.join(outdir, "smollm2_pre_%s.jsonl" % name), "w",
                      encoding="utf-8") as f:
                for t in strings:
                    ids = tokenize(llm, t, False)
                    f.write(json.dumps({"text": t, "special": False, "ids": ids},
                                       ensure_ascii=False) + "\n")
            del llm
            os.unlink(path)
    print("strings: %d, lines: %d, eog: %s" % (len(strings), n, eog))


if __name__ == "__main__":
    main()
