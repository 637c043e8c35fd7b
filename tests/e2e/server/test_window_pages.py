"""Sliding-window pages through the server, on Gemma 3 270M (its local
layers in pages of their own by default; README, "Sliding-window pages"):
/server_info reports the units, a prompt longer than the window gives the
same greedy text as a server with --kv-full-pages, a second request on the
same prompt finds it cached, and /metrics counts the windowed pages let
go. Needs the Gemma model (scripts/setup.sh puts it in the model cache)."""
import os

from conftest import Server
from test_kv_disk import complete, long_prompt, metric


def gemma_path():
    for root in (os.environ.get("TRELLIS_CACHE"),
                 os.environ.get("XDG_CACHE_HOME") and
                 os.path.join(os.environ["XDG_CACHE_HOME"], "trellis"),
                 os.path.join(os.path.expanduser("~"), ".cache", "trellis")):
        if root:
            p = os.path.join(root, "models", "gemma-3-270m-q4_k_m.gguf")
            if os.path.exists(p):
                return p
    raise AssertionError("Gemma 3 270M is not in the model cache "
                         "(scripts/setup.sh --model gemma3-270m)")


def run(*args):
    s = Server("-m", gemma_path(), "--ctx", "1024", *args)
    try:
        status, info = s.get("/server_info")
        assert status == 200
        p = long_prompt(11, 640)
        text1, u1 = complete(s, p)
        text2, u2 = complete(s, p)
        assert text1 == text2
        assert u1["prompt_tokens"] > 600, u1
        cached = u2.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        return info, text1, u1["prompt_tokens"], cached, metric(
            s, "trellis_kv_window_released_total")
    finally:
        s.stop()


def test_split_pages_same_text_and_cache():
    info, text, n, cached, released = run()
    assert info["kv_units"] == 6, info
    assert released > 0
    assert cached >= n - 16, (cached, n)  # the prompt's full pages
    info_f, text_f, n_f, cached_f, released_f = run("--kv-full-pages")
    assert info_f["kv_units"] == 1, info_f
    assert released_f == 0
    assert n_f == n
    assert cached_f >= n - 16
    assert text == text_f
