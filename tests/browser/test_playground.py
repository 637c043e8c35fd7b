"""The playground page in a real headless Chromium (Debian's chromium and
chromedriver, driven by Selenium from PyPI): tests/browser/run.sh runs it.

Steps, each with a screenshot in OUTDIR:
  1. the page loads, shows the model, and logic.js's unit tests pass in it
  2. a chat message gets a streamed answer with its figures; editing the
     question brings it back and sends it again
  3. a JSON Schema answer is checked in the page and marked valid
  4. an invalid regex shows the compiler's error at its position, before
     anything is sent
  5. a server with --api-key: the page asks for the key, then works
Throughout: no console error (the 401 of step 5 excepted) and no request
to any host but the server. Exit status 1 on any failure.

    python test_playground.py BUILD_DIR OUTDIR
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

HERE = os.path.dirname(os.path.abspath(__file__))


def start_server(binary, *args):
    d = tempfile.mkdtemp(prefix="trellis-ui-")
    pf = os.path.join(d, "port")
    log = open(os.path.join(d, "log"), "w")
    p = subprocess.Popen([binary, "serve", "--port", "0", "--port-file", pf, "--ctx", "2048",
                          *args], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not (os.path.exists(pf) and open(pf).read().strip()):
        if p.poll() is not None or time.time() > deadline:
            raise RuntimeError("server did not start: " + open(log.name).read())
        time.sleep(0.05)
    port = int(open(pf).read())
    # The port is open before the model has loaded (/health answers 503
    # "loading" until then): a chat sent earlier is refused, so wait.
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return p, port
        except (urllib.error.URLError, OSError):
            pass
        if p.poll() is not None or time.time() > deadline:
            raise RuntimeError("server did not become ready: " + open(log.name).read())
        time.sleep(0.1)


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
              "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync"]:
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    svc = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(options=o, service=svc)


def requested_hosts(drv):
    hosts = set()
    for e in drv.get_log("performance"):
        m = json.loads(e["message"])["message"]
        if m.get("method") == "Network.requestWillBeSent":
            url = m["params"]["request"]["url"]
            if url.startswith("http"):
                hosts.add(url.split("/")[2])
    return hosts


def console_errors(drv, allow=()):
    return [e["message"] for e in drv.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allow)]


def main():
    build, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    binary = os.path.join(build, "trellis")
    failures = []
    srv, port = start_server(binary)
    drv = browser()
    wait = WebDriverWait(drv, 120)
    base = f"http://127.0.0.1:{port}"

    def step(name, fn):
        try:
            fn()
            print(f"PASS {name}")
        except Exception:  # noqa: BLE001 (every failure is reported)
            failures.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}")
        drv.save_screenshot(os.path.join(out, name + ".png"))

    def load():
        drv.get(base + "/")
        wait.until(lambda d: "SmolLM2" in d.find_element(By.ID, "model").text)
        with open(os.path.join(HERE, "logic_test.js")) as f:
            fails = drv.execute_script(f.read() + "\nreturn runLogicTests(TrellisLogic);")
        assert fails == [], fails

    def chat():
        drv.find_element(By.ID, "input").send_keys("What is the capital of France?")
        drv.find_element(By.ID, "send").click()
        stats = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".msg.assistant .stats")))
        body = drv.find_element(By.CSS_SELECTOR, ".msg.assistant .body").text
        assert body.strip(), "empty answer"
        assert "tokens" in stats.text and "TTFT" in stats.text, stats.text
        assert drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .tok"), "no token view"
        # edit the question: it comes back in the input, the answer goes
        drv.find_element(By.CSS_SELECTOR, ".msg.user button.edit").click()
        assert drv.find_element(By.ID, "input").get_attribute("value").startswith("What is")
        assert not drv.find_elements(By.CSS_SELECTOR, ".msg")
        drv.find_element(By.ID, "send").click()
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".msg.assistant .stats")))

    def schema():
        drv.find_element(By.ID, "clear").click()
        Select(drv.find_element(By.ID, "kind")).select_by_value("json_schema")
        drv.find_element(By.ID, "input").send_keys("Describe a person as JSON.")
        drv.find_element(By.ID, "send").click()
        v = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".msg.assistant .verdict")))
        assert v.get_attribute("data-valid") == "true", v.text
        json.loads(drv.find_element(By.CSS_SELECTOR, ".msg.assistant .body").text)

    def bad_regex():
        drv.find_element(By.ID, "clear").click()
        Select(drv.find_element(By.ID, "kind")).select_by_value("regex")
        c = drv.find_element(By.ID, "constraint")
        c.clear()
        c.send_keys("ab(c")
        drv.find_element(By.ID, "input").send_keys("anything")
        drv.find_element(By.ID, "send").click()
        st = drv.find_element(By.ID, "constraint-status")
        wait.until(lambda d: st.get_attribute("data-offset") is not None)
        assert st.get_attribute("data-offset") == "2", st.text
        assert "missing )" in st.text and "^" in st.text, st.text
        assert not drv.find_elements(By.CSS_SELECTOR, ".msg"), "sent despite the error"
        Select(drv.find_element(By.ID, "kind")).select_by_value("none")

    step("1-page-loads", load)
    step("2-chat-streams", chat)
    step("3-json-schema-valid", schema)
    step("4-regex-error-at-position", bad_regex)
    # the one error the steps cause on purpose: step 4's check answered 400
    errs = console_errors(drv, allow=("/v1/completions - Failed to load resource: the server "
                                      "responded with a status of 400",))
    if errs:
        failures.append("console errors")
        print("FAIL console errors:", errs)
    hosts = requested_hosts(drv)
    if hosts - {f"127.0.0.1:{port}"}:
        failures.append("other hosts")
        print("FAIL requests to other hosts:", hosts)
    drv.get("about:blank")  # the page stops polling before its server goes
    srv.terminate()
    srv.wait(30)
    drv.get_log("browser")

    # 5: the API key
    srv, port = start_server(binary, "--api-key", "sekrit")
    base = f"http://127.0.0.1:{port}"

    def key():
        drv.get(base + "/")
        dialog = wait.until(EC.visibility_of_element_located((By.ID, "key-dialog")))
        drv.save_screenshot(os.path.join(out, "5a-key-asked.png"))
        drv.find_element(By.ID, "key-input").send_keys("sekrit")
        drv.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
        wait.until(lambda d: "SmolLM2" in d.find_element(By.ID, "model").text)
        assert not dialog.is_displayed()
        assert drv.execute_script("return sessionStorage.getItem('trellis-api-key')") == "sekrit"

    step("5-api-key", key)
    errs = console_errors(drv, allow=("status of 401",))
    if errs:
        failures.append("console errors (key)")
        print("FAIL console errors:", errs)
    drv.quit()
    srv.terminate()
    srv.wait(30)
    print("browser tests:", "PASS" if not failures else "FAIL: " + ", ".join(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
