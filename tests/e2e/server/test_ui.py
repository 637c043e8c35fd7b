"""The playground page as HTTP sees it (tests/browser/ drives it in a real
browser): `/` and `/ui/<file>` served from the binary with a strict
Content-Security-Policy, public even with --api-key, GET and HEAD only,
nothing that names another host, and --no-ui turning it off."""
import re

from conftest import Server


def test_page_and_headers(server):
    for path, ctype in [("/", "text/html"), ("/ui/app.js", "text/javascript"),
                        ("/ui/logic.js", "text/javascript"), ("/ui/style.css", "text/css")]:
        s, body, h = get(server, path)
        assert s == 200 and h["content-type"].startswith(ctype), (path, s, h)
        csp = h["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp, csp
        assert "unsafe" not in csp
        assert h["x-content-type-options"] == "nosniff"
        # nothing from another host, no inline handlers or scripts
        assert not re.search(rb"(src|href)=\"(https?:)?//", body), path
        assert not re.search(rb"\son[a-z]+=", body), path
    s, body, _ = get(server, "/")
    assert b"<script>" not in body and b"<style" not in body
    assert get(server, "/ui/nope.js")[0] == 404
    assert get(server, "/ui/")[0] == 404
    s, _, _ = get(server, "/", method="POST")
    assert s == 404  # no POST route at /
    s, body, h = get(server, "/", method="HEAD")
    assert s == 200 and body == b""


def test_public_with_api_key_and_off_with_no_ui():
    s = Server("--api-key", "k1")
    try:
        assert get(s, "/")[0] == 200           # the page asks for the key itself
        assert get(s, "/v1/models")[0] == 401  # the API still needs it
    finally:
        s.stop()
    s = Server("--no-ui")
    try:
        assert get(s, "/")[0] == 404 and get(s, "/ui/app.js")[0] == 404
        assert get(s, "/health")[0] == 200
    finally:
        s.stop()


def get(server, path, method="GET"):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    h = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, body, h
