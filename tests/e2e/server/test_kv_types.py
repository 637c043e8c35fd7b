"""Quantized KV through the server: the types in force are reported, the
pool holds about twice (q8) and 3.5x (q4) the pages in the same --kv-mem,
and a q8 server answers as an f16 one does on a prompt whose first steps
are far from ties."""
from conftest import Server


def start(*args):
    return Server("--ctx", "1024", *args)


def test_types_reported_and_pool_scales():
    pages = {}
    outs = {}
    for kv in ("f16", "q8", "q4"):
        s = start("--kv-type", kv)
        try:
            status, info = s.get("/server_info")
            assert status == 200, info
            assert info["kv_cache_dtype_k"] == kv and info["kv_cache_dtype_v"] == kv, info
            assert 0 < info["kv_bytes"] <= 128 * 1024 * 1024, info
            pages[kv] = info["kv_pages"]
            status, r = s.post("/v1/completions", {"prompt": "The capital of France is",
                                                   "max_tokens": 3, "temperature": 0})
            assert status == 200, r
            outs[kv] = r["choices"][0]["text"]
        finally:
            s.stop()
    assert pages["q8"] >= 1.9 * pages["f16"], pages
    assert pages["q4"] >= 3.5 * pages["f16"], pages
    assert outs["q8"] == outs["f16"], outs


def test_mixed_types():
    s = start("--kv-type", "q8", "--kv-type-v", "f16")
    try:
        status, info = s.get("/server_info")
        assert (info["kv_cache_dtype_k"], info["kv_cache_dtype_v"]) == ("q8", "f16"), info
        assert "K q8, V f16" in s.read_log()
    finally:
        s.stop()
