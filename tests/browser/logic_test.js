/* logic_test.js — unit tests of the playground's logic.js. Runs under
 * node (`node tests/browser/logic_test.js`, exit 1 on a failure) and in
 * the headless browser (test_playground.py calls runLogicTests on the
 * page's TrellisLogic). Returns the failures as strings. */
"use strict";

function runLogicTests(L) {
  var fails = [];
  function eq(name, got, want) {
    var g = JSON.stringify(got), w = JSON.stringify(want);
    if (g !== w) fails.push(name + ": got " + g + ", want " + w);
  }

  /* SSE: events split anywhere, CRLF, multi-line data, comments */
  var r = L.sseReader(), got = [];
  var stream = "data: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
  for (var i = 0; i < stream.length; i += 3) got = got.concat(r.feed(stream.slice(i, i + 3)));
  eq("sse", got, ["{\"a\":1}", "x\ny", "[DONE]"]);
  eq("sse incomplete", L.sseReader().feed("data: half"), []);

  /* request building */
  var b = L.buildRequest({ temperature: "0.5", top_p: "", max_tokens: "12", seed: "x",
                           stop: "a||b", kind: "regex", constraint: "[0-9]+" },
                         [{ role: "user", content: "hi" }]);
  eq("request temperature", b.temperature, 0.5);
  eq("request empty top_p left out", "top_p" in b, false);
  eq("request bad seed left out", "seed" in b, false);
  eq("request stop", b.stop, ["a", "b"]);
  eq("request regex", b.regex, "[0-9]+");
  eq("request streams with usage", [b.stream, b.stream_options.include_usage], [true, true]);
  var js = L.buildRequest({ kind: "json_schema", constraint: "{\"type\":\"integer\"}" }, []);
  eq("request schema", js.response_format.json_schema.schema, { type: "integer" });
  var threw = false;
  try { L.constraintFields("choices", "[1,2]"); } catch (e) { threw = true; }
  eq("choices must be strings", threw, true);
  threw = false;
  try { L.constraintFields("json_schema", "{nope"); } catch (e) { threw = true; }
  eq("schema must be JSON", threw, true);

  /* error positions */
  eq("offset regex", L.errorOffset("bad regex: missing ) for group at byte 2", "ab(c"), 2);
  eq("offset ebnf", L.errorOffset("bad EBNF grammar: 2:3: undefined rule", "root ::= x\nx ::= y"), 13);
  eq("offset pointer", L.errorOffset("bad JSON Schema: /properties/b: bad", "{\"properties\": {\"a\": 1, \"b\": 2}}"), 24);
  eq("offset none", L.errorOffset("out of memory", "x"), -1);

  /* schema checking */
  var s = { type: "object", properties: { n: { type: "integer", minimum: 0 }, s: { type: "string", maxLength: 2 } },
            required: ["n"], additionalProperties: false };
  eq("schema ok", L.checkSchema({ n: 3, s: "ab" }, s), []);
  eq("schema missing", L.checkSchema({}, s).length, 1);
  eq("schema extra", L.checkSchema({ n: 1, x: 1 }, s).length, 1);
  eq("schema type", L.checkSchema({ n: 1.5 }, s).length, 1);
  eq("schema minimum", L.checkSchema({ n: -1 }, s).length, 1);
  eq("schema maxLength counts code points", L.checkSchema({ n: 1, s: "\u00e9\u00e9" }, s), []);
  eq("schema ref", L.checkSchema(5, { $ref: "#/$defs/a", $defs: { a: { type: "string" } } }).length, 1);
  eq("schema oneOf", L.checkSchema(1, { oneOf: [{ type: "integer" }, { type: "number" }] }).length, 1);
  eq("schema enum", L.checkSchema("c", { enum: ["a", "b"] }).length, 1);
  eq("schema items", L.checkSchema([1, "x"], { type: "array", items: { type: "integer" } }).length, 1);

  /* validation verdicts */
  eq("valid json", L.validate("json_schema", JSON.stringify(s), "{\"n\": 2}", "stop").valid, true);
  eq("invalid json", L.validate("json_schema", JSON.stringify(s), "{\"n\": ", "stop").valid, false);
  eq("cut output", L.validate("regex", "a+", "aaa", "length").valid, false);
  eq("regex full match", L.validate("regex", "a+", "aab", "stop").valid, false);
  eq("regex ok", L.validate("regex", "a+|b", "aaa", "stop").valid, true);
  eq("choices", L.validate("choices", "[\"x\",\"y\"]", "y", "stop").valid, true);
  eq("ebnf not checked", L.validate("ebnf", "root ::= \"a\"", "a", "stop").valid, null);
  eq("colour", L.logprobColor(0), "hsl(120, 70%, 85%)");
  return fails;
}

if (typeof module !== "undefined" && require.main === module) {
  var fails = runLogicTests(require("../../app/server/ui/logic.js"));
  fails.forEach(function (f) { console.log("FAIL " + f); });
  console.log(fails.length ? fails.length + " failed" : "logic_test: all passed");
  process.exit(fails.length ? 1 : 0);
}
